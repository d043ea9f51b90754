"""What is not the heart's electrical beat: baseline wander, muscle and powerline noise, f-waves
and flutter waves."""

from __future__ import annotations

import numpy as np

from heartlm.synth.patient import Patient

COARSE_S = 0.05  # slow components live on a 20 Hz grid and are interpolated to the samples
FADE_S = 0.5  # atrial waves fade in and out over this long at episode edges
FLUTTER_DOWN = 0.8  # share of a flutter cycle on the slow downslope; the upstroke takes the rest


def _slow(
    rng: np.random.Generator, t: np.ndarray, f_lo: float, f_hi: float, parts: int
) -> np.ndarray:
    """A smooth random wave: a few sinusoids of random frequency and phase, unit RMS."""
    freq = rng.uniform(f_lo, f_hi, parts)
    phase = rng.uniform(0, 2 * np.pi, parts)
    weight = rng.uniform(0.5, 1.0, parts)
    wave = np.sin(2 * np.pi * freq[None, :] * t[:, None] + phase[None, :]) @ weight
    return wave / np.sqrt(0.5 * np.sum(weight**2))


def _upsample(coarse: list[np.ndarray], n: int, fs: float) -> list[np.ndarray]:
    """Linear interpolation of waves sampled every COARSE_S seconds onto n samples at fs."""
    pos = np.arange(n) / (fs * COARSE_S)
    i = pos.astype(np.int64)
    frac = pos - i
    return [np.take(c, i) + frac * np.take(np.diff(c), i) for c in coarse]


def add_noise(
    rng: np.random.Generator, p: Patient, signal_LN: np.ndarray, fs: float, level: float
) -> None:
    """Add baseline wander, muscle and powerline noise in place, scaled by `level` (0 = none)."""
    leads, n = signal_LN.shape
    coarse_t = np.arange(0.0, n / fs + 3 * COARSE_S, COARSE_S)
    resp = np.sin(2 * np.pi * p.resp_hz * coarse_t + rng.uniform(0, 2 * np.pi))
    columns = [
        p.baseline_mv
        * rng.uniform(0.6, 1.4)
        * (0.6 * _slow(rng, coarse_t, 0.01, 0.15, 3) + 0.8 * resp)
        * level
        for _ in range(leads)
    ]
    # Muscle noise comes in bursts: white noise under a slowly varying envelope.
    columns.append(p.emg_mv * level * np.exp(0.6 * _slow(rng, coarse_t, 0.01, 0.1, 3)))
    slow = _upsample(columns, n, fs)
    emg_gain = rng.uniform(0.7, 1.3, leads)
    emg_LN = rng.standard_normal((leads, n))
    for lead in range(leads):
        noise = emg_LN[lead]
        noise *= slow[leads]
        noise *= emg_gain[lead]
        noise += slow[lead]
        signal_LN[lead] += noise
    if level > 0 and fs > 2.2 * p.line_hz:
        t = np.arange(n) / fs
        hum = p.line_mv * level * np.sin(2 * np.pi * p.line_hz * t + rng.uniform(0, 2 * np.pi))
        signal_LN += rng.uniform(0.5, 1.5, leads)[:, None] * hum[None, :]


def add_fwaves(rng: np.random.Generator, p: Patient, signal_LN: np.ndarray, fs: float) -> None:
    """Fibrillatory waves in place: 4-9 Hz atrial activity of wandering rate and size, in AFIB."""
    if not p.afib:
        return
    leads, n = signal_LN.shape
    coarse_t = np.arange(0.0, n / fs + 3 * COARSE_S, COARSE_S)
    freq = p.fwave_hz + 0.8 * _slow(rng, coarse_t, 0.05, 0.5, 3)
    size = np.clip(1.0 + 0.4 * _slow(rng, coarse_t, 0.1, 1.0, 3), 0.2, None)
    fade = _fade(coarse_t, p.afib)
    freq, size = _upsample([freq, p.fwave_mv * size * fade], n, fs)
    wave = np.sin(2 * np.pi * np.cumsum(freq) / fs) * size
    gains = np.array([1.0, rng.uniform(1.5, 2.5)])[:leads]  # f-waves are largest in V1
    signal_LN += gains[:, None] * wave[None, :]


def add_flutter_waves(
    rng: np.random.Generator, p: Patient, signal_LN: np.ndarray, fs: float
) -> None:
    """Flutter waves in place, in AFL: a regular sawtooth at the flutter rate, drawn as the
    inferior leads show it (slow downslope, quick upstroke), smaller in V1."""
    if not p.flutter:
        return
    leads, n = signal_LN.shape
    coarse_t = np.arange(0.0, n / fs + 3 * COARSE_S, COARSE_S)
    (size,) = _upsample([p.flutter_mv * _fade(coarse_t, p.flutter)], n, fs)
    phase = (np.arange(n) / (fs * p.flutter_cycle_s) + rng.uniform()) % 1.0
    # Mean zero, from +1 down to -1 and back up: flutter_mv is an amplitude, as fwave_mv is.
    saw = np.where(
        phase < FLUTTER_DOWN,
        1.0 - 2.0 * phase / FLUTTER_DOWN,
        -1.0 + 2.0 * (phase - FLUTTER_DOWN) / (1.0 - FLUTTER_DOWN),
    )
    gains = np.array([1.0, rng.uniform(0.3, 0.7)])[:leads]
    signal_LN += gains[:, None] * (saw * size)[None, :]


def _fade(coarse_t: np.ndarray, episodes: list[tuple[float, float]]) -> np.ndarray:
    """1 inside the episodes, 0 outside, ramping over FADE_S so episode edges are not steps."""
    fade = np.zeros_like(coarse_t)
    for start, end in episodes:
        fade += np.clip(np.minimum(coarse_t - start, end - coarse_t) / FADE_S + 0.5, 0.0, 1.0)
    return fade
