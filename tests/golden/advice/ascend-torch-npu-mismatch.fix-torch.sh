# gpudoctor fix --torch: review, then run one of the install lines (gpudoctor runs nothing).
# release data: torch releases up to 2.15.0, retrieved 2026-12-01 (30 days ago)
# torch 2.5.1: the release the installed torch_npu was built for
# 8 Ascend NPU(s): torch's CPU build, which torch_npu extends with the npu device
# note: 8 Ascend NPU(s): torch reaches them only through torch_npu, built for one torch release; torch_npu 2.5.1 is installed, built for torch 2.5.1: keep torch==2.5.1 with it, or install the torch and torch-npu pair for CANN 8.1.RC1 from Ascend/pytorch's version table (https://github.com/Ascend/pytorch), not the newest torch
# note: the target Python is unknown (not_found: interpreter not recorded in the fixture root): releases are not filtered by Python; pass --python-version X.Y
pip install torch==2.5.1 torchvision==0.20.1 torchaudio==2.5.1 --index-url https://download.pytorch.org/whl/cpu
# or: uv pip install torch==2.5.1 torchvision==0.20.1 torchaudio==2.5.1 --index-url https://download.pytorch.org/whl/cpu
# or: uv pip install torch==2.5.1 torchvision==0.20.1 torchaudio==2.5.1 --torch-backend=cpu
