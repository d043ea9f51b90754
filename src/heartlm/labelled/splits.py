"""Which records train, which validate: MIT-BIH inter-patient split and record-level carving.

The one rule that must never break: no MIT-BIH DS2 record is used for training, early
stopping or model selection. `check_not_test_records` is the single place that enforces
it; every path that builds a training or validation set goes through it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from heartlm.ecg.labels import MITDB_AFIB, MITDB_DS1, MITDB_DS2, MITDB_PACED
from heartlm.errors import HeartlmError
from heartlm.ingest.leads import recorded_in, recording_key

__all__ = [
    "MITDB_AFIB",
    "MITDB_DS1",
    "MITDB_DS2",
    "MITDB_PACED",
    "RecordRef",
    "Split",
    "check_not_test_records",
    "is_ds2",
    "is_mitdb",
    "split_records",
]


@dataclass(frozen=True)
class RecordRef:
    """A record of a token folder: its position in stream order, name, database, label flags."""

    index: int
    name: str
    db: str
    n_beats: int
    has_labels: bool = True
    positive: bool = False  # holds the rarer class (AFIB) somewhere: used to stratify

    @property
    def key(self) -> str:
        return f"{self.db}/{self.name}"

    @property
    def recording(self) -> str:
        """The recording this record is a lead of: one for a record and its lead copies."""
        return recording_key(self.db, self.name)


@dataclass(frozen=True)
class Split:
    train: tuple[RecordRef, ...]
    val: tuple[RecordRef, ...]


def is_mitdb(db: str) -> bool:
    """The MIT-BIH Arrhythmia Database, under PhysioNet's short or long folder name, or
    another lead of its records (`mitdb_V1`: `recorded_in`)."""
    db = recorded_in(db.rstrip("/").rsplit("/", 1)[-1]).lower()
    return db == "mitdb" or db.startswith("mit-bih-arrhythmia")


def is_ds2(record: RecordRef) -> bool:
    return is_mitdb(record.db) and record.name in MITDB_DS2


def check_not_test_records(records: Iterable[RecordRef], purpose: str) -> None:
    """Raise if any MIT-BIH DS2 record would be used for `purpose` (training or validation)."""
    leaked = sorted({r.name for r in records if is_ds2(r)})
    if leaked:
        raise HeartlmError(
            f"MIT-BIH DS2 records {', '.join(leaked)} would be used for {purpose}; "
            "DS2 is for testing only (inter-patient split, de Chazal 2004)"
        )


def _selected(records: Sequence[RecordRef], select: Sequence[str]) -> list[RecordRef]:
    """Records named in `select`, each given as NAME or DB/NAME; unknown names are an error."""
    wanted = set(select)
    chosen = [r for r in records if r.name in wanted or r.key in wanted]
    known = {r.name for r in records} | {r.key for r in records}
    missing = sorted(wanted - known)
    if missing:
        raise HeartlmError(f"--records names records the data does not hold: {', '.join(missing)}")
    return chosen


def default_pool(records: Sequence[RecordRef], task: str) -> list[RecordRef]:
    """Training records when --records is not given.

    MIT-BIH: DS1 for beat classes (paced records are in neither half), every non-DS2 record
    for AFIB. Other databases: every record that has labels for the task.
    """

    def wanted(r: RecordRef) -> bool:
        if not is_mitdb(r.db):
            return True
        return r.name not in MITDB_DS2 and (task != "beats" or r.name in MITDB_DS1)

    return [r for r in records if r.has_labels and wanted(r)]


def split_records(
    records: Sequence[RecordRef],
    task: str,
    val_fraction: float,
    seed: int,
    select: Sequence[str] | None = None,
) -> Split:
    """Training and validation records, carved at record level from the training pool.

    Validation takes round(val_fraction * pool) records (at least one when val_fraction > 0),
    drawn with `seed` and stratified on `positive` so both halves see the rare class when the
    pool has at least two such records.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError("--val-fraction must be in [0, 1)")
    if select:
        pool = [r for r in _selected(records, select) if r.has_labels]
    else:
        pool = default_pool(records, task)
    check_not_test_records(pool, "training")
    if not pool:
        raise HeartlmError(f"no records with {task} labels to train on (empty training split)")
    # Validation is drawn by recording: a record and its lead copies fall on one side.
    recordings = list(dict.fromkeys(r.recording for r in pool))
    n_val = 0 if val_fraction == 0 else max(1, round(val_fraction * len(recordings)))
    if n_val >= len(recordings):
        raise HeartlmError(
            f"{len(recordings)} training recording(s) cannot be split into training and "
            "validation (give more records or --val-fraction 0)"
        )
    rng = np.random.default_rng(seed)
    positive = {r.recording for r in pool if r.positive}
    pos = [rec for rec in recordings if rec in positive]
    neg = [rec for rec in recordings if rec not in positive]
    n_pos_val = min(len(pos) // 2, max(1, round(n_val * len(pos) / len(recordings)))) if pos else 0
    n_pos_val = min(n_pos_val, n_val)
    drawn = set(_draw(pos, n_pos_val, rng) + _draw(neg, min(len(neg), n_val - n_pos_val), rng))
    val = [r for r in pool if r.recording in drawn]
    train = [r for r in pool if r.recording not in drawn]
    check_not_test_records(val, "validation")
    return Split(train=tuple(train), val=tuple(sorted(val, key=lambda r: r.index)))


def _draw(items: list[str], n: int, rng: np.random.Generator) -> list[str]:
    if n <= 0:
        return []
    picked = rng.choice(len(items), size=n, replace=False)
    return [items[i] for i in sorted(picked)]
