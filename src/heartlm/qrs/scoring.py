"""EC57-style beat-by-beat matching of detected beats against reference beats."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from heartlm import scores
from heartlm.ecg.labels import SYMBOL_TO_AAMI

EC57_TOLERANCE_S = 0.15


@dataclass(frozen=True)
class Match:
    """Counts of one record (or, summed, of many): true/false positives, false negatives."""

    tp: int
    fp: int
    fn: int

    @property
    def se(self) -> float:
        """Sensitivity TP / (TP + FN); 0.0 when there is nothing to find (heartlm.scores)."""
        return scores.sensitivity(self.tp, self.fn)

    @property
    def ppv(self) -> float:
        """Positive predictivity (+P) TP / (TP + FP); 0.0 when nothing was detected."""
        return scores.positive_predictivity(self.tp, self.fp)

    @property
    def f1(self) -> float:
        return scores.f1(self.tp, self.fp, self.fn)

    def __add__(self, other: Match) -> Match:
        return Match(self.tp + other.tp, self.fp + other.fp, self.fn + other.fn)

    def as_dict(self) -> dict[str, float | int]:
        return {
            "se": self.se,
            "ppv": self.ppv,
            "f1": self.f1,
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn,
        }


def gross(matches: Iterable[Match]) -> Match:
    """EC57 gross figures: TP, FP and FN summed over records before dividing."""
    return sum(matches, Match(0, 0, 0))


def match_beats(
    ref: np.ndarray, det: np.ndarray, fs: float, tolerance_s: float = EC57_TOLERANCE_S
) -> Match:
    """Match detections to reference beats one-to-one within `tolerance_s` (inclusive).

    Both inputs are sample indices at rate `fs`. Scanning both in time order and pairing
    each reference beat with the earliest unmatched detection within reach gives the largest
    possible number of one-to-one pairs, because every beat's window has the same width.
    """
    ref = np.sort(np.asarray(ref, dtype=np.float64).ravel())
    det = np.sort(np.asarray(det, dtype=np.float64).ravel())
    if fs <= 0:
        raise ValueError(f"fs must be positive, got {fs}")
    tol = tolerance_s * fs * (1 + 1e-9)  # exactly 150 ms counts as a match
    tp = 0
    j = 0
    n_det = len(det)
    det_list = det.tolist()
    for r in ref.tolist():
        while j < n_det and det_list[j] < r - tol:
            j += 1
        if j < n_det and det_list[j] <= r + tol:
            tp += 1
            j += 1
    return Match(tp=tp, fp=n_det - tp, fn=len(ref) - tp)


def reference_beats(sample: np.ndarray, symbols: list[str]) -> np.ndarray:
    """Sample indices of the annotations that are beats (symbol in the AAMI map)."""
    keep = np.fromiter((s in SYMBOL_TO_AAMI for s in symbols), dtype=bool, count=len(symbols))
    return np.asarray(sample, dtype=np.int64)[keep]
