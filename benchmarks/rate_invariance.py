"""Does a beat's class follow the patient's heart rate? A check on MIT-BIH DS1 only.

The LightGBM floor of `tree_floor.py` is trained on one record-wise DS1 fold of
`model_study.py` and scores the other (confusion matrices summed) with the absolute heart
rate (`heartlm.inputs.RATE_FEATURES`, for the beat and its neighbours) moved as if every RR
interval were FACTOR times longer. Every other input is a ratio to the record's own rhythm
and does not move. A premature beat stays premature in a slower patient: a model whose S
calls change with FACTOR has learnt the heart rate of DS1's S patients, not prematurity.

    python benchmarks/rate_invariance.py W/tok_mitdb --out rate_invariance.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from heartlm.inputs import INPUTS, RATE_FEATURES, hidden_columns
from heartlm.runinfo import versions
from heartlm.tokens.features import FeatureSpace
from heartlm.train.data import TokenData, load_tokens

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ds1_feature_probe import cross_validate
from model_configs import FOLDS
from tree_floor import beat_inputs


def rate_columns(data: TokenData) -> list[int]:
    """Columns of `beat_inputs(data, "all")` that hold the heart rate (beat, previous, next)."""
    names = list(data.meta["features"])
    width = len(names) + 1
    return [k * width + names.index(n) for k in range(3) for n in RATE_FEATURES]


def score(data: TokenData, folder: Path, inputs: str, factor: float, seed: int, threads: int):
    names = list(data.meta["features"])
    space = FeatureSpace.from_tensors(load_file(folder / "codebook.safetensors"))
    x = beat_inputs(data, "all")
    width = len(names) + 1
    hidden = [k * width + c for k in range(3) for c in hidden_columns(names, inputs)]
    keep = np.setdiff1d(np.arange(x.shape[1]), hidden)
    moved = x.copy()  # standardised log seconds: + log(factor) / std
    shift = np.log(factor) / space.std[[names.index(n) for n in RATE_FEATURES]]
    moved[:, rate_columns(data)] += np.tile(shift, 3)
    return cross_validate(data, x[:, keep], seed, threads, x_test=moved[:, keep])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokens", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--factors", type=float, nargs="+", default=[1.0, 0.7, 1.5])
    ap.add_argument("--inputs", nargs="+", choices=INPUTS, default=list(INPUTS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    data = load_tokens(args.tokens)
    rows = []
    for inputs in args.inputs:
        for factor in args.factors:
            rep = score(data, args.tokens, inputs, factor, args.seed, args.threads)
            rows.append({"inputs": inputs, "rr_factor": factor, **rep})
            s, v = rep["per_class"]["S"], rep["per_class"]["V"]
            print(f"--inputs {inputs:14s} RR x{factor:<4g} acc {rep['accuracy']:.3f} "
                  f"S Se {s['se']:.3f} +P {s['ppv']:.3f} F1 {s['f1']:.3f} V F1 {v['f1']:.3f}",
                  flush=True)  # fmt: skip
    stage = args.out.with_suffix(".tmp")
    result = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python benchmarks/rate_invariance.py " + " ".join(sys.argv[1:]),
        "folds": FOLDS,
        "seed": args.seed,
        "versions": versions(),
        "rows": rows,
    }
    stage.write_text(json.dumps(result, indent=1) + "\n")
    stage.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
