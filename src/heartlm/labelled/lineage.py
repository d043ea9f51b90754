"""What a fine-tuned run carries to tokenize new records exactly like its training data.

A fine-tuned folder holds `codebook.safetensors` + `codebook.json` (copied from the token
folder) and `lineage.json`: the ingest settings of the beat store behind the tokens
(tokens run.json -> store run.json), the tokenizer settings that shape tokens (`rr_window`)
and the codebook hash. `heartlm evaluate` reads them back to ingest and tokenize raw WFDB
records at the run's own sampling rate and window.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from heartlm.errors import HeartlmError
from heartlm.log import logger
from heartlm.outdir import atomic_write_text
from heartlm.runinfo import parse_json_file, read_json, read_run_json

LINEAGE = "lineage.json"
FINETUNE_INFO = "finetune.json"
CODEBOOK_FILES = ("codebook.safetensors", "codebook.json")


def _store_folder(tokens: Path, meta: dict[str, Any]) -> Path | None:
    """The beat store a token folder was made from, if it can still be found."""
    raw = meta.get("store")
    if not raw:
        return None
    store = Path(raw)
    candidates = [store] if store.is_absolute() else [store, tokens.parent / store]
    return next((c for c in candidates if (c / "run.json").is_file()), None)


def copy_lineage(tokens: Path, out: Path) -> dict[str, Any]:
    """Copy the codebook of `tokens` into `out` and write `out/lineage.json`; return it."""
    for name in CODEBOOK_FILES:
        if not (tokens / name).is_file():
            raise HeartlmError(
                f"token folder has no {name}: cannot make a self-contained run", tokens
            )
        shutil.copy2(tokens / name, out / name)
    meta = parse_json_file(tokens / "tokens.json")
    store = _store_folder(tokens, meta)
    ingest = None
    if store is None:
        logger.warning(
            f"{tokens}: the beat store it was made from is not found; evaluate will accept "
            "token folders but not raw WFDB records"
        )
    else:
        ingest = read_run_json(store, "ingest")["config"]
    lineage = {
        "tokens": str(tokens),
        "store": None if store is None else str(store),
        "ingest": ingest,
        "rr_window": meta.get("rr_window"),
        "codebook_hash": meta.get("codebook_hash"),
        "vocab_size": meta.get("vocab_size"),
        "fs": meta.get("fs"),
        "window_samples": meta.get("window_samples"),
    }
    atomic_write_text(out / LINEAGE, json.dumps(lineage, indent=2) + "\n")
    return lineage


def read_lineage(run: Path) -> dict[str, Any]:
    return read_json(run, LINEAGE, f"no {LINEAGE}: not a fine-tuned heartlm run")


def read_finetune_info(run: Path) -> dict[str, Any]:
    """`finetune.json` of a fine-tuned run: task, window, splits, class weights, best step."""
    return read_json(run, FINETUNE_INFO, f"no {FINETUNE_INFO}: not a fine-tuned heartlm run")
