"""QRS detection over the valid spans of a lead with gaps, each span on its own."""

from __future__ import annotations

import numpy as np

from heartlm.qrs.detector import DEFAULT, DetectorConfig, detect_qrs


def detect_in_spans(
    x: np.ndarray, fs: float, spans: list[tuple[int, int]], config: DetectorConfig = DEFAULT
) -> np.ndarray:
    """Sorted R-peak indices into `x` of the beats inside the [start, stop) `spans`."""
    found = [start + detect_qrs(x[start:stop], fs, config) for start, stop in spans]
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
