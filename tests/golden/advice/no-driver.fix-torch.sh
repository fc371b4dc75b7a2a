# gpudoctor fix --torch: review, then run one of the install lines (gpudoctor runs nothing).
# release data: torch releases up to 2.15.0, retrieved 2026-12-01 (30 days ago)
# torch 2.15.0: the newest release
# cu132: kernels for sm_80; needs driver ≥ 580.65.06 (full CUDA 13.2 support from 595.45.04)
# note: driver unknown: cu132 needs an NVIDIA driver ≥ 580.65.06
# note: NVML gives no compute capability for the ampere GPU(s) (NVML status driver_not_loaded): it is taken as 8.0, the lowest of ampere (from the PCI device id); a build with kernels for it runs on every ampere GPU of that major version. Pass --compute-capability X.Y to be exact
# note: the target Python is unknown (not_found: interpreter not recorded in the fixture root): releases are not filtered by Python; pass --python-version X.Y
# note: the NVIDIA driver version is unknown (NVML did not answer and no nvidia kernel module is loaded): wheels are not filtered by driver; each choice says which driver it needs (or pass --driver-version)
pip install torch==2.15.0 torchvision==0.29.2 torchaudio==2.11.1 --index-url https://download.pytorch.org/whl/cu132
# or: uv pip install torch==2.15.0 torchvision==0.29.2 torchaudio==2.11.1 --index-url https://download.pytorch.org/whl/cu132
# or: uv pip install torch==2.15.0 torchvision==0.29.2 torchaudio==2.11.1 --torch-backend=cu132
