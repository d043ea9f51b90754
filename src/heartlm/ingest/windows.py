"""Fixed-length beat windows around R peaks, and RR intervals, gathered without Python loops."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def rr_intervals(sample: np.ndarray, fs: float) -> tuple[np.ndarray, np.ndarray]:
    """(rr_prev, rr_next) in seconds for each beat; NaN where there is no neighbour."""
    rr = np.diff(sample).astype(np.float64) / fs
    rr_prev = np.concatenate(([np.nan], rr)).astype(np.float32)
    rr_next = np.concatenate((rr, [np.nan])).astype(np.float32)
    return rr_prev, rr_next


def snap_to_peaks(y: np.ndarray, position: np.ndarray, radius: int) -> np.ndarray:
    """Move each position to the largest |y| within `radius` samples, so a window's centre
    is the R (or QS) peak itself rather than an annotation fiducial a few samples off it."""
    if radius <= 0 or len(position) == 0:
        return position
    offsets = np.arange(-radius, radius + 1)
    idx = np.clip(position[:, None] + offsets, 0, len(y) - 1)
    return idx[np.arange(len(idx)), np.argmax(np.abs(y[idx]), axis=1)]


def window_fits(position: np.ndarray, n_samples: int, pre: int, post: int) -> np.ndarray:
    """Mask of the beats whose window [p - pre, p + post) lies inside the record."""
    return (position >= pre) & (position + post <= n_samples)


def cut_windows(y: np.ndarray, position: np.ndarray, pre: int, post: int) -> np.ndarray:
    """(n, pre + post) float32 windows; the R peak of beat i is at column `pre` of row i.

    Every position must fit (see `window_fits`).
    """
    view = sliding_window_view(y, pre + post)  # no copy: row j is y[j : j + pre + post]
    return np.ascontiguousarray(view[position - pre], dtype=np.float32)


def clear_of_gaps(
    position: np.ndarray, gaps: list[tuple[int, int]], pre: int, post: int
) -> np.ndarray:
    """Mask of the beats whose window [p - pre, p + post) overlaps none of the `gaps`."""
    return ~_overlaps(position - pre, position + post, gaps)


def break_at_gaps(
    position: np.ndarray, gaps: list[tuple[int, int]], rr_prev: np.ndarray, rr_next: np.ndarray
) -> None:
    """Make the RR intervals that overlap a gap NaN, in place: no one knows what beat
    the gap held."""
    if len(position) < 2:
        return
    broken = _overlaps(position[:-1], position[1:], gaps)
    rr_next[:-1][broken] = np.nan
    rr_prev[1:][broken] = np.nan


def _overlaps(lo: np.ndarray, hi: np.ndarray, gaps: list[tuple[int, int]]) -> np.ndarray:
    """For each range [lo, hi), whether it overlaps one of the sorted, disjoint gaps."""
    if not gaps:
        return np.zeros(len(lo), dtype=bool)
    starts, stops = np.asarray(gaps, dtype=np.int64).T
    # The last gap that starts before a range ends is the only one it can overlap.
    last = np.searchsorted(starts, hi, side="left") - 1
    return (last >= 0) & (stops[np.maximum(last, 0)] > lo)
