"""`evaluate --out`'s export of the model's calls on every beat (beats runs) or every window
(AFIB runs) of the scored records, labelled or not: predictions.csv, beside the reference
where there is one and the time in the record where the beat store behind the tokens is at
hand, and then WFDB annotation files too, so WFDB's own tools (bxb, rdann) read the calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from heartlm.ecg.annwrite import AnnotationFile, write_files
from heartlm.ecg.labels import AAMI_CLASSES
from heartlm.labelled.tokens import BeatTimes
from heartlm.outdir import csv_text

BEAT_COLUMNS = ["record", "db", "beat", "time_s", "reference", "predicted",
                *(f"p_{name}" for name in AAMI_CLASSES)]  # fmt: skip
WINDOW_COLUMNS = ["record", "db", "first_beat", "beats", "start_s", "end_s", "reference",
                  "afib_probability", "called"]  # fmt: skip
_WINDOW_LABELS = {1: "AFIB", 0: "not AFIB"}
ANNOTATOR = "hlm"
"""Extension of the WFDB annotation files written beside predictions.csv."""
# WFDB beat codes of the AAMI classes (each maps back to its class under EC57's table) and
# the rhythm changes of AFIB calls, as MIT-BIH writes them.
_BEAT_SYMBOLS = dict(zip(AAMI_CLASSES, ("N", "S", "V", "F", "Q"), strict=True))
_RHYTHMS = {True: "(AFIB", False: "(N"}


def _seconds(times: BeatTimes | None, beat: int) -> str:
    return "" if times is None else f"{times.seconds[beat]:.3f}"


def beat_table(
    beat: np.ndarray,
    prob: np.ndarray,
    predicted: np.ndarray,
    data: Any,
    names: list[str],
    dbs: list[str],
    times: BeatTimes | None,
) -> str:
    """One row per beat: its record (`names`, as the per-record table names it), database,
    index within the record, R-peak time (blank without the store), reference AAMI class
    (blank if none), predicted class and the class probabilities the call was taken from."""
    record = np.searchsorted(data.boundaries, beat, side="right") - 1
    reference = np.asarray(data.aami)[beat]
    rows = (
        (names[r], dbs[r], int(b - data.boundaries[r]), _seconds(times, b),
         AAMI_CLASSES[a] if a >= 0 else "", AAMI_CLASSES[c], *(f"{p:.4f}" for p in ps))
        for r, b, a, c, ps in zip(record.tolist(), beat.tolist(), reference.tolist(),
                                  predicted.tolist(), prob, strict=True)
    )  # fmt: skip
    return csv_text(BEAT_COLUMNS, rows)


def window_table(
    windows: Any,
    about: np.ndarray,
    scores: np.ndarray,
    called: np.ndarray,
    data: Any,
    names: list[str],
    dbs: list[str],
    times: BeatTimes | None,
) -> str:
    """One row per window that was called: its record (`names`), database, first beat within the
    record and beat count (the beats it is about, `about`), first and last R-peak times
    (blank without the store), reference (AFIB, not AFIB, blank if none), the model's AFIB
    probability and its call."""
    rows = []
    for i in np.flatnonzero(called >= 0):
        r = int(windows.record[i])
        beats = windows.beat[i][about[i]]
        first, last = int(beats.min()), int(beats.max())
        rows.append((names[r], dbs[r], first - int(data.boundaries[r]), len(beats),
                     _seconds(times, first), _seconds(times, last),
                     _WINDOW_LABELS.get(int(windows.window_label[i]), ""), f"{scores[i]:.4f}",
                     "AFIB" if called[i] else "not AFIB"))  # fmt: skip
    return csv_text(WINDOW_COLUMNS, rows)


def beat_calls(
    beat: np.ndarray,
    predicted: np.ndarray,
    data: Any,
    names: list[str],
    paths: list[str],
    times: BeatTimes,
) -> list[AnnotationFile]:
    """Each record's beats as WFDB beat annotations of their predicted AAMI class, at the
    record's own sample numbers, in the file `paths[record]` (`names`: as predictions.csv
    names the records)."""
    record = np.searchsorted(data.boundaries, beat, side="right") - 1
    calls = []
    for r in np.unique(record).tolist():
        mine = record == r
        symbols = [_BEAT_SYMBOLS[AAMI_CLASSES[c]] for c in predicted[mine].tolist()]
        calls.append(AnnotationFile(names[r], paths[r], times.source_samples(beat[mine], r),
                                    symbols, [""] * len(symbols), times.record_fs[r]))  # fmt: skip
    return calls


def rhythm_calls(
    windows: Any,
    about: np.ndarray,
    called: np.ndarray,
    names: list[str],
    paths: list[str],
    times: BeatTimes,
) -> list[AnnotationFile]:
    """Each record's AFIB calls as WFDB rhythm annotations (`+`, aux `(AFIB` or `(N`) at the
    first beat of every called window whose call differs from the record's previous one."""
    starts: dict[int, list[tuple[int, bool]]] = {}
    for i in np.flatnonzero(called >= 0):
        first = int(windows.beat[i][about[i]].min())
        starts.setdefault(int(windows.record[i]), []).append((first, bool(called[i])))
    calls = []
    for r, row in starts.items():
        row.sort()
        changes = [(b, afib) for k, (b, afib) in enumerate(row) if k == 0 or afib != row[k - 1][1]]
        beats = np.array([b for b, _ in changes], dtype=np.int64)
        calls.append(AnnotationFile(names[r], paths[r], times.source_samples(beats, r),
                                    ["+"] * len(changes), [_RHYTHMS[afib] for _, afib in changes],
                                    times.record_fs[r]))  # fmt: skip
    return calls


def write_calls(folder: Path, calls: list[AnnotationFile]) -> None:
    """`folder/PATH.hlm` for every record's calls, and `folder/index.csv`."""
    write_files(folder, calls, ANNOTATOR)
