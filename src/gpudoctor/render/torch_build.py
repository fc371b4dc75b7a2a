"""The torch build advice (advice/torch_build.py) for people (text), programs (JSON) and shells.

Formatting only. The install commands are carried as argv (Recommendation.argvs); here they become
text (shlex.join) and, in a script, one live line of shell-quoted words (render/shell.py).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from ..advice.torch_build import Recommendation
from ..advice.torch_variants import cuda_of, sm_name
from .layout import wrap, wrap_units
from .shell import shell_command, shell_comment

WIDTH = 100  # pipes and files; the command passes the terminal's


def commands(rec: Recommendation) -> dict[str, str]:
    """The install commands as text (pip, uv, uv_backend); empty when no build was chosen."""
    return {name: shlex.join(argv) for name, argv in rec.argvs().items()}


def recommendation_json(rec: Recommendation) -> dict[str, Any]:
    return {
        "format": 1,
        "target": rec.target,
        "working": rec.working,
        "release": rec.release,
        "torch_version": rec.torch_version,
        "variant": rec.variant,
        "index_url": rec.index_url,
        "packages": rec.packages(),
        "torchvision": rec.torchvision,
        "torchaudio": rec.torchaudio,
        "commands": commands(rec),
        "why": rec.why,
        "other_variants": [v.to_json() for v in rec.verdicts if v.variant != rec.variant],
        "skipped_releases": [{"release": r, "why": w} for r, w in rec.skipped],
        "warnings": rec.warnings,
        "upgrade_hint": rec.upgrade_hint,
        "installed": {"verdict": rec.installed, "ok": rec.installed_ok},
        "release_data": rec.data.to_json(),
        "inputs": rec.inputs.to_json(),
        "exit_code": rec.exit_code,
    }


def data_age(rec: Recommendation) -> str:
    """ "torch releases up to 2.15.0, retrieved 2026-12-01 (3 days ago)" """
    d = rec.data
    newest = f"torch releases up to {d.newest}" if d.newest else "the torch release table"
    if not d.retrieved or d.age_days is None:
        return f"{newest} (retrieval date unknown)"
    age = {0: "today", 1: "yesterday"}.get(d.age_days, f"{d.age_days} days ago")
    if d.age_days < 0:
        age = "a date after today: check the clock"
    return f"{newest}, retrieved {d.retrieved} ({age})"


def render_text(rec: Recommendation, origin: str = "", width: int = WIDTH) -> str:
    """The advice for people, fitted to `width`: prose wraps under its label, the install commands
    are printed whole, one a line, however long."""
    i = rec.inputs
    lines = wrap(f"Torch build{' for ' + origin if origin else ''}", width, "", "  ")

    def field(label: str, text: str) -> None:
        lines.extend(wrap_units(text, width, f"  {label + ':':<9}", " " * 11))

    if i.nvidia_gpus:
        groups: dict[str, int] = {}
        for g in i.nvidia_gpus:
            label = f"{g['name']} ({sm_name(g['cc']) if g['cc'] else 'compute capability unknown'})"
            groups[label] = groups.get(label, 0) + 1
        field("GPUs", ", ".join(f"{n}× {label}" for label, n in groups.items()))
    if i.amd_gpus or i.amd_gfx:
        field("AMD", f"{i.amd_gpus} GPU(s), gfx {', '.join(i.amd_gfx) or 'unknown'}")
    if not i.nvidia_gpus and not (i.amd_gpus or i.amd_gfx):
        field("GPUs", "none")
    if i.nvidia_gpus:
        field("driver", f"{i.driver or 'unknown'} ({i.driver_source})")
    where = i.python_executable if i.python_executable and i.python_source == "host.python_version" else i.python_source
    field("Python", f"{i.python or 'unknown'} ({where})")
    field("data", data_age(rec))
    lines.append("")
    if rec.working and rec.variant:
        kind = {"nvidia": f"CUDA {cuda_of(rec.variant)}", "amd": "ROCm", "cpu": "CPU"}[rec.target]
        lines.extend(wrap(f"Recommended: torch {rec.torch_version} · {rec.variant} ({kind})", width, "", "  "))
    else:
        said = f"No GPU build fits: torch {rec.torch_version or '?'} · {rec.variant or 'none'} (CPU only)"
        lines.extend(wrap(said, width, "", "  "))
    for w in rec.why:
        lines.extend(wrap_units(w, width, "  why: "))
    cmds = commands(rec)
    if cmds:  # commands: whole, however long
        lines.append("")
        lines.append(f"  {cmds['pip']}")
        lines.append(f"  {cmds['uv']}")
        lines.append(f"  {cmds['uv_backend']}")
    if rec.upgrade_hint:
        lines.append("")
        lines.extend(wrap_units(rec.upgrade_hint, width, "  driver: "))
    others = [v for v in rec.verdicts if v.variant != rec.variant and v.relevant]
    if others:
        lines.append("")
        lines.extend(wrap(f"Other variants of torch {rec.release}:", width))
        column = max(len(v.variant) for v in others)
        for v in others:
            state = "runs, not chosen:" if v.ok else "no:"
            lines.extend(wrap_units(f"{state} {v.reason}", width, f"  {v.variant.ljust(column)}  ", " " * (column + 4)))
    if rec.skipped:
        lines.append("")
        lines.append("Newer releases passed over:")
        for rel, why in rec.skipped:
            lines.extend(wrap_units(why, width, f"  torch {rel}: ", "    "))
    lines.append("")
    lines.extend(wrap_units(f"Installed: {rec.installed}", width, "", "  "))
    for w in rec.warnings:
        lines.extend(wrap_units(w, width, "note: "))
    return "\n".join(lines) + "\n"


def render_json(rec: Recommendation) -> str:
    return json.dumps(recommendation_json(rec), indent=2) + "\n"


def render_shell(rec: Recommendation) -> str:
    """Comments (shell_comment: the reasons and notes carry GPU names, driver, Python and NVML
    errors from the facts) and one live line, the pip command, of shell-quoted words (shell_word:
    release, variant and pins come from the data tables or checked options)."""
    lines = ["# gpudoctor fix --torch: review, then run one of the install lines (gpudoctor runs nothing)."]
    lines.append(shell_comment(f"release data: {data_age(rec)}"))
    for w in rec.why:
        lines.append(shell_comment(w))
    for w in rec.warnings:
        lines.append(shell_comment(f"note: {w}"))
    argvs = rec.argvs()
    if argvs:
        try:
            lines.append(shell_command(argvs["pip"]))
        except ValueError:  # not reachable with the built-in tables; never print a broken command
            lines.append(shell_comment(f"pip: {commands(rec)['pip']}"))
        lines.append(shell_comment(f"or: {commands(rec)['uv']}"))
        lines.append(shell_comment(f"or: {commands(rec)['uv_backend']}"))
    else:
        lines.append("# no install command: no build of torch fits this machine")
    return "\n".join(lines) + "\n"
