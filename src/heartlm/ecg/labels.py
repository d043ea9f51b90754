"""ANSI/AAMI EC57 beat classes, rhythm episode codes and the MIT-BIH inter-patient split."""

from __future__ import annotations

AAMI_CLASSES: tuple[str, ...] = ("N", "S", "V", "F", "Q")
"""Class names in code order: code i is AAMI_CLASSES[i]; -1 means no reference label."""

UNLABELLED = -1

SYMBOL_TO_AAMI: dict[str, str] = {
    "N": "N", "L": "N", "R": "N", "e": "N", "j": "N",
    "A": "S", "a": "S", "J": "S", "S": "S",
    "V": "V", "E": "V",
    "F": "F",
    "/": "Q", "f": "Q", "Q": "Q",
}  # fmt: skip

NON_BEAT_SYMBOLS: frozenset[str] = frozenset("+~|x!\"[]()pt^uUs`'*=@{}#&D0rTB?")
"""Annotation symbols that carry rhythm, quality or wave information rather than a beat.

`B` (bundle-branch beat, unspecified) and `r` (R-on-T) appear in some databases; heartlm
treats them as non-beats and reports them in the counts rather than guessing a class."""

RHYTHMS: tuple[str, ...] = (
    "unknown", "N", "AFIB", "AFL", "B", "T", "VT", "VFL", "SVTA", "SBR", "BII", "IVR",
    "NOD", "P", "PREX", "AB", "other",
)  # fmt: skip
"""Rhythm codes: code i is RHYTHMS[i]. `unknown` = no rhythm annotation covers the beat."""


def aami_code(symbol: str) -> int:
    """AAMI code of a beat symbol; raises KeyError for a symbol that is not a beat."""
    return AAMI_CLASSES.index(SYMBOL_TO_AAMI[symbol])


def rhythm_code(aux_note: str) -> int:
    """Rhythm code of a `+` annotation's aux_note such as '(AFIB'; unlisted rhythms are 'other'."""
    name = aux_note.strip().rstrip("\x00").lstrip("(")
    return RHYTHMS.index(name) if name in RHYTHMS[1:] else RHYTHMS.index("other")


# de Chazal et al., IEEE TBME 51(7), 2004. Paced records 102, 104, 107, 217 are in neither.
MITDB_DS1: tuple[str, ...] = (
    "101", "106", "108", "109", "112", "114", "115", "116", "118", "119", "122", "124",
    "201", "203", "205", "207", "208", "209", "215", "220", "223", "230",
)  # fmt: skip
MITDB_DS2: tuple[str, ...] = (
    "100", "103", "105", "111", "113", "117", "121", "123", "200", "202", "210", "212",
    "213", "214", "219", "221", "222", "228", "231", "232", "233", "234",
)  # fmt: skip
MITDB_PACED: tuple[str, ...] = ("102", "104", "107", "217")
MITDB_AFIB: tuple[str, ...] = ("201", "202", "203", "210", "219", "221", "222")
