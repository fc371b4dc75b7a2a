#!/usr/bin/env bash
# The gate on a real multi-GPU host, as issue 5's acceptance asks: `gate`, `gate --deep` timed beside
# torch's own CUDA start-up in the same run, the GPU-marked gate tests, and a two-rank torchrun
# `gate --distributed` with the NCCL all-reduce bandwidth. Nothing is installed: gpudoctor runs
# from this checkout (PYTHONPATH=src) with an interpreter that has torch and gpudoctor's
# dependencies (click, pyyaml, simpleeval, fastjsonschema, packaging, nvidia-ml-py).
#
#   PY=/opt/torch/.venv/bin/python3 EXPECT_GPUS=2 EXPECT_MODEL=H200 scripts/gpu_host_gate.sh [OUTDIR]
#
# Writes gate.json, gate.xml, gate.prom, nfd-gpudoctor, gate-deep.json and dist.json to OUTDIR
# (default /tmp/gpudoctor-gate) and prints every exit status.

set -u
cd "$(dirname "$0")/.." || exit 2
PY="${PY:-python3}"
OUT="${1:-/tmp/gpudoctor-gate}"
NPROC="${NPROC:-2}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
EXPECT=()
[ -n "${EXPECT_GPUS:-}" ] && EXPECT+=(--expect-gpus "$EXPECT_GPUS")
[ -n "${EXPECT_MODEL:-}" ] && EXPECT+=(--expect-model "$EXPECT_MODEL")

"$PY" -c "import click, yaml, simpleeval, fastjsonschema, packaging, pynvml, torch
print('python', __import__('sys').version.split()[0], '· torch', torch.__version__, '·', torch.cuda.device_count(), 'CUDA device(s)')" ||
  { echo "$PY lacks torch or a gpudoctor dependency"; exit 2; }

echo "== gpudoctor gate"
timeout 120 "$PY" -m gpudoctor gate "${EXPECT[@]}" --json "$OUT/gate.json" --junit "$OUT/gate.xml" \
  --prometheus "$OUT/gate.prom" --nfd-features "$OUT/nfd-gpudoctor"
echo "exit status $?"

echo "== gpudoctor gate --deep"
timeout 180 "$PY" -m gpudoctor gate "${EXPECT[@]}" --deep --python "$PY" -v --json "$OUT/gate-deep.json"
echo "exit status $?"

echo "== times, beside torch + one CUDA context, interleaved in the same run"
timeout 400 "$PY" scripts/bench_gate.py --runs "${RUNS:-5}" --python "$PY" -- "${EXPECT[@]}"

if "$PY" -c "import pytest" 2>/dev/null; then
  echo "== GPU-marked gate tests"
  timeout 300 "$PY" -m pytest -q -m gpu tests/gate -p no:cacheprovider
  echo "exit status $?"
fi

echo "== torchrun --nproc-per-node $NPROC gate --distributed"
timeout 300 "$PY" -m torch.distributed.run --standalone --nproc-per-node "$NPROC" \
  -m gpudoctor gate --distributed "${EXPECT[@]}" --min-busbw "${MIN_BUSBW:-100}" --json "$OUT/dist.json"
echo "exit status $?"
"$PY" - "$OUT/dist.json" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))["distributed"]
except (OSError, KeyError, ValueError) as exc:
    sys.exit(f"no distributed report: {exc}")
a = d.get("allreduce") or {}
print(f"backend {d['backend']}, {d['world_size']} ranks: all-reduce {a.get('bytes', 0) / 2**20:g} MiB x {a.get('iterations')}: "
      f"bus bandwidth {a.get('busbw_gbps')} GB/s, algorithm bandwidth {a.get('algbw_gbps')} GB/s, correct {a.get('correct')}")
EOF
