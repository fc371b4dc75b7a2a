"""Many nodes at once: fleet summaries of reports, golden-node profiles and drift.

merge.py    `report merge`: which nodes fail which checks, counts per check and GPU model (the
            reports read by several processes at once, load_reports)
reading.py  how merge reads one report: bounded, strict JSON, checked by hand as strictly as the
            report schemas (report_check.py; the validator names what that check refuses)
profile.py  `profile create` (expectations from known-good snapshots), the profile file's loading
            (bounded, strict YAML, schemas/profile.schema.json) and `check --profile` (findings)
drift.py    `report merge --drift`: per profile fact, the fleet's majority value and the nodes
            that differ

Measure layer: imports base (inputs, schemas, facts, findings, model) and may import probes,
engine and advice; never the gate (preflight imports this package for the policy's `profile:`),
render or the CLI.
"""
