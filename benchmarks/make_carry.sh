#!/usr/bin/env bash
# Build `.carry` (gitignored), what a model-study call carries to the GPU machine
# (benchmarks/model_study_call.sh): `.carry/ecg`, a copy of ../shared/ecg (the machine cannot
# reach ../shared), and `.carry/wheels`, the packages its Python 3.12 lacks. Then say how much
# of the 64 MiB a call may send (tracked and untracked-not-ignored files, plus `.carry`) this
# checkout would send.
#
#   bash benchmarks/make_carry.sh        # then: run(..., carry=[".carry"])
#
# Environment: ECG_SOURCE (../shared/ecg beside the checkout). Keeps what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
ECG_SOURCE=${ECG_SOURCE:-../shared/ecg}
WHEELS=(wfdb soundfile cffi pycparser edfio lightgbm rtdl_num_embeddings)
LIMIT_BYTES=$((64 * 1024 * 1024))

[ -d "$ECG_SOURCE/mitdb" ] || { echo "make_carry: $ECG_SOURCE: no ECG databases there" >&2; exit 2; }
if [ ! -d .carry/ecg ]; then
  mkdir -p .carry
  cp -r "$ECG_SOURCE" .carry/ecg.partial && mv .carry/ecg.partial .carry/ecg
fi
mkdir -p .carry/wheels
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .carry/wheels \
  "${WHEELS[@]}" 2>&1 | grep -v "^WARNING: Location" || true
for name in "${WHEELS[@]}"; do
  compgen -G ".carry/wheels/${name}-*.whl" >/dev/null ||
    { echo "make_carry: no wheel of $name in .carry/wheels" >&2; exit 2; }
done

tree=$(git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [ -f "$f" ] && stat -c %s -- "$f"; done |
  awk '{s += $1} END {print s + 0}')
carry=$(du -sb .carry | cut -f1)
total=$((tree + carry))
echo "a call would send $((total / 1048576)) MiB: the checkout $((tree / 1048576)) MiB," \
  ".carry $((carry / 1048576)) MiB (limit 64 MiB)"
if [ "$total" -gt "$LIMIT_BYTES" ]; then
  echo "over the limit: remove benchmarks/results from the working tree for the calls" \
    "(rm -r benchmarks/results; git checkout -- benchmarks/results brings it back)" >&2
  exit 1
fi
