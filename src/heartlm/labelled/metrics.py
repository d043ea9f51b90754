"""Scores for beat classes (EC57 confusion matrix, Se, +P, F1) and AFIB windows (F1, AUROC).

Se, +P and F1 come from `heartlm.scores`: a ratio with an empty denominator is 0.0, so a
class with no reference beats or no predictions scores 0.0 and its `support` says why.
AUROC needs both classes and is None (JSON null) otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import rankdata

from heartlm.ecg.labels import AAMI_CLASSES
from heartlm.scores import f1, positive_predictivity, ratio, sensitivity


def confusion_matrix(reference: np.ndarray, predicted: np.ndarray, n_classes: int) -> np.ndarray:
    """(n_classes, n_classes) counts: row = reference class, column = predicted class."""
    reference = np.asarray(reference, dtype=np.int64)
    predicted = np.asarray(predicted, dtype=np.int64)
    if reference.shape != predicted.shape:
        raise ValueError(f"shapes differ: {reference.shape} vs {predicted.shape}")
    for name, codes in (("reference", reference), ("predicted", predicted)):
        if codes.size and (codes.min() < 0 or codes.max() >= n_classes):
            raise ValueError(f"{name} codes must lie in [0, {n_classes})")
    flat = np.bincount(reference * n_classes + predicted, minlength=n_classes * n_classes)
    return flat.reshape(n_classes, n_classes)


def class_scores(cm: np.ndarray, names: tuple[str, ...] = AAMI_CLASSES) -> dict[str, dict]:
    """Per-class Se = TP/(TP+FN), +P = TP/(TP+FP), F1 = 2TP/(2TP+FP+FN), and support."""
    cm = np.asarray(cm)
    tp = np.diag(cm)
    fn = cm.sum(axis=1) - tp
    fp = cm.sum(axis=0) - tp
    return {
        name: {
            "se": sensitivity(tp[i], fn[i]),
            "ppv": positive_predictivity(tp[i], fp[i]),
            "f1": f1(tp[i], fp[i], fn[i]),
            "support": int(tp[i] + fn[i]),
        }
        for i, name in enumerate(names)
    }


def accuracy(cm: np.ndarray) -> float:
    cm = np.asarray(cm)
    return ratio(np.trace(cm), cm.sum())


def auroc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    """Area under the ROC curve (Mann-Whitney U, ties count one half); None with one class."""
    labels = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, dtype=np.float64)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = rankdata(scores)
    u = ranks[labels].sum() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))


AFIB_THRESHOLDS: tuple[float, ...] = (
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    *(round(0.05 * i, 2) for i in range(1, 20)),
    0.98,
    0.99,
    0.995,
    0.998,
    0.999,
)
"""Decision thresholds at which `threshold_counts` counts AFIB windows: 0.05 to 0.95, and
0.001 to 0.02 and 0.98 to 0.999 for models whose probabilities crowd an end (in round 14 the
folds chose 0.99, then the grid's top, for the transformers trained on rhythm inputs)."""


def threshold_counts(labels: np.ndarray, scores: np.ndarray) -> list[dict[str, float]]:
    """Window counts (tp, fp, fn, tn) at each of AFIB_THRESHOLDS: the operating curve from
    which an AFIB threshold can be chosen on other data than the data it is scored on."""
    labels, scores = np.asarray(labels).astype(bool), np.asarray(scores)
    return [{"threshold": t, **_counts(labels, scores >= t)} for t in AFIB_THRESHOLDS]


def _counts(labels: np.ndarray, called: np.ndarray) -> dict[str, int]:
    """tp, fp, fn, tn of boolean calls against boolean labels."""
    return {"tp": int((labels & called).sum()), "fp": int((~labels & called).sum()),
            "fn": int((labels & ~called).sum()), "tn": int((~labels & ~called).sum())}  # fmt: skip


def pooled_curve(curves: list[list[dict[str, float]]]) -> list[dict[str, float]]:
    """The `threshold_counts` curves summed (pooled folds), with the F1 at each threshold."""
    pooled = []
    for i, row in enumerate(curves[0]):
        tp, fp, fn = (sum(c[i][k] for c in curves) for k in ("tp", "fp", "fn"))
        pooled.append({"threshold": row["threshold"], "tp": tp, "fp": fp, "fn": fn,
                       "f1": f1(tp, fp, fn)})  # fmt: skip
    return pooled


def best_threshold(curves: list[list[dict[str, float]]]) -> tuple[float, float]:
    """(threshold, F1) of the best F1 over the `threshold_counts` curves summed (pooled
    folds); of equal F1s the threshold nearest 0.5."""
    best = max(pooled_curve(curves), key=lambda p: (p["f1"], -round(abs(p["threshold"] - 0.5), 6)))
    return float(best["threshold"]), float(best["f1"])


PLATEAU = 0.01
"""`plateau_threshold`: thresholds whose pooled F1 is within this of the best are as good."""


def plateau_threshold(
    curves: list[list[dict[str, float]]], within: float = PLATEAU
) -> tuple[float, float]:
    """(threshold, F1) at the middle (lower median) of the thresholds whose pooled F1 is
    within `within` of the best: a threshold that a small shift of the scores does not push
    off the edge of the good range. On the model study's AFIB folds it carried from one fold
    to the other better than the best one (benchmarks/README.md, round 26). The middle is a
    position among the grid's thresholds (AFIB_THRESHOLDS is denser near 0 and 1), and the
    near-best ones need not be contiguous."""
    pooled = pooled_curve(curves)
    top = max(p["f1"] for p in pooled)
    near = [p for p in pooled if p["f1"] >= top - within]
    middle = near[(len(near) - 1) // 2]
    return float(middle["threshold"]), float(middle["f1"])


def binary_scores(labels: np.ndarray, scores: np.ndarray, threshold: float = 0.5) -> dict:
    """F1, Se, +P at `threshold` and AUROC of a positive-class score (AFIB windows)."""
    labels = np.asarray(labels).astype(bool)
    counts = _counts(labels, np.asarray(scores) >= threshold)
    tp, fp, fn = counts["tp"], counts["fp"], counts["fn"]
    return {
        "f1": f1(tp, fp, fn),
        "se": sensitivity(tp, fn),
        "ppv": positive_predictivity(tp, fp),
        "auroc": auroc(labels, scores),
        **counts,
    }


def beat_report(reference: np.ndarray, predicted: np.ndarray) -> dict:
    """The beats task's JSON body: accuracy, per-class scores, confusion matrix, beat count."""
    cm = confusion_matrix(reference, predicted, len(AAMI_CLASSES))
    return {
        "accuracy": accuracy(cm),
        "per_class": class_scores(cm),
        "confusion": cm.tolist(),
        "n_beats": int(cm.sum()),
    }


def macro_f1(reference: np.ndarray, predicted: np.ndarray, classes: np.ndarray) -> float:
    """Mean F1 of `classes` (0 when there are none)."""
    scores = class_scores(confusion_matrix(reference, predicted, len(AAMI_CLASSES)))
    per_class = [scores[AAMI_CLASSES[c]]["f1"] for c in classes]
    return float(np.mean(per_class)) if per_class else 0.0


def per_record_beats(
    reference: np.ndarray,
    predicted: np.ndarray,
    record: np.ndarray,
    names: list[str],
    scored: Sequence[int] | None = None,
) -> list[dict]:
    """One row per record: beats, accuracy, Se / +P of the S, V and F classes (EC57 lists
    S and V per record beside the gross figures; F is here because the floor leads on it),
    and the record's confusion matrix, so that any set of records can be pooled. `scored`:
    every record asked for (default: those with a scored beat); one without a labelled beat
    has a row too, its accuracy None and a note, so that no record leaves the table unsaid."""
    rows = []
    for r in _record_order(record, scored):
        keep = record == r
        cm = confusion_matrix(reference[keep], predicted[keep], len(AAMI_CLASSES))
        scores = class_scores(cm)
        row = {"record": names[int(r)], "n_beats": int(cm.sum()), "accuracy": accuracy(cm)}
        for c in ("S", "V", "F"):
            row[c] = {k: scores[c][k] for k in ("support", "se", "ppv")}
        row["confusion"] = cm.tolist()
        if not keep.any():
            row |= {"accuracy": None, "note": "no labelled beat to score"}
        rows.append(row)
    return rows


def _record_order(record: np.ndarray, scored: Sequence[int] | None) -> list[int]:
    """The records of a per-record table: `scored` in order, else those in `record`."""
    return [int(r) for r in (np.unique(record) if scored is None else scored)]


def episodes(flags: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) runs of True in a 1-D bool array."""
    edges = np.diff(np.concatenate([[0], flags.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True))


def afib_episode_scores(labels: np.ndarray, predicted: np.ndarray, record: np.ndarray) -> dict:
    """Episode-level AFIB (runs of consecutive AFIB windows of one record): an episode is
    found when any of its windows is called AFIB (Se); a called run is true when it overlaps
    a reference episode (+P)."""
    found = n_ref = true_calls = n_calls = 0
    for r in np.unique(record):
        keep = record == r
        ref, pred = labels[keep].astype(bool), predicted[keep].astype(bool)
        ref_runs, pred_runs = episodes(ref), episodes(pred)
        n_ref += len(ref_runs)
        found += sum(bool(pred[a:b].any()) for a, b in ref_runs)
        n_calls += len(pred_runs)
        true_calls += sum(bool(ref[a:b].any()) for a, b in pred_runs)
    return {"episodes": n_ref, "se": ratio(found, n_ref), "calls": n_calls,
            "ppv": ratio(true_calls, n_calls)}  # fmt: skip


def per_record_afib(
    labels: np.ndarray,
    predicted: np.ndarray,
    record: np.ndarray,
    names: list[str],
    scored: Sequence[int] | None = None,
) -> list[dict]:
    """One row per record: windows, AFIB windows, and the window counts tp, fp, fn.
    `scored`: every record asked for (default: those with a scored window); one without a
    labelled window has a row of zeros and a note."""
    rows = []
    for r in _record_order(record, scored):
        keep = record == r
        ref, pred = labels[keep].astype(bool), predicted[keep].astype(bool)
        rows.append({
            "record": names[int(r)], "n_windows": int(keep.sum()), "n_afib": int(ref.sum()),
            "tp": int((ref & pred).sum()), "fp": int((~ref & pred).sum()),
            "fn": int((ref & ~pred).sum()),
        })  # fmt: skip
        if not keep.any():
            rows[-1]["note"] = "no labelled window to score"
    return rows
