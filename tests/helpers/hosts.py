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
def make_hosts() -> ModuleType:
    """The generator module, loaded by path ("fixtures" is also a PyPI package name)."""
    name = "gpudoctor_tests_make_hosts"
    spec = importlib.util.spec_from_file_location(name, FIXTURES / "make_hosts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module
