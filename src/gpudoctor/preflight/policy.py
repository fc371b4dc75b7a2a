"""The gate's policy: what it expects and when it says no-go, from a YAML file, a mapping or flags."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..findings import Severity
from ..inputs import yaml_line
from .errors import PolicyError

FAIL_CLOSED = "fail-closed"
FAIL_OPEN = "fail-open"


@dataclass(frozen=True)
class Policy:
    """What the gate expects and when it says no-go. Defaults: fail on error, fail-closed, 30 s."""

    source: str = "defaults"
    expect_gpus: int | None = None
    expect_model: str | None = None
    min_free_memory_gib: float | None = None
    # RDMA ports in the ACTIVE state, at least (NCCL makes one network device of each such port)
    expect_nics: int | None = None
    # Gb/s every active RDMA port must run at, at least
    nic_rate_gbps: float | None = None
    # active NVLink links every NVIDIA GPU must have, at least
    nvlink_links: int | None = None
    fail_on: Severity = Severity.ERROR
    fail_closed: bool = True
    required: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    deadline_s: float = 30.0
    deep: bool = False
    deep_memory_mib: int = 256
    min_busbw_gbps: float | None = None
    allreduce_mib: int = 256
    allreduce_iterations: int = 20
    # the golden-node profile (fleet.profile.Profile) the policy's `profile:` names; its facts are
    # profile-* checks of severity error (memory per NUMA node: warning)
    profile: Any = None
    # gate --distributed's localisation: a figure under this fraction of the best of its kind is slow
    localize_fraction: float = 0.8

    @property
    def on_cannot_check(self) -> str:
        return FAIL_CLOSED if self.fail_closed else FAIL_OPEN

    def override(self, **values: Any) -> Policy:
        """A copy with the given values; None means "not given" and keeps the current value."""
        given = {k: v for k, v in values.items() if v is not None}
        if "fail_on" in given and not isinstance(given["fail_on"], Severity):
            given["fail_on"] = Severity(given["fail_on"])
        for key in ("required", "ignore"):
            if key in given:
                given[key] = tuple(dict.fromkeys([*getattr(self, key), *given[key]]))
        return replace(self, **given)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "fail_on": self.fail_on.value,
            "on_cannot_check": self.on_cannot_check,
            "deadline_s": self.deadline_s,
            "required": list(self.required),
            "ignore": list(self.ignore),
            "expect": {
                "gpus": self.expect_gpus,
                "model": self.expect_model,
                "min_free_memory_gib": self.min_free_memory_gib,
                "nics": self.expect_nics,
                "nic_rate_gbps": self.nic_rate_gbps,
                "nvlink_links": self.nvlink_links,
            },
            "deep": self.deep,
            "min_busbw_gbps": self.min_busbw_gbps,
            # only when set: the reports of policies without a profile stay as they were
            **({"profile": self.profile.source} if self.profile is not None else {}),
        }

    def facts(self) -> dict[str, Any]:
        """The policy as the facts section `policy` that the gate's rules (rules/gate/) read: an
        expectation the policy does not set is absent, so the rule judging it is not run."""
        out: dict[str, Any] = {
            "source": self.source,
            "fail_on": self.fail_on.value,
            "on_cannot_check": self.on_cannot_check,
            "deadline_s": self.deadline_s,
            "deep": self.deep,
        }
        for key, name in FACT_KEYS:
            value = getattr(self, key)
            if value is not None:
                out[name] = whole(value)
        return out


# Policy attribute -> its key in the facts section `policy` (rules/gate/gate.yaml reads them).
FACT_KEYS = (
    ("expect_gpus", "expect_gpus"),
    ("expect_model", "expect_model"),
    ("min_free_memory_gib", "min_free_memory_gib"),
    ("expect_nics", "expect_nics"),
    ("nic_rate_gbps", "expect_nic_rate_gbps"),
    ("nvlink_links", "expect_nvlink_links"),
    ("min_busbw_gbps", "min_busbw_gbps"),
)


def whole(value: Any) -> Any:
    """A number as a policy writes it (70, not 70.0; 0.5 stays 0.5), for the rules' messages."""
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 1e15 else value


def policy_from_mapping(data: Any, source: str = "<policy>") -> Policy:
    """Validate a policy mapping (from YAML or a dict) and build a Policy."""
    from ..inputs import type_name
    from ..schemas import validate

    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: a policy is a mapping of keys (expect, fail_on, ...), not {type_name(data)}")
    problem = validate("policy", data)
    if problem:
        where = problem.split(":", 1)[0]
        line = yaml_line(data, where)
        raise PolicyError(f"{source}{f':{line}' if line else ''}: {problem}")
    expect = data.get("expect", {})
    deep = data.get("deep", {})
    dist = data.get("distributed", {})
    defaults = Policy()
    return Policy(
        source=source,
        expect_gpus=expect.get("gpus"),
        expect_model=expect.get("model"),
        min_free_memory_gib=float(expect["min_free_memory_gib"]) if "min_free_memory_gib" in expect else None,
        expect_nics=expect.get("nics"),
        nic_rate_gbps=float(expect["nic_rate_gbps"]) if "nic_rate_gbps" in expect else None,
        nvlink_links=expect.get("nvlink_links"),
        fail_on=Severity(data.get("fail_on", "error")),
        fail_closed=data.get("on_cannot_check", FAIL_CLOSED) == FAIL_CLOSED,
        required=tuple(data.get("required", ())),
        ignore=tuple(data.get("ignore", ())),
        deadline_s=float(data.get("deadline_s", defaults.deadline_s)),
        deep=bool(deep.get("enabled", False)),
        deep_memory_mib=int(deep.get("memory_mib", defaults.deep_memory_mib)),
        min_busbw_gbps=float(dist["min_busbw_gbps"]) if "min_busbw_gbps" in dist else None,
        allreduce_mib=int(dist.get("allreduce_mib", defaults.allreduce_mib)),
        allreduce_iterations=int(dist.get("iterations", defaults.allreduce_iterations)),
        profile=_profile(data, source),
        localize_fraction=float(dist.get("localize_fraction", defaults.localize_fraction)),
    )


def _profile(data: Any, source: str) -> Any:
    """The profile the policy names, read now (a bad one refuses the policy, exit 2). A relative
    path is taken from the policy file's directory, so a policy and its profile move together."""
    if "profile" not in data:
        return None
    from ..fleet.profile import ProfileError, load_profile

    path = Path(data["profile"])
    if not path.is_absolute() and not source.startswith("<"):
        path = Path(source).parent / path
    try:
        return load_profile(path)
    except ProfileError as exc:
        line = yaml_line(data, "profile")
        raise PolicyError(f"{source}{f':{line}' if line else ''}: profile: {exc}") from None


def load_policy(path: str | Path) -> Policy:
    """Read a policy YAML file; PolicyError names the file and line of any problem."""
    from ..engine.loader import RuleLoadError, read_yaml

    try:
        data = read_yaml(Path(path), "policy file")
    except RuleLoadError as exc:
        raise PolicyError(str(exc)) from None
    return policy_from_mapping(data, str(path))
