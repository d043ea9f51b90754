#!/usr/bin/env bash
# Weak scaling of `heartlm pretrain --preset base` on 1, 2, 4 GPUs of one node (as many as
# the machine has), windows 128 and 1024: tokens/s, speedup, efficiency, overhead.
#
#   OUT=benchmarks/results/gpu_scaling bash benchmarks/run_gpu_scaling.sh
#
# Knobs (environment): OUT, PYTHON (python3), GPUS ("1 2 4"), WINDOWS ("128 1024"),
# STEPS (60), CELL_TIMEOUT (240 s), PER_GPU_TOKENS (8192: per-GPU batch = this / window).
# Writes $OUT/gpu_scaling.json and $OUT/gpu_scaling.md (+ each cell's metrics, run.json, log).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-benchmarks/results/gpu_scaling}
PYTHON=${PYTHON:-python3}
WINDOWS=${WINDOWS:-128 1024}
STEPS=${STEPS:-60}
CELL_TIMEOUT=${CELL_TIMEOUT:-240}
PER_GPU_TOKENS=${PER_GPU_TOKENS:-8192}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 OMP_NUM_THREADS=4

have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${have:-0}" -lt 1 ]; then
    echo "run_gpu_scaling.sh: no GPU found (nvidia-smi -L)" >&2
    exit 2
fi
GPUS=${GPUS:-1 2 4}
mkdir -p "$OUT"
work=$(mktemp -d "${TMPDIR:-/tmp}/heartlm-scaling.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$PYTHON" benchmarks/gpu_scaling.py corpus "$work/tokens" --records 200 --beats-per-record 4096

for window in $WINDOWS; do
    per_gpu=$(( PER_GPU_TOKENS / window ))
    for n in $GPUS; do
        if [ "$n" -gt "$have" ]; then
            echo "skip: $n GPUs (this machine has $have)" >&2
            continue
        fi
        name="w${window}_g${n}"
        # Run folders (weights, checkpoint) stay in $work; only metrics and logs are kept.
        mkdir -p "$OUT/runs/$name"
        echo "== window $window, $n GPU(s), global batch $(( per_gpu * n ))" >&2
        # A failed or timed-out cell is recorded (no metrics) and the grid goes on.
        timeout "$CELL_TIMEOUT" "$PYTHON" -m heartlm pretrain "$work/tokens" \
            --out "$work/runs/$name" --preset base --window "$window" \
            --batch $(( per_gpu * n )) --steps "$STEPS" --warmup 10 --log-every 10 \
            --val-fraction 0 --ckpt-every 0 --nproc "$n" \
            > "$OUT/runs/$name/log.txt" 2>&1 \
            || echo "cell $name failed (exit $?): see $OUT/runs/$name/log.txt" >&2
        cp "$work/runs/$name/metrics.jsonl" "$work/runs/$name/run.json" "$OUT/runs/$name/" \
            2>/dev/null || true
        rm -rf "$work/runs/$name"
    done
done

"$PYTHON" benchmarks/gpu_scaling.py summarize "$OUT/runs" --out "$OUT" \
    --command "OUT=$OUT GPUS='$GPUS' WINDOWS='$WINDOWS' STEPS=$STEPS bash benchmarks/run_gpu_scaling.sh"
