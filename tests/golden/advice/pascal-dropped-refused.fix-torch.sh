# gpudoctor fix --torch: review, then run one of the install lines (gpudoctor runs nothing).
# release data: torch releases up to 2.15.0, retrieved 2026-12-01 (30 days ago)
# torch 2.14.1: the newest release that runs here (1 newer skipped)
# cu130: kernels for sm_90; driver 590.44.01 ≥ 580.65.06 fully supports CUDA 13.0
# note: torch 2.15.0 probably has a fitting cu130 build too (secondary sources only): pip install torch==2.15.0 --index-url https://download.pytorch.org/whl/cu130
# note: no torchaudio release was published with torch 2.14.1 (the table pins none); left out
# note: the arch list was not checked for every GPU (compute capability unknown)
# note: NVML is not answering (ok): the compute capability of 1 NVIDIA GPU(s) is unknown, so no wheel's arch list can be checked against them; pass --compute-capability X.Y (one per GPU, see https://developer.nvidia.com/cuda-gpus)
# note: the target Python is unknown (not_found: interpreter not recorded in the fixture root): releases are not filtered by Python; pass --python-version X.Y
pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu130
# or: uv pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu130
# or: uv pip install torch==2.14.1 torchvision==0.29.1 --torch-backend=cu130
