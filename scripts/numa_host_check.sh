#!/usr/bin/env bash
# NUMA binding on a real GPU host: the plan (fix --numa), one bound command per GPU (run --numa),
# the same through torchrun, and the topology view. Reads the machine; changes nothing on it and
# never touches GPU settings. Run from the repository root:
#
#   scripts/numa_host_check.sh [PYTHON]
#
# PYTHON is the interpreter that has gpudoctor's dependencies (and torch, for the torchrun step);
# default python3. The repository's src/ is put first on PYTHONPATH so this checkout is what runs.
set -u
PY=${1:-python3}
export PYTHONPATH="$(pwd)/src${PYTHONPATH:+:$PYTHONPATH}"
unset LOCAL_RANK SLURM_LOCALID
AFF='import os; m = open("/proc/self/numa_maps").readline().split()[1] if os.path.exists("/proc/self/numa_maps") else "?"; print("LOCAL_RANK", os.environ.get("LOCAL_RANK", "-"), "CPUs", sorted(os.sched_getaffinity(0)), "mempolicy", m)'

step() { printf '\n=== %s\n' "$*"; }

step "gpudoctor fix --numa"
"$PY" -m gpudoctor fix --numa; echo "exit $?"

step "gpudoctor fix --numa --strategy exclusive --format json"
"$PY" -m gpudoctor fix --numa --strategy exclusive --format json; echo "exit $?"

step "gpudoctor fix --numa --membind"
"$PY" -m gpudoctor fix --numa --membind; echo "exit $?"

step "gpudoctor run --numa -- python -c 'import os; print(os.sched_getaffinity(0))'"
"$PY" -m gpudoctor run --numa -- "$PY" -c "import os; print(os.sched_getaffinity(0))"; echo "exit $?"

for gpu in 0 1; do
  step "gpudoctor run --numa --strategy exclusive --gpu $gpu"
  "$PY" -m gpudoctor run --numa --strategy exclusive --gpu "$gpu" -- "$PY" -c "$AFF"; echo "exit $?"
done

step "gpudoctor run --numa --no-numactl --membind --gpu 1 (sched_setaffinity + set_mempolicy path)"
"$PY" -m gpudoctor run --numa --no-numactl --membind --gpu 1 -- "$PY" -c "$AFF"; echo "exit $?"

step "gpudoctor run --numa --gpu 7 (must exit 2 in one line on a 2-GPU host)"
"$PY" -m gpudoctor run --numa --gpu 7 -- true; echo "exit $?"

step "torchrun --nproc-per-node 2 --no-python -- gpudoctor run --numa --strategy exclusive -- python -c AFFINITY"
"$PY" -m torch.distributed.run --nproc-per-node 2 --no-python -- \
  "$PY" -m gpudoctor run --numa --strategy exclusive -- "$PY" -c "$AFF"; echo "exit $?"

step "gpudoctor topo"
"$PY" -m gpudoctor topo; echo "exit $?"

step "gpudoctor topo --format json"
"$PY" -m gpudoctor topo --format json; echo "exit $?"

step "time of one run --numa (8 runs)"
start=$(date +%s.%N)
for _ in 1 2 3 4 5 6 7 8; do "$PY" -m gpudoctor run --numa -q -- true; done
end=$(date +%s.%N)
"$PY" -c "import sys; print('mean %.3f s per run --numa' % ((float(sys.argv[2]) - float(sys.argv[1])) / 8))" "$start" "$end"
start=$(date +%s.%N)
for _ in 1 2 3 4 5 6 7 8; do "$PY" -c "import click" ; done
end=$(date +%s.%N)
"$PY" -c "import sys; print('mean %.3f s per python start importing click (reference)' % ((float(sys.argv[2]) - float(sys.argv[1])) / 8))" "$start" "$end"
