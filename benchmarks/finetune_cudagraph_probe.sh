#!/usr/bin/env bash
# Fine-tuning with the step as one CUDA graph against eager and compiled, on the model
# study's beat flags (window 32, per-beat network with bins, 10 % of the labels), on
# synthetic data: one run alone in each mode, then RUNS runs side by side (eager, then as
# graphs), as the model study runs them.
#
#   bash benchmarks/finetune_cudagraph_probe.sh        # on the GPU machine, .carry/wheels there
#   RUNS=16 ALONE=0 bash benchmarks/finetune_cudagraph_probe.sh   # side by side only
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-deps --no-index --break-system-packages \
  --root-user-action=ignore .carry/wheels/*.whl
export PYTHONPATH="$PWD/src" NCCL_NVLS_ENABLE=0
RUNS=${RUNS:-8}
W=${WORK:-/tmp/cgp}
rm -rf "$W" && mkdir -p "$W" && cd "$W" || exit 2
H="python3 -m heartlm"
FLAGS="--task beats --data tok --window 32 --stride 8 --batch 64 --lr 3e-4 --warmup 10
  --inputs relative --beat-mlp 256 --beat-mlp-bins 32 --label-fraction 0.1 --val-fraction 0"
{ $H synth s --records 12 --minutes 10 --fs 360 --seed 0 && $H ingest s --out st &&
  $H tokenize st --out tok --vocab 64 --seed 0 &&
  $H pretrain tok --out pre --preset small --window 64 --batch 16 --steps 5 --warmup 1 \
    --no-compile; } >prepare.log 2>&1 || { tail -5 prepare.log; exit 1; }

steps() {  # MODE RUN: steps, median step time after step 50, last loss
  python3 - "$1" "$2/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[2]) if '"step_time_s"' in line]
late = [r["step_time_s"] for r in rows if r["step"] > 50] or [r["step_time_s"] for r in rows]
print(f"[{sys.argv[1]}] steps {rows[-1]['step']}, median step {1e3 * statistics.median(late):.2f} ms"
      f" after step 50, last loss {rows[-1]['loss']:.4f}")
PY
}

i=0
alone_modes=("--no-compile" "" "--cudagraph --no-compile" "--cudagraph")
[ "${ALONE:-1}" = 0 ] && alone_modes=()
for mode in "${alone_modes[@]}"; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  timeout 120 $H finetune pre $FLAGS --out alone$i --epochs 20 --seed 0 $mode 2>&1 | tail -1
  steps "alone ${mode:-compiled}" alone$i
done
for mode in "--no-compile" "--cudagraph --no-compile"; do
  start=$(date +%s.%N)
  for r in $(seq "$RUNS"); do
    # shellcheck disable=SC2086
    timeout 300 $H finetune pre $FLAGS --out side${mode// /}_$r --epochs 60 --seed "$r" $mode \
      >"side${mode// /}_$r.log" 2>&1 &
  done
  wait
  echo "$RUNS runs side by side, $mode: $(python3 -c "import time; print(f'{time.time() - $start:.1f}')") s"
  steps "side by side $mode" "side${mode// /}_1"
done
