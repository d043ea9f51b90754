"""Reference annotations to beats: positions, AAMI classes, symbols and rhythm episodes."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from heartlm.ecg.labels import (
    NON_BEAT_SYMBOLS,
    RHYTHMS,
    SYMBOL_TO_AAMI,
    UNLABELLED,
    aami_code,
    rhythm_code,
)
from heartlm.ecg.wfdbio import Annotations

UNKNOWN_RHYTHM = RHYTHMS.index("unknown")

# Free-text rhythm statements in header comments (LUDB: `#Rhythm: Sinus rhythm.`) to codes;
# checked in order, first match wins.
_COMMENT_RHYTHMS: tuple[tuple[str, str], ...] = (
    ("atrial fibrillation", "AFIB"),
    ("atrial flutter", "AFL"),
    ("sinus bradycardia", "SBR"),
    ("sinus rhythm", "N"),
    ("sinus arrhythmia", "N"),  # respiratory variation of a sinus rhythm
    ("paced", "P"),
)
_RHYTHM_LINE = re.compile(r"^\s*#?\s*<?rhythm>?\s*:\s*(.+)$", re.IGNORECASE)


@dataclass
class Beats:
    sample: np.ndarray  # int64, at the record's own rate
    aami: np.ndarray  # int8 AAMI codes, UNLABELLED when the reference gives no class
    symbol: np.ndarray  # "S1" reference symbols, b"" for detected beats
    rhythm: np.ndarray  # int8 RHYTHMS codes
    has_rhythm: bool = False
    unknown_symbols: Counter = field(default_factory=Counter)


def from_annotations(ann: Annotations) -> Beats:
    """Beats of a beat-annotation file (MIT-BIH style) or of a wave-delineation file (LUDB).

    In a delineation file, `N` marks a QRS complex between `(` and `)` rather than a normal
    beat, so its beats carry no AAMI class. Unknown symbols are neither beats nor guessed:
    they are returned in `unknown_symbols` for the caller to report.
    """
    symbols = np.asarray(ann.symbol, dtype=object)
    delineation = "(" in ann.symbol and ")" in ann.symbol
    is_beat = np.fromiter((s in SYMBOL_TO_AAMI for s in ann.symbol), bool, len(ann.symbol))
    known = is_beat | np.fromiter((s in NON_BEAT_SYMBOLS for s in ann.symbol), bool, len(symbols))
    unknown = Counter(symbols[~known].tolist())
    beat_symbols = symbols[is_beat].tolist()
    if delineation:
        aami = np.full(len(beat_symbols), UNLABELLED, np.int8)
    else:
        codes = {s: aami_code(s) for s in set(beat_symbols)}
        aami = np.fromiter((codes[s] for s in beat_symbols), np.int8, len(beat_symbols))
    sample = ann.sample[is_beat]
    rhythm, has_rhythm = _rhythm_episodes(ann, sample)
    return Beats(
        sample=sample,
        aami=aami,
        symbol=np.asarray(beat_symbols, dtype="S1"),
        rhythm=rhythm,
        has_rhythm=has_rhythm,
        unknown_symbols=unknown,
    )


def from_detections(sample: np.ndarray) -> Beats:
    n = len(sample)
    return Beats(
        sample=np.asarray(sample, dtype=np.int64),
        aami=np.full(n, UNLABELLED, np.int8),
        symbol=np.zeros(n, dtype="S1"),
        rhythm=np.full(n, UNKNOWN_RHYTHM, np.int8),
    )


def _rhythm_episodes(ann: Annotations, beat_sample: np.ndarray) -> tuple[np.ndarray, bool]:
    """Rhythm code per beat: each `+` annotation's aux_note lasts until the next `+`."""
    starts = [i for i, s in enumerate(ann.symbol) if s == "+" and ann.aux_note[i].strip("\x00 ")]
    if not starts:
        return np.full(len(beat_sample), UNKNOWN_RHYTHM, np.int8), False
    change_at = ann.sample[starts]
    codes = np.array([UNKNOWN_RHYTHM] + [rhythm_code(ann.aux_note[i]) for i in starts], np.int8)
    # A beat at the very sample of a `+` belongs to the new episode.
    return codes[np.searchsorted(change_at, beat_sample, side="right")], True


def rhythm_from_comments(comments: list[str]) -> int | None:
    """Rhythm code stated in header comments (`Rhythm: Atrial fibrillation.`), if any."""
    for line in comments:
        match = _RHYTHM_LINE.match(line)
        if not match:
            continue
        text = match.group(1).lower()
        for phrase, name in _COMMENT_RHYTHMS:
            if phrase in text:
                return RHYTHMS.index(name)
        return RHYTHMS.index("other")
    return None
