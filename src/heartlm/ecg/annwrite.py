"""WFDB annotation files of heartlm's calls (`qrs --out`, `evaluate --out`), through wfdb.wrann.

A file is named after its record, so that WFDB tools pair the two (`bxb -r NAME -a atr qrs`);
WFDB record names hold letters, digits, `-` and `_` only, so other characters become `_`
(an EDF file's `.edf` is dropped). Where two records would share a file, each goes into a
subfolder named after the folder it was read from (`DB/NAME`), numbered where those repeat
too (`DB_2/NAME`): every path stays inside the output folder, and no file replaces another.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from heartlm.log import logger

_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, eq=False)
class AnnotationFile:
    """`path` (relative, from `file_paths`) holds `symbol[i]` (and `aux_note[i]`) at
    `sample[i]`, counted at `fs`."""

    path: str
    sample: np.ndarray
    symbol: list[str]
    aux_note: list[str]
    fs: float


def _safe(name: str, empty: str) -> str:
    if name.lower().endswith(".edf"):
        name = name[:-4]
    return _NOT_IN_A_NAME.sub("_", name) or empty


def file_paths(names: Sequence[str], folders: Sequence[str]) -> list[str]:
    """A distinct relative path (NAME, or FOLDER/NAME) for each record `names[i]` read from a
    folder named `folders[i]`."""
    safe = [_safe(n, "record") for n in names]
    renamed = sorted({n for n in names if _safe(n, "") != n and not n.lower().endswith(".edf")})
    if renamed:
        more = " ..." if len(renamed) > 5 else ""
        logger.warning("records named with characters that WFDB names cannot hold get files "
                       f"with '_' for them: {', '.join(renamed[:5])}{more}")  # fmt: skip
    if len(set(safe)) == len(safe):
        return safe
    used: set[str] = set()
    paths = []
    for name, folder in zip(safe, folders, strict=True):
        base = _safe(folder, "records")
        where, k = base, 2
        while f"{where}/{name}" in used:
            where, k = f"{base}_{k}", k + 1
        used.add(f"{where}/{name}")
        paths.append(f"{where}/{name}")
    return paths


def write_files(folder: Path, files: Sequence[AnnotationFile], extension: str) -> None:
    """`folder/PATH.EXTENSION` for each of `files` that holds an annotation (the format
    needs one)."""
    import wfdb

    for f in files:
        if not len(f.sample):
            continue
        where = folder / Path(f.path).parent
        where.mkdir(parents=True, exist_ok=True)
        wfdb.wrann(Path(f.path).name, extension, f.sample, symbol=f.symbol,
                   aux_note=f.aux_note, fs=f.fs, write_dir=str(where))  # fmt: skip
