"""gpudoctor's command line (layer 6, the top): parse, call, render. No logic of its own.

- registry: every command's name, module, one-line summary and whether it probes this machine
  (read by `gpudoctor --help` and by the console script's early NVML start; imports nothing);
- root: the root command group (commands loaded lazily from the registry) and the entry points;
- options: the options several commands share, each declared once;
- load: the facts (a snapshot or a probe) and the rules a command works on;
- output: writing a command's output, colour;
- errors: UserError, the one "you can fix this" error (exit status 2, one line);
- commands/: the commands themselves, one module each.

May import every layer below (render, the gate, bench, advice, engine, probes, the base modules).
Nothing below imports the CLI. This file imports nothing, so that the console script can ask the
registry before click is loaded.

Exit status (every command):
  0  nothing failed at or above --fail-on
  1  a check failed at or above --fail-on
  2  gpudoctor could not run: bad arguments, a bad rule file, an unreadable
     or incompatible snapshot, a missing root
"""
