"""Which beat inputs would help S beats? A probe on MIT-BIH DS1 only (DS2 is not read).

The LightGBM floor of `tree_floor.py` on the two record-wise DS1 folds of `model_study.py`
(train on one, score the other, confusion matrices summed), with input variants computed
from the token folder and its beat store: the floor as it is; without the heart rate; only
the patient-relative columns (what `--inputs relative` gives the transformer); prematurity
against the mean of the previous beats only; RR context of two more neighbours each side;
and the beat's RR rank within its record. A lead for the next token format, not a result: no
transformer.

    python benchmarks/ds1_feature_probe.py W/tok_mitdb W/store_mitdb --out probe.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from heartlm.inputs import hidden_columns
from heartlm.labelled import metrics
from heartlm.runinfo import versions
from heartlm.store import TABLE_DTYPE
from heartlm.tokens.rhythm import RR_FEATURES
from heartlm.train.data import TokenData, load_tokens

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_configs import FOLDS
from tree_floor import beat_inputs, fit_tree, record_beats, record_indices

PAST = 8


def _per_record(data: TokenData, values: np.ndarray, fn: Callable) -> np.ndarray:
    out = np.full(len(values), np.nan)
    b = data.boundaries
    for lo, hi in itertools.pairwise(b):
        out[lo:hi] = fn(values[lo:hi])
    return out


def past_prematurity(rr: np.ndarray) -> np.ndarray:
    """RR before the beat over the mean RR before the PAST previous beats (causal)."""
    rr = np.where(rr > 0, rr, np.nan)
    csum = np.concatenate([[0.0], np.nancumsum(rr)])
    count = np.concatenate([[0], np.cumsum(np.isfinite(rr))])
    i = np.arange(len(rr))
    lo = np.maximum(i - PAST, 0)
    n = count[i] - count[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return rr / np.where(n > 0, (csum[i] - csum[lo]) / n, np.nan)


def rank_in_record(rr: np.ndarray) -> np.ndarray:
    """Share of the record's beats with a shorter RR before them (0 = the most premature)."""
    finite = np.isfinite(rr) & (rr > 0)
    order = np.sort(rr[finite])
    return np.where(finite, np.searchsorted(order, rr) / max(finite.sum(), 1), np.nan)


def shifted(x: np.ndarray, data: TokenData, shift: int) -> np.ndarray:
    record = np.repeat(np.arange(len(data.records)), np.diff(data.boundaries))
    out = np.roll(x, shift, axis=0)
    out[np.roll(record, shift) != record] = np.nan
    return out


def variants(data: TokenData, table: np.ndarray) -> dict[str, np.ndarray]:
    base = beat_inputs(data)
    names = list(data.meta["features"])
    width = len(names) + 1  # feature columns and the rhythm token, per beat
    if base.shape[1] != 3 * width:
        raise SystemExit(f"{base.shape[1]} input columns, expected 3 x {width}")

    def without(columns: list[int]) -> np.ndarray:
        return np.delete(base, [k * width + c for k in range(3) for c in columns], axis=1)

    relative = hidden_columns(names, "relative")  # what --inputs relative hides
    rr = np.asarray(data.features, np.float32)[:, [names.index(c) for c in RR_FEATURES]]
    wider = np.concatenate([shifted(rr, data, s) for s in (2, 3, -2, -3)], axis=1)
    prev = table["rr_prev"].astype(np.float64)
    past = _per_record(data, prev, past_prematurity)[:, None]
    rank = _per_record(data, prev, rank_in_record)[:, None]
    return {
        "floor (all inputs)": base,
        "no heart rate (as --inputs no-heart-rate)": without(
            hidden_columns(names, "no-heart-rate")
        ),
        "relative only (as --inputs relative)": without(relative),
        "+ prematurity vs past 8 beats": np.concatenate([base, past], axis=1),
        "+ RR context of beats ±2, ±3": np.concatenate([base, wider], axis=1),
        "+ RR rank within the record": np.concatenate([base, rank], axis=1),
        "+ all three": np.concatenate([base, past, wider, rank], axis=1),
    }


def cross_validate(
    data: TokenData, x: np.ndarray, seed: int, threads: int, x_test: np.ndarray | None = None
) -> dict:
    """Train on one DS1 fold, score the other, confusion matrices summed; the scored beats'
    inputs from `x_test` (the same rows, changed) when given."""
    x_test = x if x_test is None else x_test
    aami = np.asarray(data.aami).astype(np.int64)
    cms = []
    for k in (0, 1):
        tr = record_beats(data, record_indices(data, list(FOLDS[k])))
        te = record_beats(data, record_indices(data, list(FOLDS[1 - k])))
        tr, te = tr[aami[tr] >= 0], te[aami[te] >= 0]
        model = fit_tree(x[tr], aami[tr], 5, seed, threads)
        predicted = model.predict(x_test[te]).reshape(len(te), -1).argmax(axis=1)
        cms.append(np.asarray(metrics.beat_report(aami[te], predicted)["confusion"]))
    cm = np.sum(cms, axis=0)
    return {"accuracy": metrics.accuracy(cm), "per_class": metrics.class_scores(cm),
            "confusion": cm.tolist()}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokens", type=Path)
    ap.add_argument("store", type=Path, help="the beat store the token folder was made from")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--only", nargs="+", help="variants whose name contains one of these")
    args = ap.parse_args()
    data = load_tokens(args.tokens)
    table = np.fromfile(args.store / "table.bin", dtype=TABLE_DTYPE)
    if len(table) != len(data.aami):
        raise SystemExit(f"{args.store}: {len(table)} beats, the token folder has {len(data.aami)}")
    rows = {}
    for name, x in variants(data, table).items():
        if args.only and not any(word in name for word in args.only):
            continue
        for seed in args.seeds:
            rep = cross_validate(data, x, seed, args.threads)
            rows[f"{name} / seed {seed}"] = rep
            s, v = rep["per_class"]["S"], rep["per_class"]["V"]
            print(
                f"{name:40s} seed {seed}: acc {rep['accuracy']:.3f} S Se {s['se']:.3f} "
                f"+P {s['ppv']:.3f} F1 {s['f1']:.3f} V F1 {v['f1']:.3f}",
                flush=True,
            )
    args.out.write_text(json.dumps({
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python benchmarks/ds1_feature_probe.py " + " ".join(sys.argv[1:]),
        "folds": FOLDS, "versions": versions(), "rows": rows}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
