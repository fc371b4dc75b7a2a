# gpudoctor fix --torch: review, then run one of the install lines (gpudoctor runs nothing).
# release data: torch releases up to 2.15.0, retrieved 2026-12-01 (30 days ago)
# torch 2.15.0: the newest release
# no GPU found: the CPU build
# note: the target Python is unknown (not_found: interpreter not recorded in the fixture root): releases are not filtered by Python; pass --python-version X.Y
pip install torch==2.15.0 torchvision==0.29.2 torchaudio==2.11.1 --index-url https://download.pytorch.org/whl/cpu
# or: uv pip install torch==2.15.0 torchvision==0.29.2 torchaudio==2.11.1 --index-url https://download.pytorch.org/whl/cpu
# or: uv pip install torch==2.15.0 torchvision==0.29.2 torchaudio==2.11.1 --torch-backend=cpu
