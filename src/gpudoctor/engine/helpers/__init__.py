"""The functions rule expressions may call, one module per concern.

registry   the function table (FUNCTIONS, bind): nothing else is callable; the helpers bound per
           run to the data tables (lookup, flag_names, lookup_path, gpu_arch, xids_of, gpu_spec)
values     plain values, strings and lists of facts (has_bits, count_where, ...), bounded built-ins
versions   versions, GPU architectures, wheel tags (version, arch_supported, wheel_family, ...)
devices    visible-devices values, GPUs per NUMA node, OS support (visible_devices_problem, ...)
common     what they share: fields of fact views, short numbers in strings, cut error texts

Engine layer: imports engine.views, gpudoctor.facts and gpudoctor.inputs (and model.cpus for
cpulist); never the rest of the engine. docs/rules-helpers.md is generated from the docstrings.
"""
