"""The rule engine: load YAML rules, evaluate them over facts, produce findings.

loader       rule files (built-in, --rules DIR, entry-point packs) -> schema check -> compiled rules
             (each distinct expression text compiled once per load)
rule_cache   a per-user cache of the parsed rule files and tables (plain data; never compiled code)
expressions  the checked expression language (node types, fact paths, helper calls, limits)
templates    message and fix templates ({placeholders}, no if/else), rendered within a bound
evaluator    evaluation by simpleeval: bounded, let: names worked out where read, work shared in a run
views        read-only views of the facts that record what a rule read (its evidence)
bounds       how large a value an evaluation may build
helpers/     the functions expressions may call (docs/rules-helpers.md is generated from them)
factpaths    which fact paths exist, from the facts schema
subjects     what a rule runs over (host, GPUs, NUMA nodes, NICs)
runner       every rule x every subject -> one finding
collector    the garbage collector paused while rules are loaded or run (millions of objects that live on),
             and what a large step leaves frozen, never walked again

Engine layer: imports the base modules (facts, findings, inputs, schemas, tables) and
probes.files (cpulist formatting); never advice, bench, the gate, render or the CLI.
"""
