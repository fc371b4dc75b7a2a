# gpudoctor fix --torch: review, then run one of the install lines (gpudoctor runs nothing).
# release data: torch releases up to 2.15.0, retrieved 2026-12-01 (30 days ago)
# torch 2.14.1: the newest release that runs here (1 newer skipped)
# cu126: kernels for sm_60; driver 590.44.01 ≥ 560.28.03 fully supports CUDA 12.6
# note: torch 2.15.0 probably has a fitting cu126 build too (secondary sources only): pip install torch==2.15.0 --index-url https://download.pytorch.org/whl/cu126
# note: no torchaudio release was published with torch 2.14.1 (the table pins none); left out
# note: NVML gives no compute capability for the pascal GPU(s) (NVML status driver_not_loaded): it is taken as 6.0, the lowest of pascal (from the PCI device id); a build with kernels for it runs on every pascal GPU of that major version. Pass --compute-capability X.Y to be exact
# note: the target Python is unknown (not_found: interpreter not recorded in the fixture root): releases are not filtered by Python; pass --python-version X.Y
pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu126
# or: uv pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu126
# or: uv pip install torch==2.14.1 torchvision==0.29.1 --torch-backend=cu126
