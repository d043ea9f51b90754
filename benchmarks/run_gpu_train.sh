#!/usr/bin/env bash
# Single-GPU training throughput: heartlm `base` vs the Hugging Face BertForMaskedLM peer,
# windows 128 (batch 256) and 1024 (batch 32), same GPU, same run. About 6-7 minutes on
# one H100. Writes $OUT/train_bench.jsonl and $OUT/train_bench.md.
#
#   OUT=/tmp/out bash benchmarks/run_gpu_train.sh
#   VARIANTS="default:;cudnn:sdpa=cudnn;rms:norm=rmsnorm" OUT=... bash benchmarks/run_gpu_train.sh
#   SKIP_PEER=1 ... (heartlm only)
set -u
OUT=${OUT:-benchmarks/results}
PY=${PYTHON:-python}
CONFIGS=${CONFIGS:-128:256,1024:32}
VARIANTS=${VARIANTS:-"default:;cudnn:sdpa=cudnn"}
mkdir -p "$OUT"
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$(pwd)/src"
export HEARTLM_PROGRESS=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.csv" 2>&1 || true
"$PY" -c "import torch; print(torch.__version__, torch.version.cuda)" > "$OUT/torch.txt" 2>&1
timeout 420 "$PY" benchmarks/train_bench.py --configs "$CONFIGS" --variants "$VARIANTS" \
    --out "$OUT/train_bench.jsonl" 2> "$OUT/heartlm.log"
echo "heartlm bench exit $?" >&2
if [ -z "${SKIP_PEER:-}" ]; then
    timeout 200 "$PY" benchmarks/hf_peer.py --configs "$CONFIGS" --out "$OUT/train_bench.jsonl" \
        2> "$OUT/hf_peer.log"
    echo "peer bench exit $?" >&2
fi
"$PY" benchmarks/train_bench.py --table "$OUT/train_bench.jsonl" | tee "$OUT/train_bench.md"
