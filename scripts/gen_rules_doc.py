#!/usr/bin/env python3
"""Generate docs/rules.md (the rules reference) and docs/rules-helpers.md (the helper functions
rule expressions may call) from the YAML rules, the rule cases and the helpers' docstrings.

python scripts/gen_rules_doc.py          # write both
python scripts/gen_rules_doc.py --check  # exit 1 when either is stale (CI)

Each rule's "Fails on / Passes on" examples are its cases in tests/rules/cases.yaml: the fixture
host, the facts the case changes, what the comments there say about it, and the message the
rule gives on it (so an example is always what the rule really does).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from tests.conftest import probed  # noqa: E402
from tests.rules.cases import CASES, apply, comments, matches  # noqa: E402

from gpudoctor.engine.helpers.registry import FORMS, FUNCTIONS, bind  # noqa: E402
from gpudoctor.engine.loader import Rule, RuleSet, load_rules  # noqa: E402
from gpudoctor.engine.runner import run_rules  # noqa: E402
from gpudoctor.findings import AREAS, Status  # noqa: E402
from gpudoctor.model.profile_facts import FACTS, PROFILE_AREA, PROFILE_FIX  # noqa: E402

RULES_DOC = REPO / "docs" / "rules.md"
HELPERS_DOC = REPO / "docs" / "rules-helpers.md"
MAX_SHOWN = 300  # characters of a message shown in an example
EXAMPLE = "Example: "

# ---------------------------------------------------------------------------- rules.md


def _one_line(text: str, limit: int = MAX_SHOWN) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


MAX_CHANGES = 4  # facts changed by a case that an example names


def _changes(case: dict[str, Any]) -> str:
    """The facts a case changes, as `path` = value (short values only), the first few of them."""
    parts = []
    for path, value in (case.get("set") or {}).items():
        shown = json.dumps(value, ensure_ascii=False, default=str)
        parts.append(f"`{path}` = `{shown}`" if len(shown) <= 40 and "`" not in shown else f"`{path}`")
    parts += [f"no `{path}`" for path in case.get("delete") or []]
    if len(parts) > MAX_CHANGES:
        parts[MAX_CHANGES:] = [f"{len(parts) - MAX_CHANGES} more facts"]
    return ", ".join(parts)


def examples(ruleset: RuleSet) -> dict[str, dict[str, list[str]]]:
    """For each rule, its fail and pass cases as Markdown list items."""
    from tests.helpers import generated

    generated.ensure()  # the cases' fixture hosts are generated, not kept in git
    said = comments()
    out: dict[str, dict[str, list[str]]] = {}
    for rule_id, kinds in CASES.items():
        rule = ruleset.by_id(rule_id)
        if rule is None:
            continue
        for kind, status in (("fail", Status.FAIL), ("pass", Status.PASS)):
            items = []
            for index, case in enumerate(kinds.get(kind) or []):
                facts = apply(probed(case["base"]), case)
                found = [f for f in run_rules(ruleset, facts, [rule]) if matches(f, case.get("subject"))]
                finding = next((f for f in found if f.status is status), None)
                host = f"`{case['base']}`"
                changes = _changes(case)
                where = f"{host} with {changes}" if changes else host
                note = said.get((rule_id, kind, index))
                text = f"- {where}" + (f" ({_one_line(note, 200)})" if note else "")
                if finding is not None:
                    text += f": “{_one_line(finding.message)}”"
                items.append(text)
            out.setdefault(rule_id, {})[kind] = items
    return out


def _rule_section(rule: Rule, cases: dict[str, list[str]]) -> list[str]:
    out = [f"### {rule.id}", "", f"**{rule.title}** — {rule.severity.value}, per {rule.subject}", "", rule.why, ""]
    if rule.let:
        out += ["- Where:"] + [f"  - `{name}` = `{expr.source}`" for name, expr in rule.let]
    if rule.applies:
        out += [f"- Applies when: `{rule.applies.source}`"]
    out += [f"- Fails when: `{rule.fail_if.source}`", f"- Reads: {', '.join(f'`{p}`' for p in rule.facts_used)}"]
    out += [f"- Recommended action when it fails: `{rule.action}`"]
    if rule.superseded_by:
        named = ", ".join(f"[`{other}`](#{other})" for other in rule.superseded_by)
        out += [f"- Stands aside (not reported again) where {named} fails on the same subject or the host"]
    out += [""]
    for kind, heading in (("fail", "Fails on"), ("pass", "Passes on")):
        if cases.get(kind):
            out += [f"{heading}:", "", *cases[kind], ""]
    out += ["Fix:", "", "```", rule.fix.source.strip(), "```", "", "References:", ""]
    out += [f"- {ref}" for ref in rule.refs]
    out.append("")
    return out


def _profile_section(heading: str) -> list[str]:
    """The node profile's checks (model/profile_facts.py): one per fact a profile fixes, judged
    against the profile's values by fleet/profile.py rather than by an expression."""
    out = [f"## {heading}", ""]
    out += [
        "Judged only with a node profile (`gpudoctor check --profile FILE`, the gate policy's `profile:`):",
        "one check per fact the profile names, on the GPU, NIC, NUMA node or host it is about; an entry",
        "of the profile that the machine lacks fails on the host. `--only`/`--skip` and the policy's",
        "`required`/`ignore` choose them by id, by the area `profile` or by the tag listed.",
        "",
        "| id | severity | action | subject | tag | title |",
        "|---|---|---|---|---|---|",
    ]
    out += [
        f"| [{f.rule_id}](#{f.rule_id}) | {f.severity.value} | {f.action} | {f.subject} | {f.tag} | {f.check_title} |"
        for f in FACTS
    ]
    out.append("")
    for f in FACTS:
        sev = f.severity.value
        out += [f"### {f.rule_id}", "", f"**{f.check_title}** — {sev}, per {f.subject}", "", f.why, ""]
        out += [
            f"- Fails when: {f.title} (`{f.scope}.{f.key}` of the profile facts) is not the profile's value,"
            " one of its set or inside its range" + (f", {f.tolerance_words}" if f.tolerance_words else ""),
            f"- Recommended action when it fails: `{f.action}`",
            "",
            "Fix:",
            "",
            "```",
            PROFILE_FIX,
            "```",
            "",
        ]
    return out


def render_rules(ruleset: RuleSet) -> str:
    cases = examples(ruleset)
    out = [
        "# gpudoctor rules reference",
        "",
        "Generated from `rules/*.yaml` by `scripts/gen_rules_doc.py`; do not edit by hand.",
        f"{len(ruleset.rules)} rules and {len(FACTS)} node profile checks. `gpudoctor rules show ID` prints the",
        "same on the command line.",
        "The functions the expressions call are described in [rules-helpers.md](rules-helpers.md);",
        "the examples under each rule are its cases in `tests/rules/cases.yaml`, on the fixture hosts",
        "in `tests/fixtures/hosts`, with the message the rule gives there.",
        "",
        "Each rule's action is what its failed findings recommend doing with the node (JSON reports:",
        "`recommended_action`; `gpudoctor gate --prometheus`: the `action` label of `gpudoctor_gpu_health`),",
        "least drastic first: `none` (advice; the node is fit as it is), `restart-job` (the job, not the",
        "node: a fresh start clears it), `fix-software` (install, upgrade or configure software, firmware",
        "settings or the environment; a reboot may follow), `reset-gpu` (a GPU reset clears it),",
        "`reboot-node` (a reboot clears it), `drain-and-inspect-hardware` (take the node out of service for",
        "a hardware check).",
        "",
    ]
    for area, heading in AREAS.items():
        if area == PROFILE_AREA:
            out += _profile_section(heading)
            continue
        rules = [r for r in ruleset.rules if r.area == area]
        if not rules:
            continue
        out += [f"## {heading}", "", "| id | severity | action | subject | title |", "|---|---|---|---|---|"]
        out += [f"| [{r.id}](#{r.id}) | {r.severity.value} | {r.action} | {r.subject} | {r.title} |" for r in rules]
        out.append("")
        for r in rules:
            out += _rule_section(r, cases.get(r.id, {}))
    return "\n".join(out).rstrip() + "\n"


# ---------------------------------------------------------------------------- rules-helpers.md


def signature(name: str, func: Callable[..., Any]) -> str:
    """How a rule calls the function: name(a, b[, c[, d]]), *rest for any number more."""
    required: list[str] = []
    optional: list[str] = []
    for param in inspect.signature(func).parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            required.append(f"*{param.name}")
        elif param.default is param.empty:
            required.append(param.name)
        else:
            optional.append(param.name)
    text = ", ".join(required)
    for i, param in enumerate(optional):
        text += ("[, " if text or i else "[") + param
    return f"{name}({text}{']' * len(optional)})"


def helper_docs(functions: dict[str, Callable[..., Any]]) -> list[tuple[str, str, str]]:
    """(name, signature, docstring) of every function a rule may call, by name."""
    out = []
    for name in sorted(FUNCTIONS):
        if name in FORMS:
            sig, doc = FORMS[name]
        else:
            sig, doc = signature(name, functions[name]), inspect.getdoc(functions[name]) or ""
        out.append((name, sig, inspect.cleandoc(doc)))
    return out


def split_doc(doc: str) -> tuple[str, str, list[tuple[str, str]]]:
    """A helper's docstring as (summary, the rest, examples): the summary is its first paragraph;
    each line "Example: EXPRESSION → RESULT" is an example."""
    paragraphs = [p.strip() for p in doc.split("\n\n") if p.strip()]
    found: list[tuple[str, str]] = []
    kept: list[str] = []
    for para in paragraphs:
        lines = para.splitlines()
        shown = [line for line in lines if line.startswith(EXAMPLE)]
        for line in shown:
            expression, _, result = line[len(EXAMPLE) :].partition(" → ")
            found.append((expression.strip(), result.strip()))
        rest = [line for line in lines if not line.startswith(EXAMPLE)]
        if rest:
            kept.append(" ".join(line.strip() for line in rest))
    summary = kept[0] if kept else ""
    return summary, "\n\n".join(kept[1:]), found


def render_helpers(functions: dict[str, Callable[..., Any]]) -> str:
    docs = helper_docs(functions)
    out = [
        "# Functions rule expressions may call",
        "",
        "Generated from the helpers' docstrings (src/gpudoctor/engine/helpers/) by",
        "`scripts/gen_rules_doc.py`; do not edit by hand. Nothing else is callable in `let:`, `applies`,",
        "`fail_if` or a `{placeholder}`. A helper given a value it cannot use raises an error, which makes",
        "the rule an \"error\" finding; an unavailable fact makes it \"unknown\".",
        "",
        "Examples that read facts show what they give on the `healthy-2gpu` test fixture: two H100 GPUs",
        "on two NUMA nodes, driver 550.90.07, torch 2.4.1+cu121 (`gpu` is its GPU 0). Every example is",
        "checked by tests/engine/test_helper_reference.py.",
        "",
        "| function | what it gives |",
        "|---|---|",
    ]
    out += [f"| [`{sig}`](#{name}) | {split_doc(doc)[0]} |" for name, sig, doc in docs]
    out.append("")
    for name, sig, doc in docs:
        summary, rest, shown = split_doc(doc)
        out += [f"### {name}", "", f"`{sig}`", "", summary, ""]
        if rest:
            out += [rest, ""]
        out += [f"- `{expression}` → `{result}`" for expression, result in shown]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


# ---------------------------------------------------------------------------- main


def outputs() -> dict[Path, str]:
    ruleset = load_rules(include_plugins=False, gate=True)  # the gate's checks too (area gate)
    return {RULES_DOC: render_rules(ruleset), HELPERS_DOC: render_helpers(bind(ruleset.tables))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a generated document is not up to date")
    args = parser.parse_args()
    stale = []
    for target, text in outputs().items():
        name = target.relative_to(REPO)
        if args.check:
            current = target.read_text(encoding="utf-8") if target.exists() else ""
            if current != text:
                stale.append(str(name))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {name}")
    if stale:
        print(f"stale: {', '.join(stale)}; run python scripts/gen_rules_doc.py", file=sys.stderr)
        return 1
    if args.check:
        print("docs/rules.md and docs/rules-helpers.md are up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
