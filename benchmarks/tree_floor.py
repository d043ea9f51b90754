"""The floor under every model result: a gradient-boosted tree on the model's own inputs.

Beats: each beat's standardised feature row (`features.bin`) and its rhythm token, with the
same for one neighbour on each side. AFIB: the per-column mean and standard deviation of
the feature rows of exactly the windows the transformer is scored on, and, when the
transformer sees a longer context around each window, the same over that context. LightGBM, untuned
(300 rounds, learning rate 0.05, 31 leaves), class weights (n / (K n_c))^0.5 as the
fine-tuning default. A transformer below this floor is a defect, not a result.

    python benchmarks/tree_floor.py TOKENS --task beats --train 101 106 ... --test 100 103 ...
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from heartlm.ecg.labels import AAMI_CLASSES
from heartlm.inputs import INPUTS, hidden_columns
from heartlm.labelled import metrics
from heartlm.labelled.windows import (
    IGNORE,
    class_weights,
    cut_context_windows,
    cut_windows,
    keep_label_fraction,
    keep_recording_label_fraction,
    streams_of,
)
from heartlm.train.data import TokenData, load_tokens, recordings

PARAMS = {
    "learning_rate": 0.05,
    "num_leaves": 31,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "feature_fraction": 0.8,
    "verbose": -1,
}
ROUNDS = 300
MIN_ROWS_PER_LEAF = 20
"""LightGBM's own default for `min_data_in_leaf`, used wherever the training rows allow it."""


def min_rows_per_leaf(n_rows: int) -> int:
    """`min_data_in_leaf` for `n_rows` training rows: LightGBM's default, but never more than
    a fifth of the rows. With 1 % of the labels of the AFIB set without the general synthetic
    corpus (round 24) the tree had 28 rows, could not split once at 20 per leaf and scored
    every window alike (F1 0, AUROC 0.5): a constant, not a floor. A fifth leaves every
    floor of earlier rounds (100 rows or more) as it was."""
    return max(1, min(MIN_ROWS_PER_LEAF, n_rows // 5))


def record_keys(data: TokenData) -> list[str]:
    """DB/NAME of every record (names alone repeat across databases: LUDB has a 101)."""
    meta = data.meta.get("records", [])
    return [f"{m.get('db', '')}/{name}" for m, name in zip(meta, data.records, strict=True)]


def record_indices(data: TokenData, names: list[str]) -> list[int]:
    """Records named NAME or DB/NAME, as `heartlm finetune --records` takes them."""
    wanted = set(names)
    keys = record_keys(data)
    found = [i for i, r in enumerate(data.records) if r in wanted or keys[i] in wanted]
    missing = wanted - {data.records[i] for i in found} - {keys[i] for i in found}
    if missing:
        raise SystemExit(f"records not in the token folder: {sorted(missing)}")
    return found


def record_beats(data: TokenData, records: list[int]) -> np.ndarray:
    return np.concatenate(
        [np.arange(data.boundaries[r], data.boundaries[r + 1]) for r in records]
    ).astype(np.int64)


def _features(data: TokenData, inputs: str) -> np.ndarray:
    """The feature rows without the columns `--inputs` hides from the transformer."""
    names = list(data.meta.get("features", []))
    return np.delete(np.asarray(data.features, np.float32), hidden_columns(names, inputs), axis=1)


def beat_inputs(data: TokenData, inputs: str = "all") -> np.ndarray:
    """(n_beats, 3 * (F + 1)) rows: beat, previous and next beat (NaN across records), the
    feature columns that `--inputs` hides left out."""
    rows = np.concatenate(
        [_features(data, inputs), np.asarray(data.rhythm, np.float32)[:, None]], axis=1
    )
    record = np.repeat(np.arange(len(data.records)), np.diff(data.boundaries))
    columns = [rows]
    for shift in (1, -1):
        neighbour = np.roll(rows, shift, axis=0)
        neighbour[np.roll(record, shift) != record] = np.nan
        columns.append(neighbour)
    return np.concatenate(columns, axis=1)


def _mean_std(feats: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per-column mean and standard deviation over the masked beats of each window."""
    count = mask.sum(axis=1, keepdims=True).clip(min=1)
    mean = (feats * mask[..., None]).sum(axis=1) / count
    var = (((feats - mean[:, None]) ** 2) * mask[..., None]).sum(axis=1) / count
    return np.concatenate([mean, np.sqrt(var)], axis=1)


def window_inputs(
    data: TokenData, records: list[int], window: int, inputs: str = "all", context: int = 0
) -> tuple[np.ndarray, ...]:
    """(inputs, labels, record indices) of the non-overlapping windows `heartlm evaluate`
    scores for AFIB; with `context` > `window`, the same statistics over the context window
    around each (as `evaluate --afib-window` shows the transformer) are added."""
    streams = streams_of(data)
    if context > window:
        w = cut_context_windows(streams, records, context, window)
    else:
        w = cut_windows(streams, records, window, window, "afib")
        w.scored = ~w.pad
    names = list(data.meta.get("features", []))
    feats = np.delete(w.features.astype(np.float32), hidden_columns(names, inputs), axis=2)
    columns = [_mean_std(feats, w.scored)]
    if context > window:
        columns.append(_mean_std(feats, ~w.pad))
    keep = w.window_label != IGNORE
    return np.concatenate(columns, axis=1)[keep], w.window_label[keep], w.record[keep]


def _record_names(data: TokenData) -> list[str]:
    """Record names as `heartlm evaluate` shows them: DB/NAME where two databases share one."""
    return record_keys(data) if len(set(data.records)) < len(data.records) else list(data.records)


def _weights(labels: np.ndarray, n_classes: int) -> np.ndarray:
    """Each row's class weight, (n / (K n_c))^0.5 unclipped, as fine-tuning's default power."""
    return class_weights(labels, n_classes, max_weight=np.inf, power=0.5)[labels]


def fit_tree(x: np.ndarray, y: np.ndarray, n_classes: int, seed: int, threads: int) -> Any:
    import lightgbm as lgb

    params = {**PARAMS, "seed": seed, "num_threads": threads,
              "min_data_in_leaf": min_rows_per_leaf(len(y))}  # fmt: skip
    params.update(
        {"objective": "multiclass", "num_class": n_classes}
        if n_classes > 2
        else {"objective": "binary"}
    )
    return lgb.train(params, lgb.Dataset(x, y, weight=_weights(y, n_classes)), ROUNDS)


def labelled_beats(
    data: TokenData,
    records: list[int],
    aami: np.ndarray,
    fraction: float = 1.0,
    seed: int = 0,
    whole: Sequence[str] = (),
) -> np.ndarray:
    """The beats of `records` whose labels a seeded `fraction` keeps, drawn per recording as
    `heartlm finetune --label-fraction` draws them (a lead copy follows its record), and
    from the records outside the databases `whole` only, whose labels are all kept
    (`--keep-labels-of`)."""
    beats = record_beats(data, records)
    if fraction == 1.0:
        return beats[aami[beats] >= 0]
    lengths = np.diff(data.boundaries)[records]
    recording = recordings(data)
    dbs = [str(m.get("db", "")) for m in data.meta.get("records", [])]
    kept = keep_recording_label_fraction(
        aami[beats], np.concatenate([[0], np.cumsum(lengths)]), [recording[i] for i in records],
        fraction, seed, whole=[bool(dbs) and dbs[i] in whole for i in records],
    )  # fmt: skip
    return beats[kept >= 0]


def beat_floor(
    data: TokenData,
    train: list[str],
    test: list[str],
    seed: int = 0,
    threads: int = 0,
    fraction: float = 1.0,
    inputs: str = "all",
    whole: Sequence[str] = (),
) -> dict[str, Any]:
    """The tree's per-class beat report on every labelled beat of `test`, trained on `train`
    (record names) with a seeded `fraction` of the training beats' labels (those of the
    databases `whole` all kept), on the inputs that fine-tuning with `--inputs` gives the
    transformer."""
    x = beat_inputs(data, inputs)
    aami = np.asarray(data.aami).astype(np.int64)
    tr = labelled_beats(data, record_indices(data, train), aami, fraction, seed, whole)
    te = labelled_beats(data, record_indices(data, test), aami)
    n_classes = len(AAMI_CLASSES)
    model = fit_tree(x[tr], aami[tr], n_classes, seed, threads)
    predicted = model.predict(x[te]).reshape(len(te), -1).argmax(axis=1)
    return metrics.beat_report(aami[te], predicted)


def afib_floors(
    train_data: TokenData,
    train: list[str],
    tests: list[tuple[TokenData, list[str]]],
    threshold: float = 0.5,
    **kw: Any,
) -> list[dict[str, Any]]:
    """The tree's AFIB window scores on each test set (token data, record names), one tree
    trained as `afib_floor_scores` trains it (`kw`: its window, seed, threads, fraction,
    inputs, context); windows called AFIB from `threshold`, and counted at every threshold of
    `metrics.AFIB_THRESHOLDS` (`threshold_counts`), as `heartlm evaluate` does."""
    scored = afib_floor_scores(train_data, train, tests, **kw)
    return [afib_report(labels, scores, record, test_data, threshold)
            for (labels, scores, record), (test_data, _)
            in zip(scored, tests, strict=True)]  # fmt: skip


def afib_floor_scores(
    train_data: TokenData,
    train: list[str],
    tests: list[tuple[TokenData, list[str]]],
    window: int = 32,
    seed: int = 0,
    threads: int = 0,
    fraction: float = 1.0,
    inputs: str = "all",
    context: int = 0,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(labels, AFIB probabilities, record index) of every labelled window of each test set,
    from one tree trained on `train` (record names) with a seeded `fraction` of the training
    windows' labels; the windows come in the same order for every tree, so that several
    trees' probabilities can be averaged."""
    trained = record_indices(train_data, train)
    x_tr, y_tr, _ = window_inputs(train_data, trained, window, inputs, context)
    if fraction < 1.0:
        keep = keep_label_fraction(y_tr, fraction, seed) >= 0
        x_tr, y_tr = x_tr[keep], y_tr[keep]
    model = fit_tree(x_tr, y_tr, 2, seed, threads)
    out = []
    for test_data, test in tests:
        x_te, y_te, record = window_inputs(
            test_data, record_indices(test_data, test), window, inputs, context
        )
        out.append((y_te, model.predict(x_te), record))
    return out


def afib_report(
    labels: np.ndarray, scores: np.ndarray, record: np.ndarray, data: TokenData, threshold: float
) -> dict[str, Any]:
    """Window scores of AFIB probabilities called from `threshold`, with the counts at every
    threshold and per record, as `heartlm evaluate` reports them."""
    report = metrics.binary_scores(labels, scores, threshold)
    per_record = metrics.per_record_afib(labels, scores >= threshold, record, _record_names(data))
    return {**report, "threshold_counts": metrics.threshold_counts(labels, scores),
            "per_record": per_record}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokens")
    ap.add_argument("--task", choices=["beats", "afib"], default="beats")
    ap.add_argument("--train", nargs="+", required=True)
    ap.add_argument("--test", nargs="+", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--inputs", choices=INPUTS, default="all", help="as heartlm finetune's")
    ap.add_argument(
        "--context",
        type=int,
        default=0,
        help="afib: also the statistics of this many beats around each window",
    )
    args = ap.parse_args()
    data = load_tokens(args.tokens)
    if args.task == "beats":
        report = beat_floor(data, args.train, args.test, args.seed, inputs=args.inputs)
    else:
        (report,) = afib_floors(
            data,
            args.train,
            [(data, args.test)],
            seed=args.seed,
            inputs=args.inputs,
            context=args.context,
        )
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
