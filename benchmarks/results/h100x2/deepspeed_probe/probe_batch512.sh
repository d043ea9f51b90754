#!/usr/bin/env bash
# Run on nvidia-h100-x2, 2026-11-26, with a temporary patch (not committed) in
# heartlm.train.loop._build: HLM_DS_MODE=eager turned compile off for ZeRO-1/2 across
# processes, HLM_DS_MODE=after compiled the module with DeepSpeed's engine.compile() after
# deepspeed.initialize; any other value kept the code as committed before the fix (compile
# first). The fix (heartlm.train.zero.traceable) now makes eager the only path.
set -u
export NCCL_NVLS_ENABLE=0 PYTHONPATH=$PWD/src HEARTLM_PROGRESS=0 TORCHINDUCTOR_CACHE_DIR=/tmp/hlm-inductor
python3 -m pip install -q --no-deps --no-index --break-system-packages .carry/wheels/*.whl .carry-ds/*.whl >/dev/null 2>&1
T=.carry-study/x2/tokens
CELL=(--window 128 --steps 56 --log-every 8 --seed 0 --workers 0 --preset base --ckpt-every 0 --val-every 0 --val-batches 1 --no-final-save)
run() {  # name mode extra...
  local name=$1 mode=$2; shift 2
  local t0; t0=$(date +%s)
  env HLM_DS_MODE="$mode" timeout 100 python3 -m heartlm pretrain $T --out /tmp/q_$name "${CELL[@]}" \
    --nproc 2 --backend deepspeed --zero-stage 1 --device cuda "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 ))s | $(grep -o 'step [0-9]*: loss [0-9.]*' "$OUT/$name.log" | tail -1) | $(grep -o 'CUBLAS_STATUS[A-Z_]*\|misaligned address' "$OUT/$name.log" | sort -u | tr '\n' ' ')"
}
run b512 compiled --batch 512
run b512_eager eager --batch 512 --profile-steps 8
run b512_prof compiled --batch 512 --profile-steps 8
