"""The rule engine: load YAML rules, evaluate them over facts, produce findings."""
