# gpudoctor fix --torch: review, then run one of the install lines (gpudoctor runs nothing).
# release data: torch releases up to 2.15.0, retrieved 2026-12-01 (30 days ago)
# torch 2.14.1: the newest release that runs here (1 newer skipped)
# cu126: kernels for the GPUs; driver 575.64.05 ≥ 560.28.03 fully supports CUDA 12.6
# note: torch 2.15.0 probably has a fitting cu126 build too (secondary sources only): pip install torch==2.15.0 --index-url https://download.pytorch.org/whl/cu126
# note: no torchaudio release was published with torch 2.14.1 (the table pins none); left out
# note: the arch list was not checked for every GPU (compute capability unknown)
# note: NVML is not answering (driver_not_loaded: nvmlInit: Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED)): the compute capability of 2 NVIDIA GPU(s) is unknown, so no wheel's arch list can be checked against them; pass --compute-capability X.Y (one per GPU, see https://developer.nvidia.com/cuda-gpus)
# note: the target Python is unknown (not_found: interpreter not recorded in the fixture root): releases are not filtered by Python; pass --python-version X.Y
pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu126
# or: uv pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu126
# or: uv pip install torch==2.14.1 torchvision==0.29.1 --torch-backend=cu126
