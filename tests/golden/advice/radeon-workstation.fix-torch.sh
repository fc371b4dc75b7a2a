# gpudoctor fix --torch: review, then run one of the install lines (gpudoctor runs nothing).
# release data: torch releases up to 2.15.0, retrieved 2026-12-01 (30 days ago)
# torch 2.13.0: the newest release that runs here (2 newer skipped)
# rocm7.2: has code for gfx1100
# note: no torchaudio release was published with torch 2.13.0 (the table pins none); left out
# note: the target Python is unknown (not_found: interpreter not recorded in the fixture root): releases are not filtered by Python; pass --python-version X.Y
pip install torch==2.13.0 torchvision==0.28.0 --index-url https://download.pytorch.org/whl/rocm7.2
# or: uv pip install torch==2.13.0 torchvision==0.28.0 --index-url https://download.pytorch.org/whl/rocm7.2
# or: uv pip install torch==2.13.0 torchvision==0.28.0 --torch-backend=rocm7.2
