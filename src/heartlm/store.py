"""The beat store: the contract between `ingest` (its one writer) and `tokenize` (its reader).

Layout of a store folder (format version 1):

- `store.json`: format, version, sampling rate `fs`, window geometry
  (`pre_samples` before the R peak, `post_samples` after, `window_samples` in all),
  `n_beats`, and `records`: one entry per record with its beats `start` .. `start+n_beats`.
- `beats.f32`: float32 little-endian, C order, shape (n_beats, window_samples):
  one filtered beat window per row, centred on the R peak, in millivolts.
- `table.bin`: one `TABLE_DTYPE` row per beat, same order.
- `run.json`: how the store was made (see `heartlm.runinfo`).

Both data files are raw arrays so they can be memory-mapped and appended to while
ingesting, one record at a time, without holding the corpus in memory.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from heartlm.ecg.labels import AAMI_CLASSES, RHYTHMS
from heartlm.errors import HeartlmError
from heartlm.outdir import atomic_write_text
from heartlm.runinfo import check_json_dataclass, json_field, read_json

FORMAT = "heartlm.beatstore"
VERSION = 1

TABLE_DTYPE = np.dtype(
    [
        ("record", "<i4"),  # index into store.json `records`
        ("sample", "<i8"),  # R peak, in samples at the store's rate, from record start
        ("rr_prev", "<f4"),  # seconds since the previous beat (NaN for the first)
        ("rr_next", "<f4"),  # seconds to the next beat (NaN for the last)
        ("aami", "i1"),  # heartlm.ecg.labels.AAMI_CLASSES code, -1 = no reference label
        ("rhythm", "i1"),  # heartlm.ecg.labels.RHYTHMS code
        ("symbol", "S1"),  # the reference annotation symbol, b"" when detected
    ]
)


@dataclass
class RecordEntry:
    name: str
    db: str
    source: str
    fs_source: float
    lead: str
    n_samples: int
    start: int = 0
    n_beats: int = 0
    beat_source: str = "annotations"  # or "detect"
    has_rhythm: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class StoreWriter:
    """Appends records' beats to a store folder; `close()` writes `store.json` last."""

    def __init__(self, folder: str | Path, fs: float, pre_samples: int, post_samples: int) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.fs = float(fs)
        self.pre_samples = int(pre_samples)
        self.post_samples = int(post_samples)
        self.window_samples = self.pre_samples + self.post_samples
        self.records: list[RecordEntry] = []
        self.n_beats = 0
        self._beats = open(self.folder / "beats.f32", "wb")  # noqa: SIM115 (closed in close())
        self._table = open(self.folder / "table.bin", "wb")  # noqa: SIM115

    def append(self, record: RecordEntry, beats: np.ndarray, table: np.ndarray) -> None:
        if beats.ndim != 2 or beats.shape[1] != self.window_samples:
            raise ValueError(f"beats must be (n, {self.window_samples}), got {beats.shape}")
        if table.dtype != TABLE_DTYPE or len(table) != len(beats):
            raise ValueError("table must be TABLE_DTYPE with one row per beat")
        table = table.copy()
        table["record"] = len(self.records)
        record.start, record.n_beats = self.n_beats, len(beats)
        self._beats.write(np.ascontiguousarray(beats, dtype="<f4").tobytes())
        self._table.write(table.tobytes())
        self.records.append(record)
        self.n_beats += len(beats)

    def close(self, extra: dict[str, Any] | None = None) -> None:
        self._beats.close()
        self._table.close()
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "fs": self.fs,
            "pre_samples": self.pre_samples,
            "post_samples": self.post_samples,
            "window_samples": self.window_samples,
            "n_beats": self.n_beats,
            "records": [asdict(r) for r in self.records],
            **(extra or {}),
        }
        atomic_write_text(self.folder / "store.json", json.dumps(meta, indent=1) + "\n")


class BeatStore:
    """Read-only, memory-mapped view of a store folder; validates before exposing anything."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        meta_path = self.folder / "store.json"
        meta = read_json(self.folder, "store.json", "not a beat store (no store.json)")
        # the format first: a foreign file is named as such, whatever its version looks like
        if meta.get("format") != FORMAT or json_field(meta, "version", int, meta_path) != VERSION:
            raise HeartlmError(
                f"unsupported store format {meta.get('format')} v{meta.get('version')}"
                f" (expected {FORMAT} v{VERSION})",
                meta_path,
            )
        self.meta = meta
        self.fs = json_field(meta, "fs", float, meta_path)
        self.pre_samples = json_field(meta, "pre_samples", int, meta_path)
        self.post_samples = json_field(meta, "post_samples", int, meta_path)
        self.window_samples = json_field(meta, "window_samples", int, meta_path)
        self.n_beats = json_field(meta, "n_beats", int, meta_path)
        _check_geometry(self, meta_path)
        self.records: list[RecordEntry] = []
        for i, entry in enumerate(json_field(meta, "records", list, meta_path)):
            check_json_dataclass(RecordEntry, entry, meta_path, f"records[{i}]")
            self.records.append(RecordEntry(**entry))
            if min(self.records[-1].start, self.records[-1].n_beats) < 0:
                raise HeartlmError(f"records[{i}] has a negative start or n_beats", meta_path)
        self.beats = self._map("beats.f32", np.dtype("<f4"), (self.n_beats, self.window_samples))
        self.table = self._map("table.bin", TABLE_DTYPE, (self.n_beats,))
        _check_table(self.table, len(self.records), self.folder / "table.bin")

    def _map(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        path = self.folder / name
        expected = int(np.prod(shape)) * dtype.itemsize
        if not path.is_file():
            raise HeartlmError("missing from the beat store", path)
        size = path.stat().st_size
        if size != expected:
            raise HeartlmError(
                f"has {size} bytes, store.json implies {expected}: truncated or corrupt", path
            )
        if expected == 0:
            return np.zeros(shape, dtype=dtype)
        return np.memmap(path, dtype=dtype, mode="r", shape=shape)

    @property
    def window_s(self) -> float:
        return self.window_samples / self.fs

    def record_slice(self, index: int) -> slice:
        r = self.records[index]
        return slice(r.start, r.start + r.n_beats)

    def __len__(self) -> int:
        return self.n_beats


def _check_geometry(store: BeatStore, path: Path) -> None:
    """Refuse a rate or beat window that no beat could have: later stages would fail far
    from the cause (k-means runs before a negative rate breaks the beat features)."""
    if not (np.isfinite(store.fs) and store.fs > 0):
        raise HeartlmError(f"fs {store.fs:g} is not a positive sampling rate", path)
    if store.window_samples != store.pre_samples + store.post_samples:
        raise HeartlmError(
            f"window_samples {store.window_samples} is not pre_samples {store.pre_samples}"
            f" + post_samples {store.post_samples}",
            path,
        )
    if not 0 <= store.pre_samples < store.window_samples:
        raise HeartlmError(
            f"pre_samples {store.pre_samples} puts the R peak outside the beat window"
            f" of {store.window_samples} samples",
            path,
        )
    if store.n_beats < 0:
        raise HeartlmError(f"n_beats {store.n_beats} is negative", path)


def _check_table(table: np.ndarray, n_records: int, path: Path) -> None:
    """Record indices and label codes inside their ranges, so that no reader passes a bad
    code on to the files it writes."""
    for name, low, high in (("record", 0, n_records - 1), ("aami", -1, len(AAMI_CLASSES) - 1),
                            ("rhythm", -1, len(RHYTHMS) - 1)):  # fmt: skip
        column = table[name]
        if not len(column):
            continue
        lo, hi = int(column.min()), int(column.max())
        if lo < low or hi > high:
            bad = lo if lo < low else hi
            raise HeartlmError(f"holds {name} {bad}, outside {low} .. {high}", path)
