"""Se, +P and F1 from counts: the one implementation, and one rule for empty denominators.

A ratio with an empty denominator is 0.0 (scikit-learn's `zero_division=0`): a class with
no reference beats or no predictions scores 0, and its support or counts say why. QRS
detection, beat classes, AFIB windows and fine-tuning's validation F1 all use these.
"""

from __future__ import annotations


def ratio(num: float, den: float) -> float:
    return float(num) / float(den) if den > 0 else 0.0


def sensitivity(tp: int, fn: int) -> float:
    """Se = TP / (TP + FN)."""
    return ratio(tp, tp + fn)


def positive_predictivity(tp: int, fp: int) -> float:
    """+P = TP / (TP + FP)."""
    return ratio(tp, tp + fp)


def f1(tp: int, fp: int, fn: int) -> float:
    """F1 = 2TP / (2TP + FP + FN)."""
    return ratio(2 * tp, 2 * tp + fp + fn)
