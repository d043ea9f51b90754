"""QRS detection at any sampling rate: slope envelope, adaptive thresholds, R-peak refinement.

A Pan–Tompkins-family detector (Pan & Tompkins, IEEE TBME 32(3), 1985). Every time constant
is in seconds and every filter is designed at the record's own rate, so nothing depends on
the rate of the database it was checked on. The only sequential step (accepting or rejecting
a few thousand candidate peaks per half hour) is compiled with numba; the rest is
vectorized numpy/scipy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numba
import numpy as np
from scipy import ndimage
from scipy import signal as sps


@dataclass(frozen=True)
class DetectorConfig:
    """Physiological constants of the detector, in seconds, hertz or ratios."""

    band_hz: tuple[float, float] = (5.0, 20.0)
    """QRS energy band: above P and T waves and baseline wander, below muscle noise."""
    wide_band_hz: tuple[float, float] = (1.0, 30.0)
    """Band that keeps the QRS shape without baseline wander: slopes for the T-wave test."""
    envelope_fs: float = 150.0
    """Lowest working rate: records at twice this or more are decimated for detection; the R
    peak is then located at the record's own rate."""
    integration_s: float = 0.15
    """Width of the envelope's moving window: about the width of a wide QRS complex."""
    refractory_s: float = 0.25
    """No two beats closer than this (240/min); also keeps a tall P wave and its QRS apart."""
    threshold: float = 0.4
    """A peak is a beat above noise level + this fraction of (signal level - noise level)."""
    t_wave_s: float = 0.36
    """Within this time of a beat, a peak much less steep than the beat is its T wave..."""
    t_wave_ratio: float = 0.5
    """...'much less steep' meaning a steepest slope below this fraction of the beat's."""
    searchback_rr: float = 1.66
    """After this many mean RR intervals without a beat, take the best peak at half threshold."""
    flutter_trough: float = 0.25
    """Flutter test: the envelope between two beats stays above this fraction of the peak
    (no isoelectric segment)..."""
    flutter_beats: int = 9
    """...for the median of this many consecutive beats..."""
    flutter_rr_s: float = 0.35
    """...whose median RR is below this (over 170/min; flutter runs at 250-350/min). Such
    runs are flutter or fibrillation waves, not QRS complexes, and are not reported."""
    refine_s: float = 0.08
    """Half-width of the window around the envelope peak searched for the R peak."""
    learn_s: float = 8.0
    """The decisions run once over this first stretch of the record (all of a shorter one),
    then again from the first sample with the signal level, noise level and RR intervals
    they settled on: no beat is judged by thresholds that are still learning."""


DEFAULT = DetectorConfig()


def detect_qrs(signal: np.ndarray, fs: float, config: DetectorConfig = DEFAULT) -> np.ndarray:
    """Sorted int64 sample indices of the R peaks of an ECG in mV sampled at `fs` Hz.

    `signal` is 1-D, or 2-D (n_samples, n_leads) of which the first lead is used. Isolated
    non-finite samples are interpolated; an all-NaN signal raises ValueError.
    """
    x = _one_lead(signal)
    if fs < 50:
        raise ValueError(f"sampling rate {fs} Hz is too low for QRS detection (need >= 50 Hz)")
    if len(x) < int(0.5 * fs):
        return np.zeros(0, dtype=np.int64)
    # QRS energy lies below 40 Hz: everything but the final R-peak search runs at a rate of
    # at least `envelope_fs`, on block means of the signal (a cheap anti-aliasing filter).
    step = max(1, int(fs // config.envelope_fs))
    fe = fs / step
    wide = _filtfilt(config.wide_band_hz, fe, _block_means(x, step))
    envelope = _envelope(wide, fe, config)
    refractory = max(1, round(config.refractory_s * fe))
    # A record may start or end inside a QRS complex: padding lets the envelope's first and
    # last samples be peaks, and _refine drops the beats whose R peak lies outside the record.
    padded = np.concatenate(([-1.0], envelope, [-1.0]))
    candidates = sps.find_peaks(padded, distance=refractory)[0].astype(np.int64) - 1
    heights = envelope[candidates]
    beats = _decide(
        candidates,
        heights,
        _steepest(wide, candidates, fe, config),
        *_initial_levels(candidates, heights, envelope, fe),
        refractory,
        round(config.t_wave_s * fe),
        config,
        fe,
    )
    beats = beats[~_in_flutter(envelope, beats, fe, config)]
    return _refine(x, beats * step + (step - 1) // 2, fs, config)


def _block_means(x: np.ndarray, step: int) -> np.ndarray:
    if step == 1:
        return x
    n = len(x) // step * step
    total = x[0:n:step].copy()
    for k in range(1, step):
        total += x[k:n:step]
    return total / step


def _one_lead(signal: np.ndarray) -> np.ndarray:
    x = np.asarray(signal, dtype=np.float64)
    if x.ndim == 2:
        x = x[:, 0]
    if x.ndim != 1:
        raise ValueError(f"signal must be 1-D or (n_samples, n_leads), got shape {x.shape}")
    finite = np.isfinite(x)
    if not finite.all():
        if not finite.any():
            raise ValueError("signal has no finite samples")
        idx = np.arange(len(x))
        x = np.interp(idx, idx[finite], x[finite])
    return x


@lru_cache(maxsize=32)
def _bandpass(low: float, high: float, fs: float) -> tuple[np.ndarray, np.ndarray]:
    sos = sps.butter(2, [low, min(high, 0.45 * fs)], btype="bandpass", fs=fs, output="sos")
    return sos, sps.sosfilt_zi(sos)


def _filtfilt(band: tuple[float, float], fs: float, x: np.ndarray) -> np.ndarray:
    """Zero-phase band-pass, as scipy's sosfiltfilt (odd extension, steady-state start) but
    without its generality, which costs as much as the filtering itself here."""
    sos, zi = _bandpass(*band, fs)
    n = min(3 * (2 * len(sos) + 1), len(x) - 1)
    ext = np.concatenate((2 * x[0] - x[n:0:-1], x, 2 * x[-1] - x[-2 : -n - 2 : -1]))
    y = sps.sosfilt(sos, ext, zi=zi * ext[0])[0][::-1]
    y = sps.sosfilt(sos, y, zi=zi * y[0])[0][::-1]
    return y[n : len(y) - n]


def _envelope(wide: np.ndarray, fs: float, config: DetectorConfig) -> np.ndarray:
    """Centred RMS, over one integration window, of the slope of the QRS band (mV/s).

    RMS rather than Pan–Tompkins' mean square keeps thresholds linear in amplitude, so a
    beat half as tall as its neighbours is not 4 times weaker."""
    slope = np.gradient(_filtfilt(config.band_hz, fs, wide))
    width = max(1, round(config.integration_s * fs))
    return np.sqrt(ndimage.uniform_filter1d(slope * slope, width, mode="nearest")) * fs


def _steepest(wide: np.ndarray, at: np.ndarray, fs: float, config: DetectorConfig) -> np.ndarray:
    """Steepest wide-band slope within one integration window of each candidate: T waves are
    slow there, QRS complexes are not."""
    half = max(1, round(config.integration_s * fs / 2))
    idx = np.clip(at[:, None] + np.arange(-half, half + 1)[None, :], 1, len(wide) - 1)
    return np.abs(wide[idx] - wide[idx - 1]).max(axis=1) * fs


def _initial_levels(
    candidates: np.ndarray, heights: np.ndarray, envelope: np.ndarray, fs: float
) -> tuple[float, float]:
    """Signal and noise levels seeded from the first 10 s: beats are the tallest peaks; the
    noise level is the lower of the low peaks and the envelope's median, because in a fast
    rhythm every peak 250 ms apart may be a beat."""
    first = heights[candidates < 10 * fs]
    if len(first) < 4:
        first = heights
    if len(first) == 0:
        return 1.0, 0.0
    noise = min(np.percentile(first, 20), np.median(envelope[: int(10 * fs)]))
    return float(np.percentile(first, 80)), float(noise)


def _decide(
    pos: np.ndarray,
    height: np.ndarray,
    steepest: np.ndarray,
    spk: float,
    npk: float,
    refractory: int,
    t_wave: int,
    config: DetectorConfig,
    fs: float,
) -> np.ndarray:
    """Decide over the first `learn_s` seconds, then again from the start with the levels
    and RR intervals settled there, so that the first beats of a record are judged by
    thresholds as good as those of its later beats."""
    rules = (refractory, t_wave, config.threshold, config.t_wave_ratio, config.searchback_rr)
    k = int(np.searchsorted(pos, config.learn_s * fs))
    rr = np.full(8, fs)  # 60/min until beats are seen
    _, spk, npk, rr = _decide_jit(pos[:k], height[:k], steepest[:k], spk, npk, rr, *rules)
    return _decide_jit(pos, height, steepest, spk, npk, rr, *rules)[0]


@numba.njit(cache=True)
def _decide_jit(pos, height, steepest, spk, npk, rr_init, refractory, t_wave, frac, t_ratio, back):
    """Pan–Tompkins decision rules over candidate peaks: adaptive signal and noise levels,
    T-wave (and tall P-wave) rejection, search-back at half threshold after a long gap.
    Returns the beats and the final signal level, noise level and last 8 RR intervals."""
    n = len(pos)
    beats = np.empty(n, dtype=np.int64)
    n_beats = 0
    last = -(10**12)
    last_slope = 0.0
    rr = rr_init.copy()  # last 8 RR intervals
    rr_i = 0
    since = 0  # first candidate after the last beat
    i = 0
    while i < n:
        p = pos[i]
        h = height[i]
        thr = npk + frac * (spk - npk)
        if n_beats > 0 and p - last > back * rr.mean():
            best = -1
            for k in range(since, i):
                ok = pos[k] - last > refractory and height[k] > 0.5 * thr
                if ok and (best < 0 or height[k] > height[best]):
                    best = k
            if best >= 0:
                rr[rr_i % 8] = pos[best] - last
                rr_i += 1
                last = pos[best]
                last_slope = steepest[best]
                beats[n_beats] = last
                n_beats += 1
                spk = 0.25 * height[best] + 0.75 * spk
                since = best + 1
                i = since
                continue
        is_t = p - last < t_wave and steepest[i] < t_ratio * last_slope
        is_beat = h > thr and p - last > refractory and not is_t
        if is_beat and not _steeper_follows(pos, height, steepest, i, thr, t_wave, t_ratio):
            if n_beats > 0:
                rr[rr_i % 8] = p - last
                rr_i += 1
            beats[n_beats] = p
            n_beats += 1
            last = p
            last_slope = steepest[i]
            # Clipped so that one artefact cannot lift the level above the real beats.
            spk = 0.125 * min(h, 3.0 * spk) + 0.875 * spk
            since = i + 1
            i += 1
            continue
        npk = 0.125 * h + 0.875 * npk
        i += 1
    return beats[:n_beats], spk, npk, rr


@numba.njit(cache=True)
def _steeper_follows(pos, height, steepest, i, thr, t_wave, t_ratio):
    """The mirror of the T-wave test: a peak soon followed by a much steeper one above
    threshold is that beat's P wave."""
    j = i + 1
    while j < len(pos) and pos[j] - pos[i] < t_wave:
        if height[j] > thr and t_ratio * steepest[j] > steepest[i]:
            return True
        j += 1
    return False


def _in_flutter(
    envelope: np.ndarray, beats: np.ndarray, fs: float, config: DetectorConfig
) -> np.ndarray:
    """Beats inside a fast run with no isoelectric segment between consecutive beats."""
    if len(beats) < config.flutter_beats:
        return np.zeros(len(beats), dtype=bool)
    trough = np.minimum.reduceat(envelope, beats)[:-1] / np.maximum(envelope[beats[1:]], 1e-12)
    trough = np.concatenate(([trough[0]], trough))
    rr = np.diff(beats, prepend=2 * beats[0] - beats[1])
    size = config.flutter_beats
    fast = ndimage.median_filter(rr, size, mode="nearest") < config.flutter_rr_s * fs
    flat = ndimage.median_filter(trough, size, mode="nearest") > config.flutter_trough
    return fast & flat


def _refine(x: np.ndarray, beats: np.ndarray, fs: float, config: DetectorConfig) -> np.ndarray:
    """Move each beat to the largest deflection of the signal, at its own rate, from the
    straight line fitted through the window around it (local baseline)."""
    if len(beats) == 0:
        return beats
    half = max(1, round(config.refine_s * fs))
    t = np.arange(-half, half + 1)
    idx = np.clip(beats[:, None] + t[None, :], 0, len(x) - 1)
    y = x[idx]
    y = y - y.mean(axis=1, keepdims=True)
    y -= (y @ t / (t @ t))[:, None] * t[None, :]
    peaks = np.unique(idx[np.arange(len(beats)), np.abs(y).argmax(axis=1)])
    # A largest deflection on the first or last sample is the flank of a QRS complex whose
    # R peak lies outside the record.
    peaks = peaks[(peaks > 0) & (peaks < len(x) - 1)].astype(np.int64)
    if len(peaks) < 2:
        return peaks
    # Two envelope peaks may settle on one R peak; keep one.
    keep = np.concatenate(([True], np.diff(peaks) > round(config.refractory_s * fs) // 2))
    return peaks[keep]
