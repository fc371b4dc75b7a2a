"""The policy's required/ignore selectors over the rules, the gate's own included (rules/gate/,
area gate: ids gate-...), and which gate checks a required selector needs the policy to enable."""

from __future__ import annotations

from typing import Any

from .errors import PolicyError
from .policy import Policy

# A required check must be judged; these judge only what the policy gives them, so requiring one
# without its setting is refused when the policy is read, not found out as a no-go at 2 a.m.
# (rule id or tag, the Policy attribute that enables it, how the policy sets it)
NEEDS = (
    ("gate-gpu-count", "expect_gpus", "expect.gpus (--expect-gpus)"),
    ("gate-gpu-model", "expect_model", "expect.model (--expect-model)"),
    ("gate-free-memory", "min_free_memory_gib", "expect.min_free_memory_gib (--min-free-memory)"),
    ("gate-nic-count", "expect_nics", "expect.nics (--expect-nics)"),
    ("gate-nic-rate", "nic_rate_gbps", "expect.nic_rate_gbps (--min-nic-rate)"),
    ("gate-nvlink-links", "nvlink_links", "expect.nvlink_links (--min-nvlink-links)"),
    ("deep", "deep", "the device test (deep.enabled or --deep)"),
    # the area of the node profile's checks: each of them and the area need the profile to judge by
    ("profile", "profile", "a node profile (profile: FILE)"),
)


def rule_keys(ruleset: Any) -> dict[str, set[str]]:
    """Each rule's id, area and tags, and each node profile check's (model/profile_facts.py): what a
    required/ignore selector may name."""
    from ..model.profile_facts import FACTS

    keys = {fact.rule_id: set(fact.keys) for fact in FACTS}
    keys.update({rule.id: {rule.id, rule.area, *rule.tags} for rule in ruleset.rules})
    return keys


def hang_rules(ruleset: Any) -> set[str]:
    return {rule.id for rule in ruleset.rules if "hang" in rule.tags}


def check_selectors(policy: Policy, ruleset: Any) -> None:
    """Refuse selectors that name nothing, and required gate checks the policy does not run."""
    keys = rule_keys(ruleset)
    known: set[str] = set()
    for names in keys.values():
        known |= names
    for label, selectors in (("required", policy.required), ("ignore", policy.ignore)):
        unknown = [s for s in selectors if s not in known]
        if unknown:
            import difflib

            hints = []
            for s in unknown:
                close = difflib.get_close_matches(s, sorted(known), n=1)
                hints.append(f"{s} (did you mean {close[0]}?)" if close else s)
            gate_checks = [rule.id for rule in ruleset.rules if rule.area == "gate"]
            raise PolicyError(
                f"{policy.source}: {label}: no rule, area or tag named {', '.join(hints)} "
                "(see `gpudoctor rules list`; gate checks: " + ", ".join(gate_checks) + ")"
            )
    for selector in policy.required:
        for name, setting, what in NEEDS:
            # a rule id names that check; a tag (deep) names it and every check carrying it
            named = selector == name or (name not in keys and name in keys.get(selector, ()))
            if named and getattr(policy, setting) in (None, False):
                raise PolicyError(f"{policy.source}: required: {selector} needs {what}")
