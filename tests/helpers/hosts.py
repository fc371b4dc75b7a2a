"""Access to the fixture hosts and their generator (tests/fixtures/make_hosts.py)."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HOSTS = FIXTURES / "hosts"


@cache
def fixture_module(name: str) -> ModuleType:
    """A generator module of tests/fixtures (make_hosts, make_nvml, ...), loaded by path ("fixtures"
    is also a PyPI package name), once: every importer gets the same module object."""
    key = f"gpudoctor_tests_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, FIXTURES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def make_hosts() -> ModuleType:
    """The generator module tests/fixtures/make_hosts.py."""
    return fixture_module("make_hosts")
