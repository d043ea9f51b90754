"""QRS detection at any sampling rate: slope envelope, adaptive thresholds, R-peak refinement.

A Pan–Tompkins-family detector (Pan & Tompkins, IEEE TBME 32(3), 1985) whose beats are
finally compared with the record's median beat: in strong noise, a beat that looks less like
it than a spot nearby is moved there. Every time constant is in seconds and every filter is
designed at the record's own rate, so nothing depends on the rate of the database it was
checked on. The sequential steps (the recursive filters, the envelope's moving window,
accepting or rejecting a few thousand candidate peaks per half hour, and comparing beats
with the median beat) are compiled with numba; the rest is vectorized numpy/scipy.
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
    high_hz: float = 15.0
    """A second band, from here up to the wide band's 30 Hz, where electrode-motion noise
    and P and T waves have little energy: the envelope weighs its slope by 1/3 against the
    QRS band's 2/3."""
    refractory_s: float = 0.25
    """No two beats closer than this (240/min); also keeps a tall P wave and its QRS apart."""
    threshold: float = 0.4
    """A peak is a beat above noise level + this fraction of (signal level - noise level)."""
    t_wave_s: float = 0.36
    """Within this time of a beat, a peak much less steep than the beat is its T wave..."""
    t_wave_ratio: float = 0.5
    """...'much less steep' meaning a steepest slope below this fraction of the beat's."""
    p_wave_ratio: float = 0.9
    """A peak followed within `t_wave_s` by one twice as steep is that beat's P wave, unless
    it is at least this fraction as steep as the last beat: then it is a QRS complex and the
    steeper peak an artefact or the next beat (a P wave is never nearly as steep as a QRS)."""
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
    shape_s: float = 0.06
    """Half-width of the window (about a QRS complex) in which a spot of the wide band is
    compared with the record's median beat: by correlation (shape) and by projection
    (amplitude, 1 for the median beat itself). A beat moves to the spot between its
    neighbours' refractory periods that correlates best..."""
    alike: tuple[float, float] = (0.85, 0.2)
    """...if that correlation exceeds the first number, and the beat's own by the second..."""
    alike_amplitude: tuple[float, float] = (0.7, 2.0)
    """...if the spot's amplitude lies in this range (a small wiggle may have a beat's shape)..."""
    alike_envelope: float = 0.5
    """...and if the envelope there reaches this fraction of the beat's. In strong
    electrode-motion noise the envelope's peak near a beat is often the noise, while the
    beat itself, a little earlier or later, still has the record's usual shape; a beat of
    another shape (an ectopic beat) has no such spot nearby and stays."""
    min_beat_mv: float = 0.025
    """A beat among whose `floor_beats` nearest beats the median spans less than this (peak
    to peak of the wide band within `shape_s` of the R peak, in mV) is the noise of a flat
    or disconnected lead, not a heartbeat, and is not reported. Over the annotated beats of
    MIT-BIH (both leads) and LUDB (12 leads) that median is never below 0.032 (MIT-BIH 200's
    second lead); over the detections in 10 uV of noise it is 0.012-0.016."""
    floor_beats: int = 9
    """...its own and four on each side: a run of lead-off noise goes, the real beats of the
    same record stay, and a single small beat among real ones stays too."""
    learn_s: float = 8.0
    """The decisions run once over this first stretch of the record (all of a shorter one),
    then again from the first sample with the signal level, noise level and RR intervals
    they settled on: no beat is judged by thresholds that are still learning."""


DEFAULT = DetectorConfig()


def detect_qrs(signal: np.ndarray, fs: float, config: DetectorConfig = DEFAULT) -> np.ndarray:
    """Sorted int64 sample indices of the R peaks of an ECG in mV sampled at `fs` Hz (the
    one absolute threshold, `min_beat_mv`, reads mV: a signal in volts reads as noise).

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
    peaks = _refine(x, _full_rate(beats, step), fs, config)
    peaks = _relocate(x, peaks, wide, envelope, step, fs, config)
    if len(peaks) == 0:
        return peaks
    spans = _spans(wide, _envelope_rate(peaks, step, len(wide)), max(1, round(config.shape_s * fe)))
    local = ndimage.median_filter(spans, config.floor_beats, mode="nearest")
    return peaks[local >= config.min_beat_mv]


def _full_rate(at: np.ndarray, step: int) -> np.ndarray:
    """Samples of the signal at the centres of envelope-rate samples `at` (blocks of `step`)."""
    return at * step + (step - 1) // 2


def _envelope_rate(peaks: np.ndarray, step: int, n: int) -> np.ndarray:
    """For each of the samples `peaks`, the envelope-rate sample (of `n`) whose block centre
    (`_full_rate`) is the last at or before it: `_full_rate`'s inverse on block centres."""
    return np.clip((peaks - (step - 1) // 2) // step, 0, n - 1)


def _spans(wide: np.ndarray, at: np.ndarray, half: int) -> np.ndarray:
    """Peak-to-peak amplitude of `wide` within `half` samples of each of `at` (samples of
    `wide`)."""
    windows = np.lib.stride_tricks.sliding_window_view(
        np.pad(wide, half, mode="edge"), 2 * half + 1
    )
    picked = windows[at]
    return picked.max(axis=1) - picked.min(axis=1)


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
def _design(low: float, high: float | None, fs: float) -> tuple[np.ndarray, np.ndarray, int]:
    """Second-order Butterworth band-pass (high-pass when `high` is None) as two biquads
    (the high-pass padded with an identity section), their steady-state initial conditions
    and the odd-extension length that scipy's sosfiltfilt would use."""
    if high is None:
        sos = sps.butter(2, low, btype="highpass", fs=fs, output="sos")
    else:
        sos = sps.butter(2, [low, min(high, 0.45 * fs)], btype="bandpass", fs=fs, output="sos")
    zi = sps.sosfilt_zi(sos)
    pad = 3 * (2 * len(sos) + 1)
    if len(sos) == 1:
        sos = np.vstack((sos, [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]))
        zi = np.vstack((zi, [0.0, 0.0]))
    return sos, zi, pad


def _filtfilt(band: tuple[float, float | None], fs: float, x: np.ndarray) -> np.ndarray:
    """Zero-phase band-pass (high-pass when the upper edge is None), as scipy's sosfiltfilt
    (odd extension, steady-state start), compiled: scipy's generality and copies cost more
    than the filtering itself here."""
    sos, zi, pad = _design(*band, fs)
    x = np.ascontiguousarray(x, dtype=np.float64)
    return _filtfilt_jit(x, sos, zi, sos, zi, pad, False)[0]


def _filtfilt_two(
    band_a: tuple[float, float | None],
    band_b: tuple[float, float | None],
    fs: float,
    x: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """`_filtfilt` of one signal by two filters in the same loop (their recursions overlap
    on the CPU, so the second costs little), with the longer of their odd extensions."""
    sos_a, zi_a, pad_a = _design(*band_a, fs)
    sos_b, zi_b, pad_b = _design(*band_b, fs)
    x = np.ascontiguousarray(x, dtype=np.float64)
    return _filtfilt_jit(x, sos_a, zi_a, sos_b, zi_b, max(pad_a, pad_b), True)


@numba.njit(cache=True)
def _filtfilt_jit(x, sos_a, zi_a, sos_b, zi_b, pad, two):
    n = len(x)
    pad = min(pad, n - 1)
    m = n + 2 * pad
    ya = np.empty(m)
    for i in range(pad):
        ya[i] = 2 * x[0] - x[pad - i]
        ya[pad + n + i] = 2 * x[n - 1] - x[n - 2 - i]
    ya[pad : pad + n] = x
    yb = ya.copy() if two else ya[:0]
    for start, stop, step in ((0, m, 1), (m - 1, -1, -1)):
        zb = zi_b * (yb[start] if two else 0.0)
        _biquads(ya, yb, sos_a, zi_a * ya[start], sos_b, zb, start, stop, step)
    return ya[pad : pad + n], yb[pad : pad + n]


@numba.njit(cache=True)
def _biquads(ya, yb, sa, za, sb, zb, start, stop, step):
    """Filter `ya` in place by two biquads in cascade (transposed direct form II, as scipy's
    sosfilt) with states `za`, and `yb` (if not empty) likewise by `sb`. The states are kept
    in local variables: the loop is then bound by arithmetic, not by memory."""
    a0, a1, a2, a3 = za[0, 0], za[0, 1], za[1, 0], za[1, 1]
    b0, b1, b2, b3 = zb[0, 0], zb[0, 1], zb[1, 0], zb[1, 1]
    two = len(yb) > 0
    for i in range(start, stop, step):
        v = ya[i]
        u = sa[0, 0] * v + a0
        a0 = sa[0, 1] * v - sa[0, 4] * u + a1
        a1 = sa[0, 2] * v - sa[0, 5] * u
        w = sa[1, 0] * u + a2
        a2 = sa[1, 1] * u - sa[1, 4] * w + a3
        a3 = sa[1, 2] * u - sa[1, 5] * w
        ya[i] = w
        if two:
            v = yb[i]
            u = sb[0, 0] * v + b0
            b0 = sb[0, 1] * v - sb[0, 4] * u + b1
            b1 = sb[0, 2] * v - sb[0, 5] * u
            w = sb[1, 0] * u + b2
            b2 = sb[1, 1] * u - sb[1, 4] * w + b3
            b3 = sb[1, 2] * u - sb[1, 5] * w
            yb[i] = w


def _envelope(wide: np.ndarray, fs: float, config: DetectorConfig) -> np.ndarray:
    """RMS slope over one integration window (mV/s) of the QRS band, times that of the band
    above `high_hz`, combined as RMS_band^(2/3) * RMS_high^(1/3).

    A QRS complex is steep in both bands. Electrode-motion noise, baseline wander and P and
    T waves have little above 15 Hz, so the second factor keeps them down; the first keeps
    its weight, because muscle noise and pacemaker spikes live above 15 Hz. RMS rather than
    Pan–Tompkins' mean square keeps thresholds linear in amplitude, so a beat half as tall
    as its neighbours is not 4 times weaker."""
    band, high = _filtfilt_two(config.band_hz, (config.high_hz, None), fs, wide)
    width = max(1, round(config.integration_s * fs))
    return np.sqrt(np.cbrt(_slope_power(band, high, width))) * fs


@numba.njit(cache=True)
def _slope_power(band, high, width):
    """P_band^2 * P_high, where P is the centred moving mean (edges held) of the squared
    slope (central differences): one pass instead of a dozen numpy temporaries."""
    n = len(band)
    sb = np.empty(n)
    sh = np.empty(n)
    for i in range(n):
        lo = max(i - 1, 0)
        hi = min(i + 1, n - 1)
        d = max(hi - lo, 1)
        sb[i] = ((band[hi] - band[lo]) / d) ** 2
        sh[i] = ((high[hi] - high[lo]) / d) ** 2
    before = width // 2
    after = width - 1 - before
    acc_b = 0.0
    acc_h = 0.0
    for k in range(-before, after + 1):
        j = min(max(k, 0), n - 1)
        acc_b += sb[j]
        acc_h += sh[j]
    out = np.empty(n)
    for i in range(n):
        pb = max(acc_b, 0.0) / width  # a running sum may dip below 0 by rounding
        out[i] = pb * pb * max(acc_h, 0.0) / width
        drop = min(max(i - before, 0), n - 1)
        add = min(i + after + 1, n - 1)
        acc_b += sb[add] - sb[drop]
        acc_h += sh[add] - sh[drop]
    return out


def _steepest(wide: np.ndarray, at: np.ndarray, fs: float, config: DetectorConfig) -> np.ndarray:
    """Steepest wide-band slope within one integration window of each candidate: T waves are
    slow there, QRS complexes are not."""
    half = max(1, round(config.integration_s * fs / 2))
    idx = np.clip(at[:, None] + np.arange(-half, half + 1)[None, :], 1, len(wide) - 1)
    return np.abs(wide[idx] - wide[idx - 1]).max(axis=1) * fs


def _initial_levels(
    candidates: np.ndarray, heights: np.ndarray, envelope: np.ndarray, fs: float
) -> tuple[float, float]:
    """Signal and noise levels seeded from the first 10 s. Every 2 s hold a beat (at 30/min
    or more): the signal level is the median of their envelope maxima, whatever the share
    of beats among the peaks (small in a slow rhythm with P waves). The noise level is the
    lower of the low peaks and the envelope's median, because in a fast rhythm every peak
    250 ms apart may be a beat."""
    first = heights[candidates < 10 * fs]
    if len(first) < 4:
        first = heights
    if len(first) == 0:
        return 1.0, 0.0
    start = envelope[: int(10 * fs)]
    width = max(1, int(2 * fs))
    n = len(start) // width
    maxima = start[: n * width].reshape(n, width).max(axis=1) if n else start.max(keepdims=True)
    noise = min(np.percentile(first, 20), np.median(start))
    return float(np.median(maxima)), float(noise)


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
    rules = (
        refractory,
        t_wave,
        config.threshold,
        config.t_wave_ratio,
        config.p_wave_ratio,
        config.searchback_rr,
    )
    k = int(np.searchsorted(pos, config.learn_s * fs))
    rr = np.full(8, fs)  # 60/min until beats are seen
    _, spk, npk, rr = _decide_jit(pos[:k], height[:k], steepest[:k], spk, npk, rr, *rules)
    return _decide_jit(pos, height, steepest, spk, npk, rr, *rules)[0]


@numba.njit(cache=True)
def _decide_jit(
    pos, height, steepest, spk, npk, rr_init, refractory, t_wave, frac, t_ratio, p_ratio, back
):
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
                gap = pos[k] - last
                is_t = gap < t_wave and steepest[k] < t_ratio * last_slope
                ok = gap > refractory and height[k] > 0.5 * thr and not is_t
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
        if is_beat and not _is_p_wave(
            pos, height, steepest, i, thr, t_wave, t_ratio, p_ratio * last_slope
        ):
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
def _is_p_wave(pos, height, steepest, i, thr, t_wave, t_ratio, qrs_slope):
    """The mirror of the T-wave test: a peak soon followed by a much steeper one above
    threshold is that beat's P wave, unless it is at least `qrs_slope` steep (a fraction of
    the last beat's steepest slope; 0 before the first beat): then it is a QRS complex."""
    if qrs_slope > 0.0 and steepest[i] >= qrs_slope:
        return False
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
    # The envelope peak is the centre of the complex's energy: a parabolic weight, zero at
    # the window's edges, keeps a T wave or a noise swing there from beating the R wave.
    weight = 1 - (t / (half + 1)) ** 2
    peaks = np.unique(idx[np.arange(len(beats)), (np.abs(y) * weight).argmax(axis=1)])
    # A largest deflection on the first or last sample is the flank of a QRS complex whose
    # R peak lies outside the record.
    peaks = peaks[(peaks > 0) & (peaks < len(x) - 1)].astype(np.int64)
    return _distinct(peaks, fs, config)


def _distinct(peaks: np.ndarray, fs: float, config: DetectorConfig) -> np.ndarray:
    """Two envelope peaks may settle on one R peak: keep one of sorted `peaks`."""
    if len(peaks) < 2:
        return peaks
    keep = np.concatenate(([True], np.diff(peaks) > round(config.refractory_s * fs) // 2))
    return peaks[keep]


def _relocate(
    x: np.ndarray,
    peaks: np.ndarray,
    wide: np.ndarray,
    envelope: np.ndarray,
    step: int,
    fs: float,
    config: DetectorConfig,
) -> np.ndarray:
    """Move each beat that looks less like the record's median beat than a spot nearby does
    to that spot (see `DetectorConfig.shape_s`)."""
    fe = fs / step
    at = _envelope_rate(peaks, step, len(wide))
    template = _median_beat(wide, at, max(1, round(config.shape_s * fe)))
    if not template @ template > 0:  # too few beats, or a flat signal
        return peaks
    new = _relocate_jit(
        at,
        wide,
        template,
        envelope,
        max(1, round(config.refractory_s * fe)),
        max(1, round(0.01 * fe)),
        *config.alike,
        *config.alike_amplitude,
        config.alike_envelope,
    )
    moved = new != at
    if not moved.any():
        return peaks
    found = _refine(x, _full_rate(new[moved], step), fs, config)
    return _distinct(np.sort(np.concatenate((peaks[~moved], found))), fs, config)


@numba.njit(cache=True)
def _median_beat(wide, at, half):
    """Median of the windows of `wide` (half-width `half`) centred on the beats `at` that
    fit in it, minus its mean; zeros if fewer than 8 fit."""
    m = 2 * half + 1
    fit = at[(at >= half) & (at < len(wide) - half)]
    template = np.zeros(m)
    if len(fit) < 8:
        return template
    column = np.empty(len(fit))
    for j in range(m):
        for k in range(len(fit)):
            column[k] = wide[fit[k] - half + j]
        template[j] = np.median(column)
    return template - template.mean()


@numba.njit(cache=True)
def _relocate_jit(at, wide, template, envelope, refractory, jitter, alike, gain, lo, hi, env):
    """New positions of the beats `at` (sorted, envelope rate): each one moves to the spot
    most like the median beat between its (already moved) neighbours' refractory periods,
    among those that pass the tests of `DetectorConfig.alike` and those after it. A beat's
    own likeness and envelope are the best within `jitter` samples (its R peak was found at
    full rate, away from the envelope's peak)."""
    n = len(at)
    new = at.copy()
    norm = template @ template
    for k in range(n):
        b = at[k]
        own = -1.0
        for i in range(b - jitter, b + jitter + 1):
            own = max(own, _likeness(wide, template, norm, i)[0])
        if own + gain >= 1.0:  # no spot can beat it by `gain`
            continue
        start = new[k - 1] + refractory if k > 0 else 0
        stop = at[k + 1] - refractory if k + 1 < n else len(wide) - 1
        floor = env * _local_max(envelope, b, jitter)
        best_rho = max(alike, own + gain)
        for i in range(start, stop + 1):
            if envelope[i] < floor:
                continue
            rho, amplitude = _likeness(wide, template, norm, i)
            if lo <= amplitude <= hi and rho > best_rho:
                new[k], best_rho = i, rho
    return new


@numba.njit(cache=True)
def _likeness(wide, template, norm, i):
    """Correlation of `wide` with the zero-mean `template` (of squared norm `norm`) centred
    on sample `i`, and the amplitude there (projection on the template: 1 for the template
    itself); (-1, 0) where the template does not fit."""
    m = len(template)
    start = i - m // 2
    if start < 0 or start + m > len(wide):
        return -1.0, 0.0
    dot = 0.0
    total = 0.0
    power = 0.0
    for j in range(m):
        v = wide[start + j]
        dot += v * template[j]
        total += v
        power += v * v
    variance = max(power - total * total / m, 1e-12)
    return dot / np.sqrt(variance * norm), dot / norm


@numba.njit(cache=True)
def _local_max(y, i, half):
    top = y[i]
    for j in range(max(i - half, 0), min(i + half + 1, len(y))):
        top = max(top, y[j])
    return top
