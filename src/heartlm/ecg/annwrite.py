"""WFDB annotation files of heartlm's calls (`qrs --out`, `evaluate --out`), through wfdb.wrann.

A file is named after its record, so that WFDB tools pair the two (`bxb -r NAME -a atr qrs`);
WFDB record names hold letters, digits, `-` and `_` only, so other characters become `_`
(an EDF file's `.edf` is dropped). Where two records would share a file, each goes into a
subfolder named after the folder it was read from (`DB/NAME`), numbered where those repeat
too (`DB_2/NAME`, a number that no record's own folder takes): every path stays inside the
output folder, no file replaces another, and `index.csv` there says which record each file is
of.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from heartlm.log import logger
from heartlm.outdir import atomic_write_text, csv_text

_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, eq=False)
class AnnotationFile:
    """The file of record `record` (named as the caller's tables name it): `path` (relative,
    from `file_paths`) holds `symbol[i]` (and `aux_note[i]`) at `sample[i]`, counted at `fs`."""

    record: str
    path: str
    sample: np.ndarray
    symbol: list[str]
    aux_note: list[str]
    fs: float


def _stem(name: str) -> str:
    return name[:-4] if name.lower().endswith(".edf") else name


def _safe(name: str, empty: str) -> str:
    return _NOT_IN_A_NAME.sub("_", _stem(name)) or empty


def file_paths(names: Sequence[str], folders: Sequence[str]) -> list[str]:
    """A distinct relative path (NAME, or FOLDER/NAME) for each record `names[i]` read from a
    folder named `folders[i]`; where two would share one, the later gets FOLDER_k/NAME, k the
    first from 2 that no record's own folder takes."""
    safe = [_safe(n, "record") for n in names]
    renamed = sorted({n for n in names if _safe(n, "") != _stem(n)})
    if renamed:
        more = " ..." if len(renamed) > 5 else ""
        logger.warning("records named with characters that WFDB names cannot hold get files "
                       f"with '_' for them: {', '.join(renamed[:5])}{more}")  # fmt: skip
    if len(set(safe)) == len(safe):
        return safe
    wanted = [f"{_safe(f, 'records')}/{n}" for n, f in zip(safe, folders, strict=True)]
    taken = set(wanted)
    used: set[str] = set()
    paths = []
    for path in wanted:
        if path in used:
            folder, name = path.split("/")
            k = 2
            while f"{folder}_{k}/{name}" in taken or f"{folder}_{k}/{name}" in used:
                k += 1
            path = f"{folder}_{k}/{name}"
        used.add(path)
        paths.append(path)
    return paths


def write_files(folder: Path, files: Sequence[AnnotationFile], extension: str) -> None:
    """`folder/PATH.EXTENSION` for each of `files` that holds an annotation (the format
    needs one), and `folder/index.csv`: which record each file is of."""
    import wfdb

    for f in files:
        if not len(f.sample):
            continue
        where = folder / Path(f.path).parent
        where.mkdir(parents=True, exist_ok=True)
        wfdb.wrann(Path(f.path).name, extension, f.sample, symbol=f.symbol,
                   aux_note=f.aux_note, fs=f.fs, write_dir=str(where))  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    rows = ((f.record, f"{f.path}.{extension}" if len(f.sample) else "", len(f.sample))
            for f in files)  # fmt: skip
    atomic_write_text(folder / "index.csv", csv_text(["record", "file", "annotations"], rows))
