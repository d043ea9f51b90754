"""What a run carries to tokenize new records exactly like its training data.

A fine-tuned folder holds `codebook.safetensors` + `codebook.json` (copied from the token
folder) and `lineage.json`: the ingest settings of the beat store behind the tokens
(tokens run.json -> store run.json), the tokenizer settings that shape tokens (`rr_window`),
the codebook hash and the leads of the records it learnt from. `heartlm evaluate` and
`heartlm embed` read them back to ingest and tokenize raw WFDB records at the run's own
sampling rate and window (and say when a record's lead is not one of those); for a
pretrained run, which names its token folder instead, `run_lineage` reads the same from that
folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from heartlm.errors import HeartlmError
from heartlm.log import logger
from heartlm.outdir import atomic_write_text
from heartlm.runinfo import json_fields, parse_json_file, read_json, read_run_json

LINEAGE = "lineage.json"
FINETUNE_INFO = "finetune.json"
CODEBOOK_FILES = ("codebook.safetensors", "codebook.json")
_LINEAGE_TYPES: dict[str, Any] = {
    "tokens": str | None, "store": str | None, "ingest": dict | None, "rr_window": int | None,
    "codebook_hash": str | None, "vocab_size": int | None, "fs": float | None,
    "window_samples": int | None, "leads": list[str] | None,
}  # fmt: skip


def store_folder(tokens: Path, meta: dict[str, Any]) -> Path | None:
    """The beat store the token folder `tokens` was made from, if it can still be found:
    where its tokens.json's `store` says (a relative one from here, then from beside the
    token folder), or beside the token folder under its own name (the two moved together)."""
    raw = meta.get("store")
    if not isinstance(raw, str) or not raw:
        return None
    store = Path(raw)
    candidates = [store] if store.is_absolute() else [store, tokens.parent / store]
    candidates.append(tokens.parent / store.name)
    try:
        found = [
            c for c in candidates if (c / "store.json").is_file() and (c / "run.json").is_file()
        ]
    except (OSError, ValueError):  # a folder that cannot be entered; a NUL in the name
        return None
    return found[0] if found else None


def check_codebook(tokens: Path) -> None:
    """Refuse a token folder whose codebook a run could not carry: missing, unreadable, or
    not the one its tokens were made with. A run carries it to tokenize new records, so a
    broken or foreign one would only fail (or, foreign, silently mislead) in a later
    `evaluate` or `embed`; checked before training, so no run is trained for nothing."""
    from heartlm.tokens.codebook import Codebook

    for name in CODEBOOK_FILES:
        if not (tokens / name).is_file():
            raise HeartlmError(
                f"token folder has no {name}: cannot make a self-contained run", tokens
            )
    book = Codebook.load(tokens)
    made_with = parse_json_file(tokens / "tokens.json").get("codebook_hash")
    if made_with is not None and book.content_hash != made_with:
        raise HeartlmError(
            "its codebook is not the one its tokens were made with (tokens.json names "
            f"{str(made_with)[:12]}, codebook.json holds {book.content_hash[:12]})",
            tokens,
        )


def copy_lineage(tokens: Path, out: Path) -> dict[str, Any]:
    """Copy the codebook of `tokens` into `out` and write `out/lineage.json`; return it.
    Call check_codebook(tokens) first, before the run is trained."""
    lineage = describe(tokens)
    for name in CODEBOOK_FILES:
        shutil.copy2(tokens / name, out / name)
    atomic_write_text(out / LINEAGE, json.dumps(lineage, indent=2) + "\n")
    return lineage


def describe(tokens: Path) -> dict[str, Any]:
    """The lineage of a token folder: its store's ingest settings, rr_window, codebook."""
    meta = parse_json_file(tokens / "tokens.json")
    store = store_folder(tokens, meta)
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
        "leads": sorted({str(r.get("lead")) for r in meta.get("records", []) if r.get("lead")}),
    }
    _check_lineage(lineage, tokens / "tokens.json")
    return lineage


def read_lineage(run: Path) -> dict[str, Any]:
    lineage = read_json(run, LINEAGE, f"no {LINEAGE}: not a fine-tuned heartlm run")
    _check_lineage(lineage, run / LINEAGE)
    return lineage


def _check_lineage(lineage: dict[str, Any], path: Path) -> None:
    """Every field null or of its type, and `rr_window` one tokenize accepts: raw records
    are tokenized with it long after the run was made."""
    json_fields(lineage, _LINEAGE_TYPES, path)
    if lineage.get("rr_window") is not None and lineage["rr_window"] < 2:
        raise HeartlmError(f"rr_window {lineage['rr_window']} is below 2", path)


def read_finetune_info(run: Path) -> dict[str, Any]:
    """`finetune.json` of a fine-tuned run: task, window, splits, class weights, best step."""
    if not run.exists():
        raise HeartlmError("does not exist", run)
    info = read_json(run, FINETUNE_INFO, f"no {FINETUNE_INFO}: not a fine-tuned heartlm run")
    window = info.get("window")
    if info.get("task") not in ("beats", "afib") or type(window) is not int:  # not a bool
        raise HeartlmError(f"{FINETUNE_INFO} lacks the run's task or window", run / FINETUNE_INFO)
    if window < 1:
        raise HeartlmError(f"a window of {window} beats (at least 1)", run / FINETUNE_INFO)
    return info


def run_lineage(run: Path) -> tuple[dict[str, Any], Path]:
    """(lineage, codebook file) of a fine-tuned run, or of a pretrained run from the token
    folder its config.json names."""
    if (run / LINEAGE).is_file():
        return read_lineage(run), run / CODEBOOK_FILES[0]
    tokens = Path(read_json(run, "config.json", "no config.json: not an exported heartlm run")
                  .get("tokens") or "")  # fmt: skip
    if not (tokens / "tokens.json").is_file():
        raise HeartlmError(
            f"has no {LINEAGE}, and the token folder it was trained on ({tokens}) is gone: "
            "give a token folder made with its codebook",
            run,
        )
    return describe(tokens), tokens / CODEBOOK_FILES[0]
