"""Patient-relative beat features: each beat against a running template of its record's
dominant beat, and the P wave before it.

The template is causal, so a record can be streamed: beat i is compared with what the
record showed before it. A few templates are tracked at once (online leader clustering on
the QRS); the *dominant* one is the template that has matched the most recent beats, so a
record whose first beats are ectopic still settles on its usual morphology.
"""

from __future__ import annotations

import numba
import numpy as np

TEMPLATE_FEATURES: tuple[str, ...] = (
    "qrs_corr",  # QRS correlation with the dominant template
    "beat_corr",  # whole-window correlation with it
    "log_qrs_ratio",  # log of QRS peak-to-peak over the template's
    "width_shift_ms",  # QRS width proxy minus the template's, ms
    "residual",  # RMS of beat - template, over the template's QRS peak-to-peak
    "p_corr",  # P-wave segment correlation with the template's
    "p_prev_corr",  # P-wave segment correlation with the previous beat's (P consistency)
    "p_ratio",  # P segment spread over the template's QRS peak-to-peak
    "cluster_share",  # share of recent beats in this beat's own morphology cluster
)

SINUS_FEATURES: tuple[str, ...] = (
    "p_sinus_corr",  # P-wave segment correlation with the P template of on-time beats
)

N_TEMPLATES = 6
MATCH_CORR = 0.9
"""A beat joins a template when its QRS correlates at least this much..."""
MATCH_RATIO = (0.7, 1.45)
"""... and its QRS peak-to-peak is within this ratio of the template's."""
MIN_RATE = 0.02
"""Slowest template update (exponential mean); the first beats of a cluster are averaged."""
RR_RATE = 0.1
"""Update rate of the running mean RR that decides which beats are on time (~10 beats)."""
COUNT_DECAY = 1.0 - 1.0 / 500.0
"""Per-beat decay of cluster counts: dominance follows the last several hundred beats."""


def regions(pre_samples: int, fs: float) -> tuple[int, int, int, int]:
    """(QRS start, QRS end, P start, P end) sample indices inside a beat window."""
    q_lo = max(0, pre_samples - round(0.10 * fs))
    q_hi = pre_samples + round(0.12 * fs)
    p_lo = max(0, pre_samples - round(0.25 * fs))
    p_hi = max(p_lo + 3, pre_samples - round(0.07 * fs))
    return q_lo, q_hi, p_lo, p_hi


@numba.njit(cache=True, nogil=True)
def _corr(a: np.ndarray, b: np.ndarray) -> float:
    n = a.size
    ma = a.mean()
    mb = b.mean()
    sab = 0.0
    saa = 0.0
    sbb = 0.0
    for i in range(n):
        da = a[i] - ma
        db = b[i] - mb
        sab += da * db
        saa += da * da
        sbb += db * db
    if saa <= 1e-12 or sbb <= 1e-12:
        return 0.0
    return sab / np.sqrt(saa * sbb)


@numba.njit(cache=True, nogil=True)
def _width(q: np.ndarray, fs: float) -> float:
    """Area over peak of the QRS around its median: wider complexes score higher (ms)."""
    med = np.median(q)
    area = 0.0
    peak = 1e-9
    for v in q:
        d = abs(v - med)
        area += d
        peak = max(peak, d)
    return 1000.0 * area / peak / fs


@numba.njit(cache=True, nogil=True)
def template_features(
    beats: np.ndarray, baseline: np.ndarray, q_lo: int, q_hi: int, p_lo: int, p_hi: int, fs: float
) -> np.ndarray:
    """(n, len(TEMPLATE_FEATURES)) float32 for the beats (n, W) of one record, in order."""
    n, w = beats.shape
    out = np.zeros((n, 9), dtype=np.float32)
    templates = np.zeros((N_TEMPLATES, w))
    counts = np.zeros(N_TEMPLATES)
    seen = np.zeros(N_TEMPLATES, dtype=np.int64)
    prev_p = np.zeros(p_hi - p_lo)
    for i in range(n):
        b = beats[i].astype(np.float64) - baseline[i]
        if not np.isfinite(b).all():  # an unusable beat: no features, no template update
            out[i] = np.nan
            continue
        q = b[q_lo:q_hi]
        p = b[p_lo:p_hi]
        q_ptp = q.max() - q.min()
        best, best_r = -1, -2.0
        for k in range(N_TEMPLATES):
            if seen[k] == 0:
                continue
            t = templates[k, q_lo:q_hi]
            ratio = q_ptp / max(t.max() - t.min(), 1e-6)
            r = _corr(q, t)
            if MATCH_RATIO[0] <= ratio <= MATCH_RATIO[1] and r > best_r:
                best, best_r = k, r
        dom = int(np.argmax(counts)) if counts.max() > 0 else -1
        if dom >= 0:
            t = templates[dom]
            tq = t[q_lo:q_hi]
            t_ptp = max(tq.max() - tq.min(), 1e-6)
            out[i, 0] = _corr(q, tq)
            out[i, 1] = _corr(b, t)
            out[i, 2] = np.log(max(q_ptp, 1e-6) / t_ptp)
            out[i, 3] = _width(q, fs) - _width(tq, fs)
            out[i, 4] = np.sqrt(np.mean((b - t) ** 2)) / t_ptp
            out[i, 5] = _corr(p, t[p_lo:p_hi])
            out[i, 7] = (p.max() - p.min()) / t_ptp
        else:  # the record's first beat is its own template
            out[i, 0] = 1.0
            out[i, 1] = 1.0
            out[i, 5] = 1.0
            out[i, 7] = (p.max() - p.min()) / max(q_ptp, 1e-6)
        out[i, 6] = _corr(p, prev_p) if i > 0 else 1.0
        prev_p[:] = p
        if best >= 0 and best_r >= MATCH_CORR:
            k = best
        else:  # a new morphology takes the slot of the least used template
            k = int(np.argmin(counts))
            templates[k] = 0.0
            counts[k] = 0.0
            seen[k] = 0
        seen[k] += 1
        rate = max(1.0 / seen[k], MIN_RATE)
        templates[k] += rate * (b - templates[k])
        counts *= COUNT_DECAY
        counts[k] += 1.0
        out[i, 8] = counts[k] / counts.sum()
    return out


@numba.njit(cache=True, nogil=True)
def code_share(codes: np.ndarray, n_codes: int, half: int) -> np.ndarray:
    """Share of the beats within +-half beats (same record) that carry this beat's code."""
    n = codes.size
    counts = np.zeros(n_codes, dtype=np.int64)
    out = np.zeros(n, dtype=np.float32)
    lo, hi = 0, 0  # counts hold codes[lo:hi]
    for i in range(n):
        want_lo = max(0, i - half)
        want_hi = min(n, i + half + 1)
        while hi < want_hi:
            counts[codes[hi]] += 1
            hi += 1
        while lo < want_lo:
            counts[codes[lo]] -= 1
            lo += 1
        out[i] = counts[codes[i]] / (hi - lo)
    return out


@numba.njit(cache=True, nogil=True)
def sinus_p_corr(
    beats: np.ndarray, baseline: np.ndarray, rr_prev: np.ndarray, p_lo: int, p_hi: int
) -> np.ndarray:
    """(n,) float32: each beat's P segment against a running P template of the record's
    *on-time* beats (RR before them at least the running mean RR), NaN until one is seen.

    The dominant template is the most common beat; where atrial ectopic beats outnumber the
    sinus beats (a slow sinus node with pauses), it is the ectopic one and every premature
    P wave matches it. A premature beat is never on time, so this template keeps the sinus
    P wave whatever the majority is. Causal, as the dominant template."""
    n = beats.shape[0]
    out = np.full(n, np.nan, dtype=np.float32)
    template = np.zeros(p_hi - p_lo)
    seen = 0
    mean_rr = np.nan
    for i in range(n):
        b = beats[i].astype(np.float64) - baseline[i]
        if not np.isfinite(b).all():
            continue
        p = b[p_lo:p_hi]
        if seen > 0:
            out[i] = _corr(p, template)
        r = rr_prev[i]
        if not (np.isfinite(r) and r > 0):
            continue
        on_time = not np.isfinite(mean_rr) or r >= mean_rr
        mean_rr = r if not np.isfinite(mean_rr) else mean_rr + RR_RATE * (r - mean_rr)
        if on_time:
            seen += 1
            template += max(1.0 / seen, MIN_RATE) * (p - template)
    return out
