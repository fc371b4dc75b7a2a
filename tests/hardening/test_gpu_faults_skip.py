"""tests/hardening/test_gpu_faults.py on a one-GPU host (issue 19): its tests skip, with the reason,
instead of failing; checked here without a GPU, from the recorded NVML answer of a fixture host."""

from __future__ import annotations

import copy

import pytest

from tests.conftest import probed
from tests.hardening.test_gpu_faults import two_gpus


def test_a_one_gpu_host_skips_the_fault_tests_with_the_reason():
    section = copy.deepcopy(probed("healthy-2gpu")["nvml"])
    assert two_gpus(section) is section  # two GPUs: the tests run
    section["gpus"] = section["gpus"][:1]  # the single-H200 VM
    reason = r"these tests need two GPUs: one faulty, one to keep reading \(this host has 1\)"
    with pytest.raises(pytest.skip.Exception, match=reason):
        two_gpus(section)


def test_nvml_that_did_not_answer_is_a_failure_not_a_skip():
    section = copy.deepcopy(probed("no-driver")["nvml"])
    with pytest.raises(AssertionError):
        two_gpus(section)
