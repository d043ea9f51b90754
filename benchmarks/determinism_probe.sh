#!/usr/bin/env bash
# Two `pretrain --deterministic` runs and two plain runs of the study's pretraining recipe,
# four at once on one GPU as the study runs them: are the exported weights identical, and
# what does determinism cost? Prints one line per run (seconds, sha256 of its weights).
set -uo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/hlm-model}
if [ ! -e /tmp/hlm-wheels.done ]; then
  python3 -m pip install -q --no-deps --no-index --break-system-packages \
    --root-user-action=ignore .carry/wheels/*.whl && touch /tmp/hlm-wheels.done
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
[ -d "$WORK/tok_pre" ] || python3 benchmarks/model_study.py prepare --ecg "${ECG:-.carry/ecg}" \
  --work "$WORK" --jobs 16 >/dev/null 2>&1 || { echo "prepare failed" >&2; exit 2; }
recipe=(--preset small --window 256 --stride 32 --batch 256 --steps 2000 --warmup 200 --lr 6e-4
  --val-every 100 --export best --device auto)
run() {  # NAME [FLAGS]
  local name=$1 start=$SECONDS weights="$WORK/probe_$1/model.safetensors"
  shift
  rm -rf "$WORK/probe_$name"
  if ! python3 -m heartlm pretrain "$WORK/tok_pre" --out "$WORK/probe_$name" "${recipe[@]}" \
    "$@" >"$WORK/probe_$name.log" 2>&1 || [ ! -f "$weights" ]; then
    echo "$name failed: $(tail -1 "$WORK/probe_$name.log")" >&2
    return 1
  fi
  echo "$name $((SECONDS - start)) s $(sha256sum "$weights" | cut -c1-16)"
}
pids=()
run deterministic_a --deterministic & pids+=($!)
run deterministic_b --deterministic & pids+=($!)
run plain_a & pids+=($!)
run plain_b & pids+=($!)
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
exit $failed
