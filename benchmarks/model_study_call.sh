#!/usr/bin/env bash
# One device call of the model study (benchmarks/model_study.py) on a fresh GPU machine:
# install the carried wheels, run the stages, bring back their tables, a log and each
# fine-tuning run's finetune.json (finetune_runs.tar.gz).
#
#   bash benchmarks/model_study_call.sh prepare pretrain select final
#
# Environment: ECG (.carry/ecg, a copy of ../shared/ecg carried with the call), WORK
# (/tmp/hlm-model), OUT ($OUT, else benchmarks/model-study-out), JOBS (8 commands at once, spread
# over the GPUs: on a machine of two, JOBS=32 puts sixteen on each; a `final` of two recipes
# trains 18 runs: JOBS=18 trains them in one wave on one H200, round 57; on a cold machine
# `final` first pretrains all six encoders, about 80 s more, and round 59's did not fit 585 s),
# LIMIT_S (560: seconds before the stages are stopped), SELECT (a select.json an earlier call
# brought back, e.g. benchmarks/results/h100/model_study/select_round13.json: `final` on a
# fresh machine then scores that selection without running `select` again, with the flags it
# recorded even where CONFIGS has moved on to a later round), SELECT_AFIB (the
# same for `select_afib.json`: `final_afib` and `crossfit_afib`), RESUME (the
# finetune_runs.tar.gz of an earlier call of the same commit that its time limit cut off: the
# runs it scored are not trained again, model_runner.Runner.evaluate). A call cut off by its
# limit is continued best by the same command at once, while the machine is warm (about 30 s):
# WORK still holds its trained runs (round 76's `select` finished in 45 s so).
# A `final` that the session's device time cannot hold whole scores one label share at a time:
#   bash benchmarks/model_study_call.sh prepare pretrain final --fractions 0.01
# and `select --select-fraction 0.01` asks the DS1 folds at that share (a stopped call's fold
# table: benchmarks/fold_answers.py). `final --replicate --fractions 0.1 --keep-synthetic-labels
# --final RECIPE` trains one recipe from both starts at 10 % of DS1's labels alone, the
# synthetic patients keeping theirs (benchmarks/README.md, "The share of DS1's labels").
set -uo pipefail
cd "$(dirname "$0")/.."
ECG=${ECG:-.carry/ecg}
WORK=${WORK:-/tmp/hlm-model}
DEST=${OUT:-benchmarks/model-study-out}
mkdir -p "$DEST"
if [ ! -e /tmp/hlm-wheels.done ]; then
  python3 -m pip install -q --no-deps --no-index --break-system-packages \
    --root-user-action=ignore .carry/wheels/*.whl && touch /tmp/hlm-wheels.done
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
carry_selection() {  # VARIABLE FILE: an earlier call's selection, unless the machine has one
  local from=$1 to=$WORK/$2
  [ -n "$from" ] || return 0
  if [ -e "$to" ]; then
    echo "$to exists (a warm machine's own selection); $from not used" >&2
  else
    mkdir -p "$WORK" && cp "$from" "$to" || { echo "cannot copy $from" >&2; exit 2; }
    echo "scoring the selection in $from" >&2
  fi
}
carry_selection "${SELECT:-}" select.json
carry_selection "${SELECT_AFIB:-}" select_afib.json
if [ -n "${RESUME:-}" ]; then
  # Only the evaluation answers: a run folder without its weights would pass for a finished run.
  mkdir -p "$WORK" && tar xzf "$RESUME" -C "$WORK" .evaluations ||
    { echo "$RESUME: no kept answers (.evaluations) to continue from" >&2; exit 2; }
  echo "continuing from $RESUME: the kept answers of $(ls "$WORK/.evaluations" | wc -l) runs and floors" >&2
fi
bring_back() {
  for stage in "${STAGES[@]}"; do
    cp "$WORK/$stage.json" "$WORK/$stage.md" "$DEST/" 2>/dev/null && cat "$WORK/$stage.md"
  done
  # Every fine-tuning run's finetune.json (its training and validation records, the step it
  # exported), so that a score can be traced to its split without the run folders, and every
  # evaluation's answer, so that RESUME continues a call that was cut off.
  (cd "$WORK" && { ls -d -- */finetune.json; ls -d .evaluations; } 2>/dev/null |
    tar czf "$DEST/finetune_runs.tar.gz" -T -)
  tail -5 "$DEST/model_study.log"
}
STAGES=()
for stage in "$@"; do
  [[ $stage == -* ]] && break  # the stages end where the options (--configs NAME...) begin
  STAGES+=("$stage")
done
# Stopped before the call's limit, so the stages that finished still come back; if the call
# is stopped first (device time ran short of LIMIT_S), the stages are stopped and what they
# finished comes back all the same.
timeout "${LIMIT_S:-560}" python3 benchmarks/model_study.py "$@" --ecg "$ECG" --work "$WORK" \
  --jobs "${JOBS:-8}" >"$DEST/model_study.log" 2>&1 &
study=$!
trap 'kill -TERM "$study" 2>/dev/null; wait "$study"; bring_back; exit 124' TERM INT
wait "$study"
status=$?
bring_back
exit $status
