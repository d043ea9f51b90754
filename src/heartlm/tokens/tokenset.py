"""`TokenSet`: the one reader of a token folder (see `heartlm.shards` for the format)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from heartlm import shards
from heartlm.ecg.labels import AAMI_CLASSES, RHYTHMS
from heartlm.errors import HeartlmError
from heartlm.runinfo import json_field, json_fields, read_json

FORMAT = "heartlm.tokens"
VERSION = shards.VERSION

_DTYPES = {
    "morph": np.dtype("<u2"),
    "rhythm": np.dtype("<u2"),
    "aami": np.dtype("i1"),
    "rhythm_label": np.dtype("i1"),
    "features": np.dtype("<f2"),
    "boundaries": np.dtype("<i8"),
}
_META_TYPES: dict[str, Any] = {
    "vocab_size": int, "rhythm_vocab_size": int, "n_beats": int, "records": list[dict],
    "fs": float, "window_samples": int, "features": list[str], "rr_window": int | None,
    "codebook_hash": str | None,
}  # fmt: skip
_RECORD_TYPES: dict[str, Any] = {"name": str, "db": str | None, "start": int, "n_beats": int}


@dataclass(frozen=True, eq=False)  # arrays have no single truth value: identity equality
class TokenSet:
    """Aligned token and label streams of one token folder; arrays are memory-mapped.

    `morph[i]`, `rhythm[i]`, `aami[i]`, `rhythm_label[i]` describe beat i; record r holds
    beats `boundaries[r]:boundaries[r + 1]` and is described by `records[r]`.
    """

    folder: Path
    morph: np.ndarray  # (n_beats,) uint16, NUM_SPECIAL + codebook index, or UNK
    rhythm: np.ndarray  # (n_beats,) uint16, NUM_SPECIAL + RR bin index, or UNK
    aami: np.ndarray  # (n_beats,) int8, heartlm.ecg.labels.AAMI_CLASSES code, -1 unlabelled
    rhythm_label: np.ndarray  # (n_beats,) int8, heartlm.ecg.labels.RHYTHMS code
    features: np.ndarray  # (n_beats, n_features) float16, standardised (heartlm.tokens.features)
    boundaries: np.ndarray  # (n_records + 1,) int64 offsets into the streams
    records: list[dict[str, Any]]
    meta: dict[str, Any]

    @property
    def n_beats(self) -> int:
        return int(self.meta["n_beats"])

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    @property
    def rhythm_vocab_size(self) -> int:
        return int(self.meta["rhythm_vocab_size"])

    @property
    def feature_names(self) -> list[str]:
        return list(self.meta["features"])

    def __len__(self) -> int:
        return self.n_beats

    def record_slice(self, index: int) -> slice:
        return slice(int(self.boundaries[index]), int(self.boundaries[index + 1]))

    @classmethod
    def load(cls, folder: str | Path, mmap: bool = True) -> TokenSet:
        """Read and validate a token folder; any inconsistency is one HeartlmError."""
        folder = Path(folder)
        meta = _read_meta(folder)
        streams = {
            name: shards.read_shard(folder / shards.STREAMS[name], dtype, mmap=mmap)
            for name, dtype in _DTYPES.items()
        }
        n = int(meta["n_beats"])
        for name in ("morph", "rhythm", "aami", "rhythm_label", "features"):
            if len(streams[name]) != n:
                raise HeartlmError(
                    f"holds {len(streams[name])} items, tokens.json says n_beats = {n}",
                    folder / shards.STREAMS[name],
                )
        rows, n_features = streams["features"], len(meta["features"])
        width = 1 if rows.ndim == 1 else rows.shape[1]
        if width != n_features:
            raise HeartlmError(
                f"holds rows of {width} features, tokens.json names {n_features}",
                folder / shards.STREAMS["features"],
            )
        streams["features"] = rows.reshape(n, n_features)
        _check_boundaries(folder, streams["boundaries"], meta["records"], n)
        _check_range(folder, "morph", streams["morph"], int(meta["vocab_size"]))
        _check_range(folder, "rhythm", streams["rhythm"], int(meta["rhythm_vocab_size"]))
        _check_codes(folder, "aami", streams["aami"], len(AAMI_CLASSES))
        _check_codes(folder, "rhythm_label", streams["rhythm_label"], len(RHYTHMS))
        return cls(folder=folder, records=list(meta["records"]), meta=meta, **streams)


def _read_meta(folder: Path) -> dict[str, Any]:
    path = folder / "tokens.json"
    meta = read_json(folder, "tokens.json", "not a token folder (no tokens.json)")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise HeartlmError(f"format is {found!r}, expected {FORMAT!r}", path)
    version = json_field(meta, "version", int, path)
    if version != VERSION:
        raise HeartlmError(f"token format version {version}, this heartlm reads {VERSION}", path)
    json_fields(meta, _META_TYPES, path)
    for i, record in enumerate(meta["records"]):
        json_fields(record, _RECORD_TYPES, path, where=f"records[{i}].")
    if meta["n_beats"] < 0:
        raise HeartlmError(f"n_beats {meta['n_beats']} is negative", path)
    return meta


def _check_boundaries(folder: Path, b: np.ndarray, records: list[dict[str, Any]], n: int) -> None:
    path = folder / shards.STREAMS["boundaries"]
    if len(b) != len(records) + 1:
        raise HeartlmError(
            f"holds {len(b)} offsets, expected {len(records) + 1} (records + 1)", path
        )
    if b[0] != 0 or b[-1] != n or np.any(np.diff(b) < 0):
        raise HeartlmError(f"offsets must rise from 0 to n_beats = {n}", path)
    for r, rec in enumerate(records):
        if (rec.get("start"), rec.get("n_beats")) != (int(b[r]), int(b[r + 1] - b[r])):
            raise HeartlmError(
                f"record {rec.get('name')!r} disagrees with tokens.json (start/n_beats)", path
            )


def _check_codes(folder: Path, name: str, codes: np.ndarray, n_codes: int) -> None:
    """Label codes are -1 (none) or an index into their list of names."""
    if len(codes) and (int(codes.min()) < -1 or int(codes.max()) >= n_codes):
        bad = int(codes.max()) if int(codes.max()) >= n_codes else int(codes.min())
        raise HeartlmError(
            f"holds label code {bad}, outside -1 .. {n_codes - 1}", folder / shards.STREAMS[name]
        )


def _check_range(folder: Path, name: str, tokens: np.ndarray, vocab: int) -> None:
    if len(tokens) and int(tokens.max()) >= vocab:
        raise HeartlmError(
            f"holds token {int(tokens.max())}, outside the vocabulary of {vocab}",
            folder / shards.STREAMS[name],
        )
