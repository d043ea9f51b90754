#!/usr/bin/env bash
# One device call on 2 GPUs: does `heartlm pretrain --nproc 2 --cudagraph` finish, and if not,
# where does each process wait? Stacks come from SIGUSR2 (sitecustomize.py) after STALL_S.
set -uo pipefail
cd "$(dirname "$0")/../.."
D=${OUT:-/tmp/probe-out}; mkdir -p "$D"
python3 -m pip install -q --no-deps --no-index --break-system-packages --root-user-action=ignore .carry/wheels/*.whl
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/benchmarks/probe:$PWD/src:$PWD/tests"
rm -rf /tmp/tok; python3 -c "from pathlib import Path; from test_distributed import _write_tokens; _write_tokens(Path('/tmp/tok'))"
A="--preset tiny --window 16 --batch 8 --steps 20 --log-every 1 --ckpt-every 0 --val-every 0 --warmup 2 --lr 3e-3 --device ${DEVICE:-cuda} --precision ${PRECISION:-bf16} --seed 3 --nproc 2"
stacks() {  # SIGUSR2 to torchrun's workers only (the agent treats signals as a reason to stop)
  for p in $(pgrep -f "heartlm pretrain"); do
    own=$(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null)
    parent=$(tr '\0' ' ' </proc/$(awk '{print $4}' /proc/$p/stat 2>/dev/null)/cmdline 2>/dev/null)
    case $own in *torch.distributed.run*) continue;; esac
    case $parent in *torch.distributed.run*) kill -USR2 "$p"; echo "stacks of worker $p asked";; esac
  done
}
run() {  # name, extra flags
  local name=$1; shift
  rm -rf "/tmp/$name"
  ( sleep "${STALL_S:-90}"; stacks; sleep 3; pkill -KILL -f "heartlm pretrain" ) & local watch=$!
  local t=$SECONDS
  python3 -m heartlm pretrain /tmp/tok --out "/tmp/$name" $A "$@" >"$D/$name.log" 2>&1
  echo "$name: rc $? in $((SECONDS - t)) s"
  kill "$watch" 2>/dev/null
  python3 - "$name" <<'PY'
import json, sys
from pathlib import Path
m = Path("/tmp") / sys.argv[1] / "metrics.jsonl"
rows = [json.loads(x) for x in m.read_text().splitlines()] if m.exists() else []
print(sys.argv[1], {r["step"]: round(r["loss"], 5) for r in rows if "loss" in r})
PY
}
[ -n "${TINY_EAGER:-}" ] && run eager
run graph --cudagraph
tail -n 60 "$D/graph.log"
# Throughput, only when the tiny graph run finished: base, window 128, 256 windows per GPU.
[ -s /tmp/graph/result.json ] || exit 1
A="--preset base --window 128 --steps 60 --log-every 20 --ckpt-every 0 --val-every 0 --val-batches 1 --no-final-save --seed 0 --workers 0 --device cuda"
DATA=${DATA:-.carry-study/tokens}
tput() {  # name, nproc, extra flags
  local name=$1 n=$2; shift 2
  rm -rf "/tmp/$name"
  ( sleep "${BASE_STALL_S:-150}"; stacks; sleep 3; pkill -KILL -f "heartlm pretrain" ) & local watch=$!
  local t=$SECONDS
  python3 -m heartlm pretrain "$DATA" --out "/tmp/$name" $A --batch $((256 * n)) --nproc "$n" "$@" >"$D/$name.log" 2>&1
  local rc=$?
  kill "$watch" 2>/dev/null
  python3 - "$name" "$rc" "$((SECONDS - t))" <<'PY'
import json, sys
from pathlib import Path
m = Path("/tmp") / sys.argv[1] / "metrics.jsonl"
rows = [json.loads(x) for x in m.read_text().splitlines()] if m.exists() else []
print(sys.argv[1], "rc", sys.argv[2], "in", sys.argv[3], "s;",
      [(r["step"], round(r.get("tokens_per_s", 0)), round(r["loss"], 4)) for r in rows])
PY
}
PYTHONPATH="$PWD/src" tput eager1 1
PYTHONPATH="$PWD/src" tput graph1 1 --cudagraph
PYTHONPATH="$PWD/benchmarks/probe:$PWD/src" tput eager2 2
PYTHONPATH="$PWD/benchmarks/probe:$PWD/src" tput graph2 2 --cudagraph
