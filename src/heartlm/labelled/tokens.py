"""A run's input data: a token folder as is, or raw WFDB records ingested and tokenized the
way the run's own training data was (same codebook, beat window and sampling rate; records
at any other rate are resampled by ingest). `heartlm evaluate` and `heartlm embed` use it."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from heartlm.errors import HeartlmError
from heartlm.log import logger


def is_token_folder(path: Path) -> bool:
    return (path / "tokens.json").is_file()


@contextlib.contextmanager
def token_folder(
    data: Path,
    run: Path,
    lineage: dict[str, Any],
    overrides: dict[str, Any],
    codebook: Path | None = None,
) -> Iterator[Path]:
    """Yield a token folder for `data`; WFDB records are tokenized in a temporary folder
    with `codebook` (default: the run's own `codebook.safetensors`)."""
    if is_token_folder(data):
        from heartlm.runinfo import parse_json_file

        records = parse_json_file(data / "tokens.json").get("records")
        records = records if isinstance(records, list) else []
        leads = [str(r["lead"]) for r in records if isinstance(r, dict) and r.get("lead")]
        hint = "heartlm ingest --lead chooses the lead before tokenizing"
        _warn_of_untrained_leads(data, run, leads, lineage.get("leads"), hint)
        yield data
        return
    if not data.exists():
        raise HeartlmError("no such token folder or WFDB folder", data)
    if (data / "boundaries.bin").is_file():
        raise HeartlmError(
            "holds token shards but no tokens.json: an incomplete token folder", data
        )
    from heartlm.ingest import IngestConfig, ingest
    from heartlm.tokens import TokenizeConfig, tokenize

    if not lineage.get("ingest"):
        raise HeartlmError(
            "this run does not know the ingest settings of its training data; "
            "evaluate it on a token folder instead",
            run,
        )
    settings = {**lineage["ingest"], **{k: v for k, v in overrides.items() if v is not None}}
    try:
        config = IngestConfig.from_dict(settings)
    except (TypeError, ValueError) as exc:
        raise HeartlmError(f"unusable ingest settings in lineage.json ({exc})", run) from None
    with tempfile.TemporaryDirectory(prefix="heartlm-eval-") as tmp:
        store, tokens = Path(tmp) / "store", Path(tmp) / "tokens"
        logger.info(f"{data}: ingesting at {config.fs:g} Hz and tokenizing with {run}'s codebook")
        ingest([data], store, config)
        from heartlm.store import BeatStore

        leads = [r.lead for r in BeatStore(store).records]
        _warn_of_untrained_leads(data, run, leads, lineage.get("leads"), "--lead chooses the lead")
        tok = TokenizeConfig(codebook=codebook or run / "codebook.safetensors")
        if lineage.get("rr_window"):
            tok.rr_window = int(lineage["rr_window"])
        tokenize(store, tokens, tok)
        yield tokens


def _warn_of_untrained_leads(
    data: Path, run: Path, leads: list[str], trained: list[str] | None, hint: str
) -> None:
    """One line, ending in `hint`, when records were read from a lead the run never trained
    on (a model of MLII beats shown V1 calls many of them V)."""
    from heartlm.ingest.leads import lead_key

    if not trained or not leads:  # a run or tokens made before leads were recorded
        return

    def family(name: str) -> str:  # modified lead II (MIT-BIH's MLII) is lead II
        return {"MLII": "II"}.get(lead_key(name), lead_key(name))

    known = {family(name) for name in trained}
    other = sorted({lead for lead in leads if family(lead) not in known})
    if other:
        logger.warning(
            f"{data}: {sum(lead in other for lead in leads)} of {len(leads)} records read lead "
            f"{', '.join(other)}, which {run} was not trained on ({', '.join(trained)}): its "
            f"calls there may be poor; {hint}"
        )


@dataclass(frozen=True, eq=False)
class BeatTimes:
    """Where the beats of a token folder lie in their records (`beat_times`)."""

    seconds: np.ndarray  # (n_beats,) float64 R-peak time from its record's start
    record_fs: list[float]  # each record's sampling rate as read (before resampling)

    def source_samples(self, beats: np.ndarray, record: int) -> np.ndarray:
        """The sample numbers, at the record's own rate, of `beats` (global indices) of
        record `record`."""
        return np.rint(self.seconds[beats] * self.record_fs[record]).astype(np.int64)


def beat_times(meta: dict[str, Any], tokens: Path) -> BeatTimes | None:
    """Each beat's R-peak time, read from the beat store the token folder `tokens` was made
    from (`lineage.store_folder`); None, said in one line, where that store is gone,
    unreadable or no longer holds these records' beats (re-ingested since)."""
    from heartlm.labelled.lineage import store_folder
    from heartlm.store import BeatStore

    folder = store_folder(tokens, meta)
    if folder is None:
        if meta.get("store"):
            logger.info(f"{tokens}: its beat store ({meta['store']!r}) is not found; no beat times")
        return None
    try:
        store = BeatStore(folder)
    except (HeartlmError, OSError) as exc:
        logger.info(f"{folder}: the beat store of {tokens} cannot be read ({exc}); no beat times")
        return None
    ours = [(r.get("name"), r.get("start"), r.get("n_beats")) for r in meta.get("records", [])]
    theirs = [(r.name, r.start, r.n_beats) for r in store.records]
    if store.n_beats != meta.get("n_beats") or ours != theirs:
        logger.info(f"{folder}: no longer the beat store of {tokens}; no beat times")
        return None
    seconds = np.asarray(store.table["sample"], dtype=np.float64) / store.fs
    return BeatTimes(seconds, [r.fs_source for r in store.records])
