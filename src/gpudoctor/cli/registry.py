"""Every gpudoctor command: its module, its one-line summary, and whether it probes this machine.

Read without importing any command module (or click): `gpudoctor --help` lists the summaries
from here, the root group imports a command's module only when that command runs, and the
console script asks `probes_early(argv)` before click is even loaded. A command's own help
starts with the same summary (help_text), so the two cannot drift.
"""

from __future__ import annotations


class Entry:
    """One command: `module` under gpudoctor.cli.commands (exposing `command`), the one line
    `gpudoctor --help` shows, and whether it probes this machine with NVML unless told otherwise."""

    __slots__ = ("module", "summary", "probes")

    def __init__(self, module: str, summary: str, probes: bool) -> None:
        self.module = module
        self.summary = summary
        self.probes = probes


# The exit statuses of `gpudoctor --help` and of the commands that judge (check).
EXIT_HELP = """\b
Exit status:
  0  no check failed at or above --fail-on
  1  a check failed at or above --fail-on
  3  check: no check could be judged (all unknown or rule errors)
  2  gpudoctor could not run (bad arguments, bad rule file,
     unreadable or incompatible snapshot, missing root)"""


COMMANDS: dict[str, Entry] = {
    "bench": Entry("bench", "Measure each GPU against its datasheet and its peers (needs torch).", True),
    "check": Entry("check", "Check this machine (or a snapshot) and print findings with fixes.", True),
    "fix": Entry("fix", "Print the fixes: failing checks, the --torch build or --numa binding.", True),
    "gate": Entry("gate", "Pre-training go/no-go gate: exit 0 go, 1 no-go, 2 could not run.", True),
    "probe": Entry("probe", "Read the machine and print the facts snapshot as JSON.", True),
    "profile": Entry("profile", "Golden-node profiles: expectations from known-good snapshots.", False),
    "report": Entry("report", "Fleet reports: merge many JSON reports into one summary.", False),
    "rules": Entry("rules", "List, explain and validate rules.", False),
    # run asks NVML only when sysfs cannot place a GPU, then execs: an early NVML child would
    # mostly be wasted, once per rank.
    "run": Entry("run", "Bind to the GPU's NUMA node and exec CMD (run --numa -- CMD).", False),
    "select": Entry("select", "Print CUDA_VISIBLE_DEVICES for the K best free, healthy GPUs.", True),
    "tiers": Entry("tiers", "The GPU tier list (datasheet figures), this machine's GPUs marked.", True),
    "topo": Entry("topo", "Show GPUs, NUMA nodes, CPUs and NICs and how they connect.", True),
}

# Options after which a probing command does not probe this machine (it reads a snapshot or a
# tree, or only prints its help).
_NOT_LIVE = ("--facts", "--root", "--sysfs-root", "--procfs-root", "--help", "-h")


def help_text(name: str, body: str = "") -> str:
    """The help of command `name`: its summary, then `body` (click's help markup) if any."""
    summary = COMMANDS[name].summary
    return f"{summary}\n\n{body}" if body else summary


def probes_early(argv: list[str]) -> bool:
    """Whether this command line will probe this machine with NVML, so that the console script
    may start NVML's child before parsing it. A guess from argv alone: the command is the first
    word that is not an option (the root group takes no option with a value), and any option
    that points elsewhere (--facts, --root, ...) or asks for help means no."""
    command = next((a for a in argv if not a.startswith("-")), None)
    entry = COMMANDS.get(command) if command is not None else None
    if entry is None or not entry.probes:
        return False
    return not any(a == option or a.startswith(option + "=") for a in argv for option in _NOT_LIVE)
