"""gpudoctor.frozen: the value classes that were frozen dataclasses behave as the dataclasses did
(repr, equality, hash, immutability, copies), checked against a frozen dataclass of the same
fields made here."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle

import pytest

from gpudoctor.cli.options import ProbeOptions
from gpudoctor.facts import Unavailable
from gpudoctor.findings import Cause, Subject, bounded_subject
from gpudoctor.model.gpus import XgmiHive
from gpudoctor.model.nics import NicPort
from gpudoctor.model.profile_facts import ProfileFact
from gpudoctor.model.topology import CpuInfo, NodeInfo
from gpudoctor.probes.tools import CommandResult

CASES = [
    (Unavailable, ("timeout", "took 3 s"), {}),
    (Unavailable, ("not_found",), {}),
    (Subject, ("gpu", "GPU 0 (0000:18:00.0)", 0, "0000:18:00.0", "GPU-1"), {}),
    (Subject, ("host", "host"), {}),
    (Cause, ("nvml", "timeout"), {"note": "hung"}),
    (NodeInfo, (0, frozenset({0, 1}), None), {}),
    (CpuInfo, (3, 0, (3, 67), None), {}),
    (NicPort, ("mlx5_0", 1, "ACTIVE", 400, "InfiniBand"), {}),
    (XgmiHive, ("0x1", (0, 1), 7), {}),
    (CommandResult, (0, "out", ""), {"cut": True}),
    (ProfileFact, ("gpus", "pcie_width", "PCIe width", True), {"form": "x{}"}),
    (ProbeOptions, (), {"root": "/mnt", "timeout": 5.0}),
]


def _as_dataclass(cls: type) -> type:
    """A frozen dataclass with the same name, fields and defaults as ``cls``'s __init__."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    fields = [
        (p.name, object) if p.default is p.empty else (p.name, object, dataclasses.field(default=p.default))
        for p in params
    ]
    made = dataclasses.make_dataclass(cls.__name__, fields, frozen=True)
    made.__qualname__ = cls.__qualname__
    return made


@pytest.mark.parametrize("cls, args, kwargs", CASES, ids=lambda v: getattr(v, "__name__", None))
def test_behaves_as_the_frozen_dataclass(cls, args, kwargs):
    twin = _as_dataclass(cls)
    value, expected = cls(*args, **kwargs), twin(*args, **kwargs)
    assert tuple(cls.__slots__) == tuple(f.name for f in dataclasses.fields(twin))
    assert repr(value) == repr(expected)
    assert hash(value) == hash(expected)
    same = cls(*args, **kwargs)
    assert value == same
    assert (value != same) is False  # __ne__ from __eq__
    assert value != expected  # another class, as two dataclasses are never equal
    for name in cls.__slots__:
        assert getattr(value, name) == getattr(expected, name)
        with pytest.raises(AttributeError):
            setattr(value, name, None)
        with pytest.raises(AttributeError):
            delattr(value, name)
    with pytest.raises(AttributeError):
        value.other = 1
    assert copy.copy(value) == value and copy.deepcopy(value) == value
    assert pickle.loads(pickle.dumps(value)) == value


def test_a_differing_field_is_unequal():
    assert Subject("gpu", "GPU 0", 0) != Subject("gpu", "GPU 0", 1)
    assert Cause("nvml", "timeout") != Cause("nvml", "timeout", "hung")
    assert len({Unavailable("timeout"), Unavailable("timeout"), Unavailable("timeout", "x")}) == 2


def test_unavailable_refuses_an_unknown_reason():
    with pytest.raises(ValueError, match="unknown unavailable reason"):
        Unavailable("bogus")


def test_bounded_subject_keeps_kind_and_index():
    long = "x" * 5000
    bounded = bounded_subject(Subject("gpu", long, 3, long, long))
    assert (bounded.kind, bounded.index) == ("gpu", 3)
    assert len(bounded.label) < 400 and len(bounded.bus_id or "") < 400 and len(bounded.uuid or "") < 400
