"""Renderers: every text, JSON, JUnit, Prometheus, NFD, Markdown, shell and SVG output. Formatting
only: they judge nothing and read nothing but their arguments.

envelope     the report envelope (host, time, GPUs, versions) shared by the check and gate reports
text         the check report for people (and the header line other outputs reuse)
json_report  the check report as JSON (schemas/report.schema.json)
select_json  `select --format json`: the chosen GPUs and why others were left out
gate_text, gate_json, gate_distributed, junit, prometheus, nfd, markdown   the gate's outputs
fleet        `report merge` for people
safe         printable(): what may reach a terminal
and the advice, bench, topology, tiers and rules outputs (fix_list, shell, numa_plan, torch_build,
bench, topo, tiers, tiers_chart, tiers_plot, rules).

Render layer: may import every layer below it (the base modules, probes, engine, advice, bench and
the gate package); never the CLI.
"""
