"""Our QRS detector and EC57-style scoring against reference beat annotations."""

from heartlm.qrs.detector import DetectorConfig, detect_qrs
from heartlm.qrs.scoring import EC57_TOLERANCE_S, Match, gross, match_beats, reference_beats
from heartlm.qrs.spans import detect_in_spans

__all__ = [
    "EC57_TOLERANCE_S",
    "DetectorConfig",
    "Match",
    "detect_in_spans",
    "detect_qrs",
    "gross",
    "match_beats",
    "reference_beats",
]
