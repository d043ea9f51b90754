#!/usr/bin/env bash
# Fine-tuning with the step as one CUDA graph against eager and compiled, on the model
# study's beat flags (window 32, per-beat network with bins, 10 % of the labels).
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-deps --no-index --break-system-packages --root-user-action=ignore .carry/wheels/*.whl
export PYTHONPATH="$PWD/src" NCCL_NVLS_ENABLE=0
W=/tmp/cgp; rm -rf $W; mkdir -p $W; cd $W
H="python3 -m heartlm"
$H synth s --records 12 --minutes 10 --fs 360 --seed 0 >/dev/null 2>&1 && $H ingest s --out st >/dev/null 2>&1 &&
  $H tokenize st --out tok --vocab 64 --seed 0 >/dev/null 2>&1 &&
  $H pretrain tok --out pre --preset small --window 64 --batch 16 --steps 5 --warmup 1 --no-compile >/dev/null 2>&1 || { echo prep failed; exit 1; }
i=0
for v in "--no-compile" "" "--cudagraph --no-compile" "--cudagraph"; do
  i=$((i+1))
  /usr/bin/time -f "wall %e s" timeout 90 $H finetune pre --task beats --data tok --out ft$i --window 32 --stride 8 \
    --epochs 20 --batch 64 --lr 3e-4 --warmup 10 --inputs relative --beat-mlp 256 --beat-mlp-bins 32 \
    --label-fraction 0.1 --val-fraction 0 --seed 0 $v 2>&1 | tail -2
  python3 - "$v" ft$i/metrics.jsonl <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[2]) if '"step_time_s"' in l]
late = [r["step_time_s"] for r in rows if r["step"] > 50]
print(f"[{sys.argv[1] or 'compile'}] steps {rows[-1]['step']}, median step {1e3*statistics.median(late):.2f} ms after step 50, last loss {rows[-1]['loss']:.4f}")
PY
done
