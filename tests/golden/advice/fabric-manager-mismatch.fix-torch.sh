# gpudoctor fix --torch: review, then run one of the install lines (gpudoctor runs nothing).
# release data: torch releases up to 2.15.0, retrieved 2026-12-01 (30 days ago)
# torch 2.14.1: the newest release that runs here (1 newer skipped)
# cu126: kernels for sm_90; driver 550.90.07 runs CUDA 12.6 only through minor-version compatibility (full support needs ≥ 560.28.03)
# note: torch 2.15.0 probably has a fitting cu126 build too (secondary sources only): pip install torch==2.15.0 --index-url https://download.pytorch.org/whl/cu126
# note: no torchaudio release was published with torch 2.14.1 (the table pins none); left out
# note: no variant of this release is fully supported by the driver: it runs through minor-version compatibility (some newer CUDA APIs and PTX JIT fail); upgrading the driver lifts that
# note: the target Python is unknown (not_found: interpreter not recorded in the fixture root): releases are not filtered by Python; pass --python-version X.Y
pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu126
# or: uv pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu126
# or: uv pip install torch==2.14.1 torchvision==0.29.1 --torch-backend=cu126
