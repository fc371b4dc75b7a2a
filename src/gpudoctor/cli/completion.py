"""What the shell completes beyond click's own (commands, options, choices, file names): the
ids of the built-in checks for `rules show` (the rules, the gate's too, and the node profile's
profile-* checks), and for `check --only/--skip` the areas, then the ids of the checks `check`
runs (the rules but the gate's, and the profile-* checks).

A completion runs on every TAB press, so it reads no more than it must: the `- id:` lines of the
built-in rule files (bounded reads, no YAML parse, no rule compile), never the rule cache or a
site pack; the profile-* ids come from their table (model/profile_facts.py), imported only then.
Anything unreadable completes nothing rather than failing in the user's shell.
"""

from __future__ import annotations

import re
from typing import Any

from click.shell_completion import CompletionItem

from ..findings import AREAS
from ..inputs import MAX_YAML_BYTES, InputError, read_text_input
from ..lazy_re import LazyPattern
from ..tables import builtin_rules_dir

# a rule item starts "- id: <id>" at the left margin (the rule schema's id: kebab-case, <= 64)
_RULE_ID = LazyPattern(r"^- id:\s*['\"]?([a-z0-9]+(?:-[a-z0-9]+)*)['\"]?\s*$", re.MULTILINE)
# the built-in pack is ~20 files; a broken install with thousands is not read through
_MAX_FILES = 200


def builtin_rule_ids(gate: bool = True) -> list[str]:
    """The ids of the built-in rules (with ``gate``, the gate's too), sorted, without duplicates."""
    base = builtin_rules_dir()
    try:
        files = sorted(base.glob("*.yaml"))[:_MAX_FILES]
        if gate:
            files += sorted((base / "gate").glob("*.yaml"))[:_MAX_FILES]
    except OSError:
        return []
    ids: set[str] = set()
    for path in files:
        try:
            ids.update(_RULE_ID.findall(read_text_input(path, MAX_YAML_BYTES, "rule file")))
        except InputError:
            continue
    return sorted(ids)


def profile_check_ids() -> list[str]:
    """The ids of the node profile's checks (profile-driver, profile-gpu-pcie-width, ...), sorted:
    `rules show`, --only/--skip and a policy's required/ignore know them like rule ids."""
    from ..model.profile_facts import FACTS

    return sorted(f.rule_id for f in FACTS)


def complete_rule_id(ctx: Any, param: Any, incomplete: str) -> list[CompletionItem]:
    """click's shell_complete for a rule id argument (`rules show`): every built-in check."""
    ids = sorted(set(builtin_rule_ids()) | set(profile_check_ids()))
    return [CompletionItem(i) for i in ids if i.startswith(incomplete)]


def complete_area(ctx: Any, param: Any, incomplete: str) -> list[CompletionItem]:
    """click's shell_complete for --only/--skip on `check`: its areas, described (zsh and fish
    show the help), then the ids of its checks (the rules, and the profile-* checks that
    `check --profile` runs). The gate's area and rules are left out: `check` does not run them."""
    areas = [
        CompletionItem(area, help=title)
        for area, title in AREAS.items()
        if area != "gate" and area.startswith(incomplete)
    ]
    ids = sorted(set(builtin_rule_ids(gate=False)) | set(profile_check_ids()))
    return areas + [CompletionItem(i) for i in ids if i.startswith(incomplete)]
