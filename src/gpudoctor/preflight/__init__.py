"""The pre-training gate (`gpudoctor gate`, and the Python API ``from gpudoctor import gate``): a
policy, the checks it runs, and one go/no-go verdict.

- policy.py: what the gate expects and when it says no-go (a YAML file, a mapping, flags);
- checks.py: the required/ignore selectors over the rules, the gate's own among them;
- device_test.py: ``--deep``, the device test run in a child under the deadline
  (its worker script is workers/device_test.py); device_facts.py: its result as facts;
- distributed.py: ``--distributed``, the gate across the ranks of a torchrun job;
- verdict.py: the facts the gate's rules judge, which findings block, the lines of a no-go, the
  report model;
- api.py: one gate run (``run``, for the CLI) and ``gate()`` (for job scripts); errors.py: the
  exceptions of a gate that could not run (a no-go is verdict.GateFailed).

The gate's own checks (ids gate-...) are rules like every other, in rules/gate/ (area gate), loaded
only by the gate (engine.loader.load_rules(gate=True)). They judge what the gate adds to the facts:
the policy's expectations (section ``policy``: expect_gpus, expect_model, min_free_memory_gib,
expect_nics, expect_nic_rate_gbps, expect_nvlink_links, min_busbw_gbps, absent when not set),
the device test's result (``device_test``; a GPU's own steps as gpu.device_test) and the
distributed all-reduce (``allreduce``). A gate rule whose input is absent is not run, and not
reported.

What blocks (the verdict is no-go when at least one finding blocks):

- A check *can block* when its severity is at or above ``fail_on`` (default error), or when the
  policy lists it (by id, area or tag) under ``required``.
- A failed check that can block, blocks.
- A check that could not be judged — its inputs were unavailable (status unknown), the rule broke
  (status error), or it reports that a source did not answer in time (rules tagged ``hang``, such
  as nvml-not-responding, and a device test that did not finish) — blocks when it can block and
  the policy is fail-closed (the default). Under ``on_cannot_check: fail-open`` it does not block
  and is reported as not judged, except for required checks, which must always be judged.
- Except: a check whose inputs are unavailable only because this process may not read them
  (reason ``no_permission``: the kernel log for a user without CAP_SYSLOG) or because the hardware
  or driver has no such feature (``not_supported``) says nothing about the machine's health; it
  is reported as not judged and blocks only when required. Unavailable for any other reason
  (``timeout``, ``error``, ``driver_not_loaded``, ``not_found``) means something did not answer
  or is missing, and fail-closed blocks on it. (Whether this process can use the GPUs at all is
  its own check: nvidia-device-nodes-not-accessible.)
- Checks under ``ignore`` are not run at all; a required check that does not apply to this
  machine (status skip) does not block.

Everything that can block runs under the policy's deadline: NVML in a forked child (a stuck
driver becomes nvml.status = timeout), the device test in a child process that is killed, never
waited for. The gate judges facts only; probing and the device test are the callers' inputs.

Layer 4 (beside bench/): imports the base modules (facts, findings, inputs, children, context,
schemas), probes/ and engine/; never advice/, render/ or the CLI. The package's modules import
this package's modules without cycles.
"""
