#!/usr/bin/env bash
# The scaling study of issue 7 on one GPU node, sized for about 8 minutes of machine time.
#
# Grid: 1, 2, 4 GPUs (those the node has), 1, 2, 4, 16 CPU cores per GPU (those it has),
# windows 128 and 1024, pretrain and finetune, `base` preset, weak and strong scaling.
# Cells run the most CPUs per GPU first, so when the time budget (BUDGET_S) runs out the
# GPU-scaling cells are done and the rest stays pending: run the script again with the
# same WORK folder to resume. Results and the report go to $OUT (or benchmarks/gpu-study).
#
#   TOKENS=path/to/tokens bash benchmarks/run_gpu_study.sh       # a token folder made elsewhere
#   bash benchmarks/run_gpu_study.sh                              # synthesises one (needs wfdb)
#
# Environment: PYTHON (python3), BUDGET_S (grid seconds, 330), TIMEOUT_S (per launch, 120),
# PRESET (base), WINDOWS (128,1024), TASKS (pretrain,finetune) for a smaller smoke run,
# ENGINE_ARGS (extra engine flags, default "--no-compile": torch.compile costs about a
# minute per launch, more than this budget allows for 30 launches), WORK (scratch folder).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-330}
TIMEOUT_S=${TIMEOUT_S:-120}
ENGINE_ARGS=${ENGINE_ARGS:---no-compile}
PRESET=${PRESET:-base}
WINDOWS=${WINDOWS:-128,1024}
TASKS=${TASKS:-pretrain,finetune}
DEST=${OUT:-benchmarks/gpu-study}
WORK=${WORK:-/tmp/heartlm-gpu-study}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$DEST" "$WORK"

n_gpus=$("$PYTHON" -c "import torch; print(torch.cuda.device_count())")
n_cores=$("$PYTHON" -c "import os; print(len(os.sched_getaffinity(0)))")
pick() { local limit=$1; shift; local out=""; for v in "$@"; do
  if [ "$v" -le "$limit" ]; then out="${out:+$out,}$v"; fi; done; echo "${out:-1}"; }
gpus=$(pick "$n_gpus" 1 2 4)
cpus=$(pick "$n_cores" 1 2 4 16)
echo "gpu study: $n_gpus GPUs, $n_cores cores -> --gpus $gpus --cpus $cpus" >&2

data=()
if [ -n "${TOKENS:-}" ]; then data=(--data "$TOKENS"); fi
"$PYTHON" -m heartlm scale --gpus "$gpus" --cpus "$cpus" --window "$WINDOWS" \
  --task "$TASKS" --scaling weak,strong --preset "$PRESET" \
  --timeout "$TIMEOUT_S" --max-time "$BUDGET_S" --engine-args="$ENGINE_ARGS" \
  "${data[@]}" --out "$WORK/study" 2>&1 | tee "$WORK/scale.log"
"$PYTHON" -m heartlm report "$WORK/study" 2>&1 | tee -a "$WORK/scale.log"

# What comes back: at most 8 files (the device tool's limit), the heavy runs left behind.
s="$WORK/study"
cp "$s/results.csv" "$s/report.md" "$s/environment.json" "$s/grid.json" "$WORK/scale.log" "$DEST/"
tar -czf "$DEST/figures.tar.gz" -C "$s" figures
tar -czf "$DEST/cells.tar.gz" -C "$s" --exclude='*/run/tb' --exclude='*/run/checkpoints' \
  --exclude='*.safetensors' cells
echo "gpu study: report in $DEST/report.md (figures.tar.gz holds figures/)" >&2
