"""Draw beats as sums of Gaussian waves on the sample grid, all beats of a record at once."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from heartlm.synth.patient import Patient
from heartlm.synth.rhythm import Beats

CHUNK_ELEMENTS = 1 << 21  # bounds the (waves x window) scratch arrays to a few MB
MIN_SIGMA_SAMPLES = 0.7  # narrower waves would alias; an ADC's anti-alias filter smears them too


@dataclass
class Waves:
    """Every wave of every beat: centre and width in samples, amplitude per lead."""

    center: np.ndarray  # (M,)
    sigma: np.ndarray  # (M,)
    amp_ML: np.ndarray  # (M, leads) mV


def beat_waves(rng: np.random.Generator, beats: Beats, p: Patient, fs: float) -> Waves:
    """Place each beat's template at its time, with QT adaptation and per-beat variation."""
    t = beats.time
    rr = np.clip(np.diff(t, prepend=t[0] - 60.0 / p.hr_bpm if len(t) else 0.0), 0.3, 1.6)
    # Breathing moves the heart and changes the thoracic impedance: QRS amplitude follows it.
    gain = 1.0 + p.resp_mod * np.sin(2 * np.pi * p.resp_hz * t) + rng.normal(0, 0.03, len(t))
    parts = []
    for symbol, templates in p.templates.items():
        for k, tpl in enumerate(templates):
            idx = np.flatnonzero((beats.symbol == symbol) & (beats.variant == k))
            if len(idx) == 0:
                continue
            stretch = np.where(tpl.qt[None, :], np.sqrt(rr[idx, None]), 1.0)
            center = (t[idx, None] + tpl.offset[None, :] * stretch) * fs
            sigma = np.broadcast_to(tpl.width[None, :] * fs, center.shape)
            amp = tpl.amp_KL[None, :, :] * gain[idx, None, None]
            parts.append((center.ravel(), sigma.ravel(), amp.reshape(-1, amp.shape[-1])))
    if not parts:
        leads = next(iter(p.templates.values()))[0].amp_KL.shape[1]
        return Waves(np.zeros(0), np.zeros(0), np.zeros((0, leads)))
    center, sigma, amp = (np.concatenate(x) for x in zip(*parts, strict=True))
    return Waves(center, np.maximum(sigma, MIN_SIGMA_SAMPLES), amp)


def render(waves: Waves, out_LN: np.ndarray) -> None:
    """Add the waves into `out_LN` (leads, n samples) in place.

    A template's wave has one width in every beat, so waves are grouped by window length and
    each group is drawn with one array expression: no padding, no per-beat Python.
    """
    if len(waves.center) == 0:
        return
    leads, n = out_LN.shape
    half = np.ceil(4.0 * waves.sigma).astype(np.int64)
    margin = int(half.max()) + 1
    # Draw into a buffer with a margin on both sides so windows never need clipping.
    padded_LN = np.zeros((leads, n + 2 * margin))
    pending: list[tuple[np.ndarray, np.ndarray]] = []
    pending_size = 0

    def flush() -> None:
        flat = np.concatenate([f for f, _ in pending])
        weights_LE = np.concatenate([w for _, w in pending], axis=1)
        for lead in range(leads):
            padded_LN[lead] += np.bincount(flat, weights=weights_LE[lead], minlength=n + 2 * margin)
        pending.clear()

    for h in np.unique(half):
        group = np.flatnonzero(half == h)
        offsets = np.arange(-h, h + 1)
        for sel in np.array_split(group, 1 + len(group) * (2 * h + 1) // CHUNK_ELEMENTS):
            base = np.clip(
                np.rint(waves.center[sel]).astype(np.int64), h - margin, n + margin - h - 1
            )
            z = (base[:, None] + offsets[None, :] - waves.center[sel, None]) / waves.sigma[
                sel, None
            ]
            g = np.exp(-0.5 * z * z)
            flat = (base[:, None] + (offsets + margin)[None, :]).ravel()
            weights_LE = (waves.amp_ML[sel].T[:, :, None] * g[None, :, :]).reshape(leads, -1)
            pending.append((flat, weights_LE))
            pending_size += flat.size
            if pending_size >= 4 * CHUNK_ELEMENTS:
                flush()
                pending_size = 0
    if pending:
        flush()
    out_LN += padded_LN[:, margin : margin + n]


def peak_times(beats: Beats, p: Patient) -> np.ndarray:
    """Each beat's fiducial time: its nominal time plus its template's QRS peak offset."""
    offset = np.zeros(len(beats.time))
    for symbol, templates in p.templates.items():
        for k, tpl in enumerate(templates):
            offset[(beats.symbol == symbol) & (beats.variant == k)] = tpl.peak_offset()
    return beats.time + offset
