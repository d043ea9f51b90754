"""The per-beat network's share of a beat's logits (`evaluate --beat-mlp-share`): one share for
every class, or one per class, e.g. the transformer's reading of the rhythm for S and the
network's reading of the beat's shape for V."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from heartlm.ecg.labels import AAMI_CLASSES

TRAINED_SHARE = 0.5
"""The share the model was trained as: its two parts' logits summed."""


def parse_shares(items: Sequence[str], names: tuple[str, ...] = AAMI_CLASSES) -> np.ndarray:
    """(C,) shares from items that are a bare share S (every class not named) or CLASS=S
    (`0.25`, `V=1`, `0.25,V=1`); classes given neither get TRAINED_SHARE. ValueError naming the
    item for an unknown class, a class or a bare share given twice, or a share that is not a
    number within [0, 1]."""
    shares = np.full(len(names), np.nan)
    base: float | None = None
    for item in items:
        name, sep, value = item.rpartition("=")
        name = name.strip()
        if sep and name not in names:
            raise ValueError(f"--beat-mlp-share {item!r}: want S or CLASS=S with CLASS one of "
                             f"{', '.join(names)}")  # fmt: skip
        try:
            share = float(value)
        except ValueError:
            said = f"--beat-mlp-share {item!r}: {value.strip()!r} is not a number"
            raise ValueError(said) from None
        if not 0.0 <= share <= 1.0:  # also NaN
            where = f" for {name}" if sep else ""
            raise ValueError(f"--beat-mlp-share must be within 0 and 1, not {value.strip()}{where}")
        if not sep:
            if base is not None:
                raise ValueError(f"--beat-mlp-share gives every class's share twice ({base:g} "
                                 f"and {share:g})")  # fmt: skip
            base = share
        elif not np.isnan(shares[names.index(name)]):
            raise ValueError(f"--beat-mlp-share names {name} twice")
        else:
            shares[names.index(name)] = share
    given = np.where(np.isnan(shares), TRAINED_SHARE if base is None else base, shares)
    return given + 0.0  # -0 as 0


def named_shares(
    shares: np.ndarray, names: tuple[str, ...] = AAMI_CLASSES
) -> float | dict[str, float]:
    """What a report records: the one share of every class, or each class's by name."""
    if np.all(shares == shares[0]):
        return float(shares[0])
    return {n: float(s) for n, s in zip(names, shares, strict=True)}


def format_shares(recorded: float | dict[str, float]) -> str:
    """A report's shares as one phrase: `0.25`, or `N=0.25 S=0.25 V=1 F=0.25 Q=0.25`."""
    if isinstance(recorded, dict):
        return " ".join(f"{name}={share:g}" for name, share in recorded.items())
    return f"{recorded:g}"
