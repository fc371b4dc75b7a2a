"""Fixtures shared by the hardening tests."""

from __future__ import annotations

import pytest

from gpudoctor import rootfs


@pytest.fixture(params=["openat2", "walk"])
def mechanism(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the kernel's RESOLVE_IN_ROOT lookup and with the portable walk."""
    monkeypatch.setattr(rootfs, "USE_OPENAT2", request.param == "openat2")
    return str(request.param)
