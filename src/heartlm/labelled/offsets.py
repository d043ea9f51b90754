"""Class offsets: a beat's class taken after adding a per-class offset to the log of its class
probabilities (a prior shift, the post-hoc form of logit adjustment, Menon et al. 2021), and
the confusion matrices over a grid of offsets from which one is chosen on other records, as
AFIB's decision threshold is."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from heartlm.ecg.labels import AAMI_CLASSES

CLASS_OFFSETS: tuple[float, ...] = (-1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
"""Offsets at which `offset_counts` counts a class's calls, the others held: a factor of about
0.37 to 20 on that class's probability against the others'."""
MAX_OFFSET = 10.0
"""`--class-offset` beyond this (a factor of 22,000) would call every beat one class or none"""
_TINY = 1e-12  # a probability of 0 (from float32 softmax) still has a finite log


def parse_offsets(items: Sequence[str], names: tuple[str, ...] = AAMI_CLASSES) -> np.ndarray:
    """(C,) offsets from `CLASS=X` items (`V=0.5`); classes not named get 0. ValueError naming
    the item for an unknown class, a class named twice, or a value that is not a finite number
    within MAX_OFFSET."""
    offsets = np.zeros(len(names))
    named: set[str] = set()
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in names:
            raise ValueError(f"--class-offset {item!r}: want CLASS=X with CLASS one of "
                             f"{', '.join(names)}")  # fmt: skip
        if name in named:
            raise ValueError(f"--class-offset names {name} twice")
        try:
            x = float(value)
        except ValueError:
            said = f"--class-offset {item!r}: {value.strip()!r} is not a number"
            raise ValueError(said) from None
        if not abs(x) <= MAX_OFFSET:  # also NaN
            raise ValueError(f"--class-offset {item!r}: must be within ±{MAX_OFFSET:g}")
        offsets[names.index(name)] = x
        named.add(name)
    return offsets


def named_offsets(offsets: np.ndarray, names: tuple[str, ...] = AAMI_CLASSES) -> dict[str, float]:
    """The non-zero offsets by class name (what a report records)."""
    return {n: float(x) for n, x in zip(names, offsets, strict=True) if x}


def offset_classes(prob: np.ndarray, offsets: np.ndarray | None = None) -> np.ndarray:
    """Each beat's class from its (beats, C) probabilities: the most probable one, or with
    `offsets` (C,) the largest log probability plus its class's offset."""
    if not len(prob):
        return np.zeros(0, np.int64)
    if offsets is None or not np.any(offsets):
        return prob.argmax(axis=1)
    return (_log(prob) + offsets).argmax(axis=1)


def _log(prob: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(prob, _TINY))


def offset_counts(
    reference: np.ndarray, prob: np.ndarray, offsets: np.ndarray,
    names: tuple[str, ...] = AAMI_CLASSES,
) -> dict[str, object]:  # fmt: skip
    """For each class, the confusion matrix (rows reference, columns predicted) with that
    class's offset at each of CLASS_OFFSETS and the other classes' at `offsets`."""
    from heartlm.labelled.metrics import confusion_matrix

    log_prob = _log(prob)  # once, not once per grid point
    counts = {}
    for c, name in enumerate(names):
        grid = []
        for x in CLASS_OFFSETS:
            moved = offsets.copy()
            moved[c] = x
            called = (log_prob + moved).argmax(axis=1)
            grid.append(confusion_matrix(reference, called, len(names)).tolist())
        counts[name] = grid
    return {"offsets": list(CLASS_OFFSETS), "confusion": counts}
