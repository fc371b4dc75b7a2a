"""What `check --facts FILE` imports: a set, not a time, so that start-up stays lean (issue 16).

Judging a saved snapshot needs the command line, the engine, the snapshot's validator and the
one renderer of the chosen format: no probe (nothing of this machine is read), no completion
(only the shell's TAB asks for it), no other format's renderer, no advice, and not the
fastjsonschema package or YAML (the generated validator and the rule cache need neither). A
change that imports one more module here must add it below on purpose.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO

SNAPSHOT = REPO / "tests" / "fixtures" / "snapshots" / "h200-x2.json"

# The console script's steps (gpudoctor.__main__.main) up to the command, without its last one
# (os._exit, which would leave no chance to list the modules).
IMPORTED = """
import contextlib, io, json, sys
argv = sys.argv[1:]
from gpudoctor.cli.registry import probes_early
if probes_early(argv):
    from gpudoctor.probes import nvml
    nvml.prestart()
from gpudoctor.cli.root import run
with contextlib.redirect_stdout(io.StringIO()):
    code = run(argv)
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

# Every gpudoctor module `check --facts FILE` (text) imports.
CHECK_FACTS_TEXT = {
    "gpudoctor",
    "gpudoctor.cli",
    "gpudoctor.cli.commands",
    "gpudoctor.cli.commands.check",
    "gpudoctor.cli.errors",
    "gpudoctor.cli.load",
    "gpudoctor.cli.options",
    "gpudoctor.cli.output",
    "gpudoctor.cli.registry",
    "gpudoctor.cli.root",
    "gpudoctor.context",
    "gpudoctor.engine",
    "gpudoctor.engine.bounds",
    "gpudoctor.engine.cached_rules",
    "gpudoctor.engine.collector",
    "gpudoctor.engine.evaluator",
    "gpudoctor.engine.expressions",
    "gpudoctor.engine.factpaths",
    "gpudoctor.engine.helpers",
    "gpudoctor.engine.helpers.common",
    "gpudoctor.engine.helpers.devices",
    "gpudoctor.engine.helpers.rates",
    "gpudoctor.engine.helpers.registry",
    "gpudoctor.engine.helpers.values",
    "gpudoctor.engine.helpers.versions",
    "gpudoctor.engine.loader",
    "gpudoctor.engine.program",
    "gpudoctor.engine.rule",
    "gpudoctor.engine.rule_cache",
    "gpudoctor.engine.runner",
    "gpudoctor.engine.subjects",
    "gpudoctor.engine.templates",
    "gpudoctor.engine.views",
    "gpudoctor.escaping",
    "gpudoctor.facts",
    "gpudoctor.findings",
    "gpudoctor.frozen",
    "gpudoctor.inputs",
    "gpudoctor.lazy_re",
    "gpudoctor.model",
    "gpudoctor.model.bus_ids",
    "gpudoctor.model.cpus",
    "gpudoctor.model.gpus",
    "gpudoctor.model.nics",
    "gpudoctor.model.profile_facts",
    "gpudoctor.model.spec_match",
    "gpudoctor.model.topology",
    "gpudoctor.outputs",
    "gpudoctor.render",
    "gpudoctor.render.envelope",
    "gpudoctor.render.layout",
    "gpudoctor.render.text",
    "gpudoctor.rootfs",
    "gpudoctor.schemas",
    "gpudoctor.schemas._errors",
    "gpudoctor.schemas._validate_facts",
    "gpudoctor.tables",
}


def imported(tmp_path, *args: str) -> set[str]:
    # a warm rule cache of its own, as on a node that ran check before
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), GPUDOCTOR_CACHE_DIR=str(tmp_path / "cache"))
    argv = [sys.executable, "-c", IMPORTED, "check", "--facts", str(SNAPSHOT), *args]
    for _ in range(2):  # the first run fills the cache
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["code"] == 0
    return set(result["modules"])


def test_check_facts_imports_only_what_judging_a_snapshot_needs(tmp_path):
    modules = imported(tmp_path)
    assert {m for m in modules if m.startswith("gpudoctor")} == CHECK_FACTS_TEXT
    # textwrap: imported by the first prose that wraps (render.layout.wrap); a snapshot whose
    # checks all pass has none
    assert not {"fastjsonschema", "yaml", "click.shell_completion", "textwrap"} & modules


def test_check_facts_json_imports_the_json_renderer_too(tmp_path):
    # the JSON report carries the text report's human host line (render.text.header)
    ours = {m for m in imported(tmp_path, "--format", "json") if m.startswith("gpudoctor")}
    assert ours == CHECK_FACTS_TEXT | {"gpudoctor.render.json_report"}
