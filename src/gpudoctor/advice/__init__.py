"""Advice: plans computed from the facts alone (NUMA binding, torch build, fix list).

Nothing here reads the machine: a snapshot or a fixture root yields the advice for that machine.
"""
