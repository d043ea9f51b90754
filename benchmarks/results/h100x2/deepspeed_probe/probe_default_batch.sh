#!/usr/bin/env bash
# Run on nvidia-h100-x2, 2026-11-26, with a temporary patch (not committed) in
# heartlm.train.loop._build: HLM_DS_MODE=eager turned compile off for ZeRO-1/2 across
# processes, HLM_DS_MODE=after compiled the module with DeepSpeed's engine.compile() after
# deepspeed.initialize; any other value kept the code as committed before the fix (compile
# first). The fix (heartlm.train.zero.traceable) now makes eager the only path.
# Which way does ZeRO-1/2 run with bf16 autocast on the GPUs: compiled before deepspeed.initialize
# (crashed 2026-11-26), compiled by the engine after it, or eager. Losses beside DDP's.
set -u
export NCCL_NVLS_ENABLE=0 PYTHONPATH=$PWD/src HEARTLM_PROGRESS=0 TORCHINDUCTOR_CACHE_DIR=/tmp/hlm-inductor
python3 -m pip install -q --no-deps --no-index --break-system-packages .carry/wheels/*.whl .carry-ds/*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
python3 -c "import torch, deepspeed; print('torch', torch.__version__, 'deepspeed', deepspeed.__version__)"
T=.carry-study/x2/tokens
run() {  # name mode backend stage [env...]
  local name=$1 mode=$2 backend=$3 st=$4; shift 4
  local t0; t0=$(date +%s)
  env HLM_DS_MODE="$mode" "$@" timeout 170 python3 -m heartlm pretrain $T --out /tmp/p_$name --preset base \
    --window 128 --steps 40 --warmup 5 --nproc 2 --backend "$backend" ${st:+--zero-stage $st} \
    --device cuda --ckpt-every 0 >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 ))s | $(grep -o 'step [0-9]*: loss [0-9.]*' "$OUT/$name.log" | tail -1) | $(grep -io 'tokens/s[^,;]*' "$OUT/$name.log" | tail -1) | $(grep -o 'CUBLAS_STATUS[A-Z_]*\|misaligned address\|compile is off[^"]*' "$OUT/$name.log" | sort -u | tr '\n' ' ')"
}
run ddp x ddp ""
run z1_after after deepspeed 1
run z2_after after deepspeed 2
run z1_eager eager deepspeed 1
run z2_eager eager deepspeed 2
run z3 eager deepspeed 3
run z1_before before deepspeed 1 CUDA_LAUNCH_BLOCKING=1
grep -h -B2 -A12 "Error\|error" "$OUT/z1_before.log" | grep -v "^\[rank1\]" | head -60
tail -5 "$OUT/z1_after.log"
