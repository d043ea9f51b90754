"""The one writer of a token folder: aligned shards plus `tokens.json` (read by `TokenSet`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from heartlm import shards
from heartlm.outdir import atomic_write_text
from heartlm.tokens.tokenset import _DTYPES, FORMAT, VERSION


def write_tokens(
    folder: str | Path,
    streams: dict[str, np.ndarray],
    records: list[dict[str, Any]],
    meta: dict[str, Any],
) -> dict[str, Any]:
    """Write the five streams and `tokens.json` (written last) into `folder`; return the JSON.

    `streams` maps each name of `heartlm.shards.STREAMS` to its array; `meta` must hold
    `vocab_size`, `rhythm_vocab_size`, `fs` and `window_samples`; the rest is added here.
    """
    folder = Path(folder)
    n = len(streams["morph"])
    for name, dtype in _DTYPES.items():
        array = np.asarray(streams[name])
        if name != "boundaries" and len(array) != n:
            raise ValueError(f"stream {name} has {len(array)} items, morph has {n}")
        shards.write_shard(folder / shards.STREAMS[name], array.astype(dtype, copy=False))
    info = {
        "format": FORMAT,
        "version": VERSION,
        **meta,
        "special": dict(shards.SPECIAL_TOKENS),
        "num_special": shards.NUM_SPECIAL,
        "n_beats": n,
        "n_records": len(records),
        "records": records,
        "streams": dict(shards.STREAMS),
    }
    atomic_write_text(folder / "tokens.json", json.dumps(info, indent=1) + "\n")
    return info
