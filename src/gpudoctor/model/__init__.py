"""Typed, read-only views of what gpudoctor knows, and the small value formats they use.

Base layer: a module here imports only the standard library and gpudoctor's other base modules
(inputs, facts, findings, context, schemas, tables); never probes, engine, advice, the gate,
render or the CLI, which all read through these views instead of parsing values themselves.
"""
