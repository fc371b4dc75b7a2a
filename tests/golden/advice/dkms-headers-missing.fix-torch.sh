# gpudoctor fix --torch: review, then run one of the install lines (gpudoctor runs nothing).
# release data: torch releases up to 2.15.0, retrieved 2026-12-01 (30 days ago)
# torch 2.15.0: the newest release
# cu132: kernels for the GPUs; needs driver ≥ 580.65.06 (full CUDA 13.2 support from 595.45.04)
# note: the arch list was not checked for every GPU (compute capability unknown)
# note: driver unknown: cu132 needs an NVIDIA driver ≥ 580.65.06
# note: NVML is not answering (driver_not_loaded: nvmlInit: Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED)): the compute capability of 2 NVIDIA GPU(s) is unknown, so no wheel's arch list can be checked against them; pass --compute-capability X.Y (one per GPU, see https://developer.nvidia.com/cuda-gpus)
# note: the target Python is unknown (not_found: interpreter not recorded in the fixture root): releases are not filtered by Python; pass --python-version X.Y
# note: the NVIDIA driver version is unknown (NVML did not answer and no nvidia kernel module is loaded): wheels are not filtered by driver; each choice says which driver it needs (or pass --driver-version)
pip install torch==2.15.0 torchvision==0.29.2 torchaudio==2.11.1 --index-url https://download.pytorch.org/whl/cu132
# or: uv pip install torch==2.15.0 torchvision==0.29.2 torchaudio==2.11.1 --index-url https://download.pytorch.org/whl/cu132
# or: uv pip install torch==2.15.0 torchvision==0.29.2 torchaudio==2.11.1 --torch-backend=cu132
