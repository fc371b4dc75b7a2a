from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpudoctor.context import ProbeContext
from gpudoctor.facts import Unavailable
from gpudoctor.probes import numa
from tests.helpers.hosts import make_hosts
from tests.helpers.sections import def_keys, section_keys, validate_section
from tests.helpers.tree import deny, write_tree

NODE = "sys/devices/system/node"
CPU = "sys/devices/system/cpu"


def collect(root: Path, spec: dict) -> dict:
    write_tree(root, spec)
    facts = numa.collect(ProbeContext(root=root, env={}))
    validate_section("numa", facts)
    assert set(facts) == section_keys("numa")
    if isinstance(facts["nodes"], list):
        assert all(set(n) == def_keys("numa_node") for n in facts["nodes"])
    if isinstance(facts["cpus"], list):
        assert all(set(c) == def_keys("cpu") for c in facts["cpus"])
    return facts


def reason(value: object) -> str | None:
    return value.reason if isinstance(value, Unavailable) else None


def topology(sockets: int = 2, cores: int = 4, smt: bool = True, **kw: bool) -> dict:
    return make_hosts().synthetic_topology(sockets, cores, smt, **kw)  # type: ignore[no-any-return]


# --- regular topologies ---------------------------------------------------------------------------

def test_two_sockets_with_smt(tmp_path: Path) -> None:
    spec = topology(2, 4, True)
    spec["proc/sys/kernel/numa_balancing"] = "1\n"
    facts = collect(tmp_path, spec)
    assert (facts["node_count"], facts["socket_count"], facts["smt_active"], facts["balancing"]) == (2, 2, True, 1)
    node0, node1 = facts["nodes"]
    assert node0 == {"id": 0, "cpus": [0, 1, 2, 3, 8, 9, 10, 11], "memory_total_bytes": 128 << 30,
                     "distances": [10, 32]}
    assert node1["cpus"] == [4, 5, 6, 7, 12, 13, 14, 15]
    cpus = {c["id"]: c for c in facts["cpus"]}
    assert cpus[5] == {"id": 5, "package": 1, "core": 1, "node": 1, "siblings": [5, 13],
                       "llc_cpus": [4, 5, 6, 7, 12, 13, 14, 15]}
    assert cpus[13]["siblings"] == [5, 13]
    assert cpus[13]["core"] == 1


def test_highest_data_or_unified_cache_is_the_llc(tmp_path: Path) -> None:
    facts = collect(tmp_path, topology(1, 4, True, with_l1=True))
    cpu0 = facts["cpus"][0]
    assert cpu0["llc_cpus"] == list(range(8))
    assert cpu0["siblings"] == [0, 4]


def test_llc_ignores_instruction_caches_and_prefers_levels(tmp_path: Path) -> None:
    base = f"{CPU}/cpu0/cache"
    spec = {
        f"{CPU}/online": "0-1\n",
        f"{base}/index0/level": "1\n", f"{base}/index0/type": "Data\n", f"{base}/index0/shared_cpu_list": "0\n",
        f"{base}/index1/level": "4\n", f"{base}/index1/type": "Instruction\n",
        f"{base}/index1/shared_cpu_list": "0-1\n",
        f"{base}/index2/level": "2\n", f"{base}/index2/type": "Unified\n", f"{base}/index2/shared_cpu_list": "0,1\n",
        f"{base}/uevent": "",
        f"{CPU}/cpu1/cache/index0/level": "1\n", f"{CPU}/cpu1/cache/index0/type": "Data\n",
        f"{CPU}/cpu1/cache/index0/shared_cpu_list": "1\n",
    }
    cpus = collect(tmp_path, spec)["cpus"]
    assert cpus[0]["llc_cpus"] == [0, 1]
    assert cpus[1]["llc_cpus"] == [0, 1]  # shares cpu0's L2, so that is its last level too


def test_single_cpu_without_smt(tmp_path: Path) -> None:
    facts = collect(tmp_path, topology(1, 1, False))
    assert facts["smt_active"] is False
    assert facts["cpus"] == [{"id": 0, "package": 0, "core": 0, "node": 0, "siblings": [0], "llc_cpus": [0]}]


@pytest.fixture(scope="module")
def big_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 sockets x 64 cores x 2 threads with L1/L2/L3 (about 3800 files: written once)."""
    return write_tree(tmp_path_factory.mktemp("big"), topology(2, 64, True, with_l1=True))


def test_256_cpus(big_tree: Path) -> None:
    facts = collect(big_tree, {})
    assert facts["socket_count"] == 2
    cpus = facts["cpus"]
    assert [c["id"] for c in cpus] == list(range(256))
    assert cpus[200] == {"id": 200, "package": 1, "core": 8, "node": 1, "siblings": [72, 200],
                         "llc_cpus": list(range(64, 128)) + list(range(192, 256))}


def test_topology_is_read_once_per_core_and_cache(big_tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    real_open = os.open

    def counting_open(path: object, *args: object, **kwargs: object) -> int:
        opened.append(os.fsdecode(path))  # type: ignore[arg-type]
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", counting_open)
    numa.collect(ProbeContext(root=big_tree, env={}))
    # 128 cores x 3 topology files, 2 caches x (4 levels + 4 types + 1 list), nodes, smt, balancing
    assert len(opened) < 128 * 3 + 2 * 9 + 2 * 3 + 10


# --- odd content ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "cpus"), [
    ("0-3,8,10-11\n", [0, 1, 2, 3, 8, 10, 11]),
    (" 0,2,4-5 \n", [0, 2, 4, 5]),
    ("5,1-2\n", [1, 2, 5]),
    ("\n", []),
])
def test_odd_cpulists(tmp_path: Path, text: str, cpus: list[int]) -> None:
    facts = collect(tmp_path, {f"{NODE}/node0/cpulist": text, f"{CPU}/online": "0-11\n"})
    assert facts["nodes"][0]["cpus"] == cpus


def test_memory_only_node(tmp_path: Path) -> None:
    spec = topology(1, 2, False)
    spec.update({f"{NODE}/node1/cpulist": "\n", f"{NODE}/node1/meminfo": "Node 1 MemTotal: 1048576 kB\n",
                 f"{NODE}/node1/distance": "20 10\n"})
    facts = collect(tmp_path, spec)
    assert facts["node_count"] == 2
    assert facts["nodes"][1] == {"id": 1, "cpus": [], "memory_total_bytes": 1 << 30, "distances": [20, 10]}
    assert {c["node"] for c in facts["cpus"]} == {0}


def test_garbage_node_files(tmp_path: Path) -> None:
    facts = collect(tmp_path, {
        f"{NODE}/node0/cpulist": "0-x\n",
        f"{NODE}/node0/meminfo": "Node 0 MemTotal: many kB\n",
        f"{NODE}/node0/distance": "ten\n",
        f"{NODE}/node1/meminfo": "Node 1 MemFree: 1 kB\n",
        f"{NODE}/node1/distance": "",
        f"{NODE}/nodeX/cpulist": "0\n",
        f"{CPU}/online": "0\n",
    })
    node0, node1 = facts["nodes"]
    assert reason(node0["cpus"]) == "error"
    assert reason(node0["memory_total_bytes"]) == "error"
    assert reason(node0["distances"]) == "error"
    assert reason(node1["cpus"]) == "not_found"
    assert reason(node1["memory_total_bytes"]) == "not_found"
    assert reason(node1["distances"]) == "not_found"
    assert reason(facts["cpus"][0]["node"]) == "not_found"


def test_garbage_cpu_files(tmp_path: Path) -> None:
    spec = topology(1, 2, True)
    spec.update({
        f"{CPU}/cpu0/topology/thread_siblings_list": "zero\n",
        f"{CPU}/cpu0/topology/physical_package_id": "\n",
        f"{CPU}/cpu1/cache/index3/level": "three\n",
        f"{CPU}/smt/active": "forced\n",
        "proc/sys/kernel/numa_balancing": "on\n",
    })
    facts = collect(tmp_path, spec)
    cpus = {c["id"]: c for c in facts["cpus"]}
    assert reason(cpus[0]["siblings"]) == "error"
    assert reason(cpus[0]["package"]) == "not_found"
    assert cpus[0]["core"] == 0
    # cpu2 is cpu0's sibling but cpu0's list could not be read: cpu2 is read on its own
    assert cpus[2]["siblings"] == [0, 2] and cpus[2]["package"] == 0
    assert reason(facts["socket_count"]) == "not_found"
    # cpu0's L3 list covers cpu1 (shared), so cpu1's broken index3 is never needed
    assert cpus[1]["llc_cpus"] == [0, 1, 2, 3]
    assert reason(facts["smt_active"]) == "error"
    assert reason(facts["balancing"]) == "error"


def test_unreadable_cache_index_makes_llc_unknown(tmp_path: Path) -> None:
    spec = topology(1, 1, False, with_l1=True)
    spec[f"{CPU}/cpu0/cache/index3/type"] = ""
    facts = collect(tmp_path, spec)
    assert reason(facts["cpus"][0]["llc_cpus"]) == "not_found"


def test_cpu_without_cache_info(tmp_path: Path) -> None:
    facts = collect(tmp_path, {f"{CPU}/online": "0\n", f"{CPU}/cpu0/topology/core_id": "0\n",
                               f"{CPU}/cpu1/cache/index0/level": "1\n"})
    assert reason(facts["cpus"][0]["llc_cpus"]) == "not_found"


def test_instruction_only_cache(tmp_path: Path) -> None:
    base = f"{CPU}/cpu0/cache/index0"
    facts = collect(tmp_path, {f"{CPU}/online": "0\n", f"{base}/level": "1\n", f"{base}/type": "Instruction\n"})
    assert reason(facts["cpus"][0]["llc_cpus"]) == "not_found"


# --- missing pieces -------------------------------------------------------------------------------

def test_kernel_without_numa(tmp_path: Path) -> None:
    spec = {k: v for k, v in topology(1, 2, False).items() if not k.startswith(NODE)}
    facts = collect(tmp_path, spec)
    assert reason(facts["nodes"]) == "not_found"
    assert reason(facts["node_count"]) == "not_found"
    assert all(reason(c["node"]) == "not_found" for c in facts["cpus"])
    assert facts["socket_count"] == 1


def test_node_dir_without_nodes(tmp_path: Path) -> None:
    facts = collect(tmp_path, {f"{NODE}/possible": "0\n", f"{CPU}/online": "0\n"})
    assert reason(facts["nodes"]) == "not_found"


def test_online_missing_falls_back_to_cpu_dirs(tmp_path: Path) -> None:
    spec = {k: v for k, v in topology(1, 2, True).items() if not k.endswith("/online")}
    spec[f"{CPU}/cpufreq/policy0"] = "x"
    facts = collect(tmp_path, spec)
    assert [c["id"] for c in facts["cpus"]] == [0, 1, 2, 3]


def test_nothing_at_all(tmp_path: Path) -> None:
    facts = collect(tmp_path, {})
    for key in ("nodes", "cpus", "node_count", "socket_count", "smt_active", "balancing"):
        assert reason(facts[key]) == "not_found", key


def test_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, topology(1, 2, False))
    deny(monkeypatch, [tmp_path / NODE, tmp_path / CPU / "cpu1/topology/core_id", tmp_path / CPU / "cpu0/cache"])
    facts = numa.collect(ProbeContext(root=tmp_path, env={}))
    validate_section("numa", facts)
    assert reason(facts["nodes"]) == "no_permission"
    assert reason(facts["cpus"][0]["node"]) == "no_permission"
    assert reason(facts["cpus"][1]["core"]) == "no_permission"
    assert reason(facts["cpus"][0]["llc_cpus"]) == "no_permission"
    assert facts["cpus"][1]["llc_cpus"] == [0, 1]


def test_symlink_loops(tmp_path: Path) -> None:
    spec = topology(1, 2, False)
    spec[f"{NODE}/node0/cpulist"] = ("link", "cpulist")
    spec[f"{CPU}/cpu1/topology"] = ("link", "../cpu1/topology")
    facts = collect(tmp_path, spec)
    assert reason(facts["nodes"][0]["cpus"]) == "error"
    assert reason(facts["cpus"][1]["siblings"]) == "error"
    assert reason(facts["cpus"][1]["package"]) == "error"


def test_live_machine_collects_without_error() -> None:
    facts = numa.collect(ProbeContext())
    validate_section("numa", facts)
