#!/usr/bin/env python3
"""Generate docs/rules.md, the rules reference, from the YAML rules.

python scripts/gen_rules_doc.py          # write docs/rules.md
python scripts/gen_rules_doc.py --check  # exit 1 when docs/rules.md is stale (CI)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from gpudoctor.engine.loader import load_rules  # noqa: E402
from gpudoctor.findings import AREAS  # noqa: E402

TARGET = REPO / "docs" / "rules.md"


def render() -> str:
    ruleset = load_rules(include_plugins=False)
    out = [
        "# gpudoctor rules reference",
        "",
        "Generated from `rules/*.yaml` by `scripts/gen_rules_doc.py`; do not edit by hand.",
        f"{len(ruleset.rules)} rules. `gpudoctor rules show ID` prints the same on the command line.",
        "",
    ]
    for area, heading in AREAS.items():
        rules = [r for r in ruleset.rules if r.area == area]
        if not rules:
            continue
        out += [f"## {heading}", "", "| id | severity | subject | title |", "|---|---|---|---|"]
        out += [f"| [{r.id}](#{r.id}) | {r.severity.value} | {r.subject} | {r.title} |" for r in rules]
        out.append("")
        for r in rules:
            out += [f"### {r.id}", "", f"**{r.title}** — {r.severity.value}, per {r.subject}", "", r.why, ""]
            if r.let:
                out += ["- Where:"] + [f"  - `{name}` = `{expr.source}`" for name, expr in r.let]
            if r.applies:
                out += [f"- Applies when: `{r.applies.source}`"]
            out += [f"- Fails when: `{r.fail_if.source}`", f"- Reads: {', '.join(f'`{p}`' for p in r.facts_used)}", ""]
            out += ["Fix:", "", "```", r.fix.source.strip(), "```", "", "References:", ""]
            out += [f"- {ref}" for ref in r.refs]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when docs/rules.md is not up to date")
    args = parser.parse_args()
    text = render()
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print("docs/rules.md is stale: run python scripts/gen_rules_doc.py", file=sys.stderr)
            return 1
        print("docs/rules.md is up to date")
        return 0
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
