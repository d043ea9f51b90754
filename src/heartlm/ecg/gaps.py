"""Missing samples of a lead: short gaps bridged, longer ones kept out of every beat.

A dropout of up to `MAX_BRIDGE_S` inside a recording is filled by linear interpolation
and treated as signal. A longer one, and any run of missing samples at either end of
the record (skew leaves the last samples of a lead missing), is a gap: it is bridged
too, so that filters can run over the whole lead, but no beat may be detected in it or
have its window overlap it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_BRIDGE_S = 0.5


@dataclass
class Filled:
    signal: np.ndarray  # the lead with every missing sample filled
    gaps: list[tuple[int, int]]  # [start, stop) sample ranges where no beat may lie, sorted
    n_bridged: int  # missing samples filled in short gaps, which count as signal

    def spans(self) -> list[tuple[int, int]]:
        """The [start, stop) ranges between the gaps."""
        bounds = [0, *(b for gap in self.gaps for b in gap), len(self.signal)]
        return [(a, b) for a, b in zip(bounds[::2], bounds[1::2], strict=True) if b > a]


def fill_gaps(x: np.ndarray, fs: float, max_bridge_s: float = MAX_BRIDGE_S) -> Filled:
    """Interpolate over the missing (non-finite) samples of `x`; at least one must be finite."""
    missing = ~np.isfinite(x)
    if not missing.any():
        return Filled(x, [], 0)
    edges = np.diff(np.concatenate(([0], missing.view(np.int8), [0])))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    at_end = (starts == 0) | (stops == len(x))
    long = at_end | (stops - starts > max_bridge_s * fs)
    idx = np.arange(len(x))
    # np.interp holds the first and last finite values over the ends.
    filled = np.interp(idx, idx[~missing], x[~missing]).astype(x.dtype, copy=False)
    gaps = [(int(a), int(b)) for a, b in zip(starts[long], stops[long], strict=True)]
    return Filled(filled, gaps, int((stops - starts)[~long].sum()))


def rescale_gaps(gaps: list[tuple[int, int]], fs_in: float, fs_out: float) -> list[tuple[int, int]]:
    """Gaps at rate `fs_in` as the samples at `fs_out` that they touch."""
    ratio = fs_out / fs_in
    return [(int(np.floor(a * ratio)), int(np.ceil(b * ratio))) for a, b in gaps]
