"""Advice: plans computed from the facts alone (NUMA binding, torch build, GPU selection, tiers, fix list).

Nothing here reads the machine: a snapshot or a fixture root yields the advice for that machine.
Plans are data, not text: a command is carried as an argv list, and render/ writes every plan
as text, JSON or a script (render/shell.py quotes the words). May import the base layer (facts,
findings, inputs, context, schemas, model/), probes/ and engine/; never bench/, the gate,
render/ or the CLI.
"""
