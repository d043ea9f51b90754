"""Zero-phase band-pass filtering and resampling of one lead to the store's rate."""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import numpy as np
from scipy import signal

FILTER_ORDER = 2  # sosfiltfilt runs it twice: 4th-order magnitude response, no phase shift


@lru_cache(maxsize=32)
def _bandpass(fs: float, lo: float, hi: float) -> np.ndarray:
    if lo > 0:
        sos = signal.butter(FILTER_ORDER, [lo, hi], btype="bandpass", fs=fs, output="sos")
    else:
        sos = signal.butter(FILTER_ORDER, hi, btype="lowpass", fs=fs, output="sos")
    return sos.astype(np.float32)


@lru_cache(maxsize=32)
def _resampling_fir(fs_in: float, fs_out: float, hi: float, up: int) -> np.ndarray:
    """The interpolation filter for resample_poly, only as sharp as the band-pass needs.

    Everything above `hi` is removed by the band-pass anyway, so the FIR only has to stop
    what would alias or image into 0..hi: frequencies from min(fs_in, fs_out) - hi up. That
    is a far wider transition than scipy's default (cut at the new Nyquist rate), hence a
    several times shorter filter. Odd length and symmetric: zero phase in resample_poly.
    """
    rate = fs_in * up
    stop = min(fs_in, fs_out) - hi
    numtaps, beta = signal.kaiserord(60.0, (stop - hi) / (rate / 2))
    numtaps |= 1
    h = signal.firwin(numtaps, (hi + stop) / 2, window=("kaiser", beta), fs=rate)
    return h.astype(np.float32)  # resample_poly applies the gain `up` itself


def resample_ratio(fs_in: float, fs_out: float) -> tuple[int, int]:
    """(up, down) integers with up/down = fs_out/fs_in, for resample_poly."""
    ratio = Fraction(fs_out / fs_in).limit_denominator(1000)
    return ratio.numerator, ratio.denominator


def bandpass_resample(
    x: np.ndarray, fs_in: float, fs_out: float, band: tuple[float, float]
) -> np.ndarray:
    """Band-pass `x` and bring it to `fs_out` as float32, without shifting R peaks.

    The filter runs at the lower of the two rates (fewer samples to filter); both
    steps are linear and zero-phase, so the order does not move the peaks.
    """
    x = np.asarray(x, dtype=np.float32)
    up, down = resample_ratio(fs_in, fs_out)
    if up == down:
        return signal.sosfiltfilt(_bandpass(fs_in, *band), x).astype(np.float32, copy=False)
    fir = _resampling_fir(fs_in, fs_out, band[1], up)
    if fs_out < fs_in:
        y = signal.resample_poly(x, up, down, window=fir, padtype="line")
        y = signal.sosfiltfilt(_bandpass(fs_out, *band), y)
    else:
        y = signal.sosfiltfilt(_bandpass(fs_in, *band), x)
        y = signal.resample_poly(y, up, down, window=fir, padtype="line")
    return np.asarray(y, dtype=np.float32)


def map_positions(samples: np.ndarray, fs_in: float, fs_out: float) -> np.ndarray:
    """Sample indices at `fs_in` to the nearest sample at `fs_out`."""
    return np.rint(np.asarray(samples, dtype=np.float64) * (fs_out / fs_in)).astype(np.int64)
