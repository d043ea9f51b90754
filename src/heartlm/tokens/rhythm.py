"""Rhythm tokens: RR before and after each beat, relative to the local mean RR, binned."""

from __future__ import annotations

import numpy as np

from heartlm.shards import NUM_SPECIAL, UNK

# Bin edges of RR / local mean RR, the same on both sides (8 bins). Premature beats
# land below 0.9 (usually below 0.8), compensatory pauses above 1.1; sinus rhythm
# stays within 0.97 .. 1.03 of its local mean; atrial fibrillation spreads over all bins.
RR_EDGES: tuple[float, ...] = (0.65, 0.8, 0.9, 0.97, 1.03, 1.1, 1.25)
N_BINS = len(RR_EDGES) + 1
RHYTHM_VOCAB = NUM_SPECIAL + N_BINS * N_BINS


def local_mean(values: np.ndarray, boundaries: np.ndarray, window: int) -> np.ndarray:
    """Centred moving mean of `values` over `window + 1` beats, inside each record,
    skipping NaNs (NaN where the window holds none)."""
    n = len(values)
    half = window // 2
    finite = np.isfinite(values)
    csum = np.concatenate([[0.0], np.cumsum(np.where(finite, values, 0.0), dtype=np.float64)])
    ccount = np.concatenate([[0], np.cumsum(finite, dtype=np.int64)])
    rec_of = np.repeat(np.arange(len(boundaries) - 1), np.diff(boundaries))
    idx = np.arange(n)
    lo = np.maximum(idx - half, boundaries[rec_of])
    hi = np.minimum(idx + half + 1, boundaries[rec_of + 1])
    count = ccount[hi] - ccount[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, (csum[hi] - csum[lo]) / count, np.nan)


def rhythm_tokens(
    rr_prev: np.ndarray, rr_next: np.ndarray, boundaries: np.ndarray, window: int = 16
) -> np.ndarray:
    """uint16 tokens NUM_SPECIAL + 8·bin(RR before) + bin(RR after); UNK where an RR is
    missing (a record's first and last beat) or not positive."""
    rr_prev = np.asarray(rr_prev, dtype=np.float64)
    rr_next = np.asarray(rr_next, dtype=np.float64)
    mean = local_mean(np.where(rr_prev > 0, rr_prev, np.nan), boundaries, window)
    with np.errstate(invalid="ignore", divide="ignore"):
        before, after = rr_prev / mean, rr_next / mean
    ok = np.isfinite(before) & np.isfinite(after) & (rr_prev > 0) & (rr_next > 0)
    edges = np.asarray(RR_EDGES)
    bin_before = np.searchsorted(edges, np.where(ok, before, 1.0), side="right")
    bin_after = np.searchsorted(edges, np.where(ok, after, 1.0), side="right")
    tokens = NUM_SPECIAL + bin_before * N_BINS + bin_after
    return np.where(ok, tokens, UNK).astype(np.uint16)


def bin_names() -> list[str]:
    """Human-readable ranges of the bins, for tokens.json and the docs."""
    bounds = ["0", *(f"{e:g}" for e in RR_EDGES), "inf"]
    return [f"[{bounds[i]}, {bounds[i + 1]})" for i in range(N_BINS)]


RR_FEATURES: tuple[str, ...] = (
    "rr_prev_local",  # RR before / centred local mean RR (LOCAL_WINDOW beats)
    "rr_next_local",
    "rr_prev_record",  # RR before / record-level mean RR (RECORD_WINDOW beats)
    "rr_next_record",
    "log_rr_prev",  # log seconds: the heart rate itself
    "rr_irregularity",  # mean |successive RR difference| / local mean, IRREGULARITY_WINDOW beats
    "rr_next_over_prev",  # compensatory pause after a premature beat
    "rr_unpatterned",  # rr_irregularity at the best lag of PATTERN_LAGS: low in bigeminy, not AF
)
LOCAL_WINDOW = 16
RECORD_WINDOW = 256
IRREGULARITY_WINDOW = 32
PATTERN_LAGS: tuple[int, ...] = (2, 3)
"""Lags at which a regular ectopic rhythm repeats its RR: ventricular or atrial bigeminy
alternates short and long intervals (lag 2), trigeminy repeats every third (lag 3). Their
successive differences are as large as atrial fibrillation's, but compared with the interval
two or three beats back they vanish; in AF no lag helps, so `rr_unpatterned` stays near
`rr_irregularity` there."""


def rr_features(rr_prev: np.ndarray, rr_next: np.ndarray) -> np.ndarray:
    """(n, len(RR_FEATURES)) float32 of one record's beats; NaN where an RR is missing.

    References are means, never medians: a median assumes the majority rhythm is sinus, so in
    a record where premature beats are the majority it calls them normal."""
    prev = np.where(rr_prev > 0, rr_prev, np.nan).astype(np.float64)
    after = np.where(rr_next > 0, rr_next, np.nan).astype(np.float64)
    one = np.array([0, len(prev)])
    local = local_mean(prev, one, LOCAL_WINDOW)
    record = local_mean(prev, one, RECORD_WINDOW)
    with np.errstate(invalid="ignore", divide="ignore"):
        irregular = _irregularity(prev, 1, one) / local
        unpatterned = np.fmin.reduce([_irregularity(prev, lag, one) for lag in PATTERN_LAGS])
        columns = [
            prev / local,
            after / local,
            prev / record,
            after / record,
            np.log(prev),
            irregular,
            after / prev,
            unpatterned / local,
        ]
    return np.stack(columns, axis=1).astype(np.float32)


def _irregularity(prev: np.ndarray, lag: int, one: np.ndarray) -> np.ndarray:
    """Centred mean of |RR_i - RR_(i-lag)| over IRREGULARITY_WINDOW + 1 beats."""
    jumps = np.full(len(prev), np.nan)
    jumps[lag:] = np.abs(prev[lag:] - prev[:-lag])
    return local_mean(jumps, one, IRREGULARITY_WINDOW)
