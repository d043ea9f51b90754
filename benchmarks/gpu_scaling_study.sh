#!/usr/bin/env bash
# The scaling study of issue 13 on one 4-GPU (or 2-GPU) node, in pieces that each fit a
# 10-minute call and resume: the same command again continues where the last one stopped.
#
#   bash benchmarks/gpu_scaling_study.sh PHASE...     # e.g. env core peer socket report
#
# Phases (each skips what is done; cells run in `heartlm scale` and resume there):
#   env       nvidia-smi topology; NCCL all-reduce bus bandwidth over NVLink at 2 and 4 GPUs
#   core      pretrain, windows 128 and 1024, weak and strong, 1/2/4 GPUs, ddp, 16 CPUs/GPU,
#             repeat 0 (10 launches)
#   repeats   the core cells' repeats 1 and 2 (20 launches)
#   backends  fsdp, zero1, zero2, zero3 beside ddp, weak and strong, 2/4 GPUs (32 launches)
#   finetune  finetune cells like core (10 launches)
#   cpus      the core and finetune cells at 1, 2 and 4 CPUs per GPU, repeat 0 (60 launches)
#   levers    pretrain weak, one small study per lever (LEVERS, NAME:BACKEND:FLAGS), in this
#             order: ddp with the default 100-MiB buckets (the same machine's baseline), with
#             DDP's own 25-MiB buckets, with one 400-MiB bucket (the all-reduce after
#             backward, not overlapping it), with 200-MiB buckets, with the whole step as one
#             CUDA graph, with bf16 gradients,
#             with Python GC every 50 steps; fsdp with GC every 50 steps and with one FSDP2
#             unit per block (the layout before units of 100 M parameters became the
#             default) (36 launches)
#   peer      Hugging Face BertForMaskedLM + Trainer at 1, 2 and 4 GPUs (torchrun)
#   socket    2 torchrun agents x 1, then x 2 GPUs over a socket, window 128 (twonode)
#   accum     the socket run with ACCUM (8) micro-batches per all-reduce, its own 1/2-GPU
#             reference (STUDY/accumN), and its report
#   report    results.csv over every phase's cells, and heartlm report
#   all       every phase in that order
# After every phase the study (without traces, caches and weights) is packed into
# $OUT/study.tar.gz, so a call cut off at its limit still brings back what it finished;
# carry it back as .carry-study/state.tar.gz and a fresh machine resumes from it.
#
# A study's cells are keyed by the flags given, not by defaults: fsdp cells of a state made
# before the FSDP2 unit default changed (one unit per block; .carry-study/x2 holds such) would
# sit beside new ones of another layout. Start fsdp cells in a fresh study (CARRY=...fresh).
#
# Environment: BUDGET_S (seconds of work this call, 540), STUDY (/tmp/hlm-study: kept while
# the machine stays warm), CARRY (.carry-study: tokens/, state.tar.gz), WHEELS (folders of
# wheels to install: ".carry/wheels .carry-ds"), OUT ($OUT, else benchmarks/gpu-study),
# PYTHON (python3), TIMEOUT_S (per launch, 240); to run part of the core, repeats and
# backends phases: WINDOWS (128,1024), SCALINGS (weak,strong), BACKENDS (backends phase:
# ddp,fsdp,zero1,zero2,zero3), LEVERS (levers phase: NAME:BACKEND:FLAGS ..., several flags
# of one lever joined by commas: bf16one:ddp:--grad-reduce=bf16,--ddp-bucket-mb=400), LEVER_SCALINGS
# (the levers' scalings: weak; weak,strong for a lever against host overhead); for a smoke
# test on a CPU machine: PRESET (base), SCALE_ARGS
# (extra `heartlm scale` flags, e.g. "--steps 8 --warmup 2 --profile-steps 2 --batch 4").
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
STUDY=${STUDY:-/tmp/hlm-study}
CARRY=${CARRY:-.carry-study}
WHEELS=${WHEELS:-.carry/wheels .carry-ds}
DEST=${OUT:-benchmarks/gpu-study}
PY=${PYTHON:-python3}
TIMEOUT_S=${TIMEOUT_S:-240}
PRESET=${PRESET:-base}
WINDOWS=${WINDOWS:-128,1024}
SCALINGS=${SCALINGS:-weak,strong}
BACKENDS=${BACKENDS:-ddp,fsdp,zero1,zero2,zero3}
read -r -a SCALE_ARGS <<<"${SCALE_ARGS:-}"
# NVLink multicast stays off on shared hosts (KINDS.md); one inductor cache for every cell.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/hlm-inductor}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HEARTLM_PROGRESS=0
mkdir -p "$DEST"
LOG="$DEST/study.log"
say() { echo "[study $(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG" >&2; }
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }

# Wheels once per machine (the image lacks wfdb, soundfile, edfio, DeepSpeed and its needs).
if [ ! -e /tmp/hlm-wheels.done ]; then
  whl=$(for d in $WHEELS; do ls "$d"/*.whl 2>/dev/null; done)
  if [ -n "$whl" ]; then
    # shellcheck disable=SC2086
    $PY -m pip install -q --no-deps --no-index --break-system-packages $whl >>"$LOG" 2>&1 \
      && touch /tmp/hlm-wheels.done || say "wheel install failed (see study.log)"
  fi
fi
# A fresh machine resumes from the state the last call brought back.
if [ ! -e "$STUDY/grid.json" ] && [ -e "$CARRY/state.tar.gz" ]; then
  tar -xzf "$CARRY/state.tar.gz" -C "$(dirname "$STUDY")" && say "resumed from $CARRY/state.tar.gz"
fi
DATA=()
[ -e "$CARRY/tokens/tokens.json" ] && DATA=(--data "$PWD/$CARRY/tokens")
NGPU=$($PY -c "import torch; print(torch.cuda.device_count())")
GPUS=1,2; [ "$NGPU" -ge 4 ] && GPUS=1,2,4

# Every phase is one `heartlm scale` over the same workload (grid.json), growing its axes.
# `--max-time` starts no cell late; `timeout` ends one that would outlast the call (the
# grid reruns it next time).
scale() {  # scale MAX_TIME_S ARGS...
  local t=$1; shift
  timeout $(( $(left) > 30 ? $(left) - 15 : 15 )) \
    $PY -m heartlm scale --out "$STUDY" "${DATA[@]}" --gpus "$GPUS" --preset "$PRESET" \
    --timeout "$TIMEOUT_S" --max-time "$t" --backend-cpus 16 "${SCALE_ARGS[@]}" "$@" \
    >>"$LOG" 2>&1
  [ -e "$STUDY/results.csv" ] && say "cells: $($PY -c "import csv,collections,sys; print(dict(collections.Counter(r['status'] for r in csv.DictReader(open(sys.argv[1])))))" "$STUDY/results.csv")"
}
budget() { local t; t=$(( $(left) - ${1:-75} )); [ "$t" -gt 0 ] && echo "$t"; }

phase_env() {
  nvidia-smi topo -m >"$STUDY/comm/topology.txt" 2>&1
  for n in 2 4; do
    [ "$n" -le "$NGPU" ] && [ ! -e "$STUDY/comm/nvlink_n$n.json" ] || continue
    $PY -m torch.distributed.run --standalone --nproc-per-node "$n" -m heartlm.scale.allreduce \
      --out "$STUDY/comm/nvlink_n$n.json" --label nvlink >>"$LOG" 2>&1
    say "all-reduce over NVLink, $n GPUs: $($PY -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; print(', '.join(f\"{x['bytes']/2**20:.0f} MiB {x['busbw']/1e9:.0f} GB/s\" for x in r))" "$STUDY/comm/nvlink_n$n.json")"
  done
}
CORE=(--cpus 16 --task pretrain --window "$WINDOWS" --scaling "$SCALINGS" --backend ddp)
phase_core() { local t; t=$(budget) && scale "$t" "${CORE[@]}" --repeats 1; }
phase_repeats() { local t; t=$(budget) && scale "$t" "${CORE[@]}" --repeats 3; }
phase_backends() {
  local t; t=$(budget) && scale "$t" --cpus 16 --task pretrain --window "$WINDOWS" \
    --scaling "$SCALINGS" --backend "$BACKENDS" --repeats 1
}
phase_finetune() {
  local t; t=$(budget) && scale "$t" --cpus 16 --task finetune --window "$WINDOWS" \
    --scaling weak,strong --backend ddp --repeats 1
}
phase_cpus() {
  local t; t=$(budget) && scale "$t" --cpus 1,2,4,16 --task pretrain,finetune \
    --window "$WINDOWS" --scaling weak,strong --backend ddp --repeats 1
}
LEVERS=${LEVERS:-bucket100:ddp:--ddp-bucket-mb=100 bucket25:ddp:--ddp-bucket-mb=25 nooverlap:ddp:--ddp-bucket-mb=400 bucket200:ddp:--ddp-bucket-mb=200 ddpgraph:ddp:--cudagraph bf16grad:ddp:--grad-reduce=bf16 gc50:ddp:--gc-every=50 fsdpgc50:fsdp:--gc-every=50 fsdpunit1:fsdp:--fsdp-group-blocks=1}
phase_levers() {  # separate studies: engine flags are part of a grid's workload
  local spec name backend flags t
  for spec in $LEVERS; do  # NAME:BACKEND:FLAGS
    name=${spec%%:*}; backend=${spec#*:}; flags=${backend#*:}; backend=${backend%%:*}
    flags=${flags//,/ }  # a lever of several flags joins them with commas
    t=$(budget) || return 0
    timeout $(( $(left) - 15 )) $PY -m heartlm scale --out "$STUDY/levers/$name" "${DATA[@]}" --gpus "$GPUS" \
      --preset "$PRESET" --timeout "$TIMEOUT_S" --max-time "$t" --cpus 16 --task pretrain \
      --window "$WINDOWS" --scaling "${LEVER_SCALINGS:-weak}" --repeats 1 --backend "$backend" \
      --engine-args="$flags" \
      "${SCALE_ARGS[@]}" >>"$LOG" 2>&1
    say "levers: $name done or paused"
  done
}
phase_peer() {
  local n
  [ "$NGPU" -ge 1 ] || { say "peer: needs GPUs"; return 0; }
  for n in ${GPUS//,/ }; do
    grep -q "\"world_size\": $n," "$STUDY/peer/hf_peer.jsonl" 2>/dev/null && continue
    [ "$(left)" -gt 200 ] || { say "peer: no time left for $n GPUs"; return 0; }
    timeout $(( $(left) - 15 )) $PY -m torch.distributed.run --standalone --nproc-per-node "$n" \
      benchmarks/hf_peer.py --configs 128:256,1024:32 --out "$STUDY/peer/hf_peer.jsonl" \
      >>"$LOG" 2>&1 || say "peer: $n GPUs failed (see study.log)"
    say "peer: $n GPUs: $(grep "\"world_size\": $n," "$STUDY/peer/hf_peer.jsonl" | $PY -c "import json,sys; print(', '.join(f\"w{r['window']} {r.get('tokens_per_s','?')} tok/s\" for r in map(json.loads, sys.stdin)))")"
  done
}
phase_socket() {
  [ "$(left)" -gt 150 ] || { say "socket: no time left"; return 0; }
  [ -e "$STUDY/grid.json" ] || { say "socket: run core first (it repeats its weak cell)"; return 0; }
  local procs=1; [ "$NGPU" -ge 4 ] && procs=1,2
  timeout $(( $(left) - 15 )) $PY -m heartlm.scale.twonode "$STUDY" --procs "$procs" \
    --window "${WINDOWS%%,*}" --timeout "$TIMEOUT_S" \
    >>"$LOG" 2>&1 || say "socket: a run failed (see study.log)"
  say "socket: $(cat "$STUDY/comm/socket_runs.json" 2>/dev/null | tr -d '\n' | cut -c1-300)"
}
phase_accum() {
  # The socket run again with ACCUM (8) micro-batches of MICRO (256) windows per all-reduce: its
  # own small study (1 and 2 GPUs over NVLink for the model's fit, the same accumulation
  # at 1 GPU as the reference), then 2 agents x 1 GPU over the socket and its report.
  local sub="$STUDY/accum${ACCUM:-8}" t
  t=$(budget 150) || { say "accum: no time left"; return 0; }
  timeout $(( $(left) - 15 )) $PY -m heartlm scale --out "$sub" "${DATA[@]}" --gpus 1,2 \
    --preset "$PRESET" --timeout "$TIMEOUT_S" --max-time "$t" --cpus 16 --task pretrain \
    --window "${WINDOWS%%,*}" --scaling weak --repeats 1 --batch $(( ${MICRO:-256} * ${ACCUM:-8} )) \
    --steps 16 --engine-args="--micro-batch ${MICRO:-256}" \
    "${SCALE_ARGS[@]}" >>"$LOG" 2>&1
  [ "$(left)" -gt 60 ] || { say "accum: no time left for the socket run"; return 0; }
  timeout $(( $(left) - 15 )) $PY -m heartlm.scale.twonode "$sub" --procs 1 \
    --window "${WINDOWS%%,*}" --timeout "$TIMEOUT_S" >>"$LOG" 2>&1 \
    || say "accum: the socket run failed (see study.log)"
  $PY -m heartlm report "$sub" >>"$LOG" 2>&1
  say "accum: $(grep -A3 '^| configuration' "$sub/report.md" 2>/dev/null | tail -1)"
}
phase_report() {
  # results.csv over the union of the phases' axes; nothing is launched (--max-time 0),
  # and finetune only once its phase made the pretrained run it starts from.
  local tasks=pretrain; [ -e "$STUDY/init/model.safetensors" ] && tasks=pretrain,finetune
  scale 0 --cpus 1,2,4,16 --task "$tasks" --window "$WINDOWS" --scaling weak,strong \
    --backend ddp,fsdp,zero1,zero2,zero3 --repeats 3
  $PY -m heartlm report "$STUDY" >>"$LOG" 2>&1 && say "report: $STUDY/report.md"
  for lever in "$STUDY"/levers/*/; do
    [ -e "$lever/results.csv" ] && $PY -m heartlm report "$lever" >>"$LOG" 2>&1
  done
}

# The study folder is the grid's: it is made (nothing launched) before anything is put in it.
[ -e "$STUDY/grid.json" ] || scale 0 "${CORE[@]}" --repeats 1
mkdir -p "$STUDY/comm" "$STUDY/peer"
# What comes back: the study without what can be rebuilt or is heavy (the device tool
# returns at most 8 files of 16 MiB); one profiler trace each of the largest GPU count's weak ddp
# and fsdp cells beside it.
pack() {
  tar -czf "$DEST/study.tar.gz.tmp" -C "$(dirname "$STUDY")" --exclude='*.pt.trace.json' \
    --exclude='*/run/tb' --exclude='*/checkpoints' --exclude='*.safetensors' \
    --exclude='.inductor-cache' --exclude='*/data' "$(basename "$STUDY")" \
    && mv "$DEST/study.tar.gz.tmp" "$DEST/study.tar.gz"
  for f in results.csv report.md; do [ -e "$STUDY/$f" ] && cp "$STUDY/$f" "$DEST/"; done
}

PHASES=("$@"); [ ${#PHASES[@]} -eq 0 ] && PHASES=(env core peer socket report)
[ "${PHASES[0]}" = all ] && PHASES=(env core peer socket repeats backends finetune levers cpus report)
say "phases: ${PHASES[*]}; $NGPU GPUs (--gpus $GPUS); budget ${BUDGET_S}s"
for p in "${PHASES[@]}"; do
  if [ "$(left)" -le 30 ]; then say "out of time before $p"; break; fi
  say "phase $p"
  "phase_$p"
  pack
done
for backend in ddp fsdp; do
  find "$STUDY" -path "*-g${GPUS##*,}-*weak-$backend-*r0/run/profile/*.pt.trace.json" 2>/dev/null | head -1
done | tar -czf "$DEST/traces.tar.gz" -T - 2>/dev/null
say "packed $(du -h "$DEST/study.tar.gz" | cut -f1) into $DEST/study.tar.gz; $(left)s of the budget left"
