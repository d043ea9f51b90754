#!/usr/bin/env bash
# The GPU results run of benchmarks/finetune_results.py (small preset, bounded steps):
# pretrain on everything unlabelled except MIT-BIH DS2, fine-tune beats (pretrained vs
# scratch, 100 % vs 10 % of DS1's labels) and AFIB, score on DS2 and on raw LUDB.
# Writes benchmarks/results/finetune_gpu.{md,json}. Run from the repository root:
#     bash benchmarks/finetune_results.sh [OUT] [ECG]
# If a time limit cuts it short, run it again with RESUME=1: finished steps are skipped.
set -euo pipefail
OUT=${1:-/tmp/heartlm_ft_results}
ECG=${2:-../shared/ecg}
PY=${PYTHON:-.venv/bin/python}
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU')"
if [[ "${RESUME:-0}" == 1 ]]; then MODE=--resume; else MODE=--overwrite; fi
exec "$PY" benchmarks/finetune_results.py --profile gpu --ecg "$ECG" --out "$OUT" "$MODE"
