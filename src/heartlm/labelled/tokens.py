"""A run's input data: a token folder as is, or raw WFDB records ingested and tokenized the
way the run's own training data was (same codebook, beat window and sampling rate; records
at any other rate are resampled by ingest). `heartlm evaluate` and `heartlm embed` use it."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
        _warn_of_untrained_leads(data, run, store, lineage.get("leads"))
        tok = TokenizeConfig(codebook=codebook or run / "codebook.safetensors")
        if lineage.get("rr_window"):
            tok.rr_window = int(lineage["rr_window"])
        tokenize(store, tokens, tok)
        yield tokens


def _warn_of_untrained_leads(data: Path, run: Path, store: Path, trained: list[str] | None) -> None:
    """One line when records were read from a lead the run never trained on (a model of
    MLII beats shown V1 calls many of them V): `--lead` picks another."""
    from heartlm.ingest.leads import lead_key
    from heartlm.store import BeatStore

    if not trained:  # a run made before lineage.json named its leads
        return

    def family(name: str) -> str:  # modified lead II (MIT-BIH's MLII) is lead II
        return {"MLII": "II"}.get(lead_key(name), lead_key(name))

    known = {family(name) for name in trained}
    leads = [r.lead for r in BeatStore(store).records]
    other = sorted({lead for lead in leads if family(lead) not in known})
    if other:
        logger.warning(
            f"{data}: {sum(lead in other for lead in leads)} of {len(leads)} records read lead "
            f"{', '.join(other)}, which {run} was not trained on ({', '.join(trained)}): its "
            "calls there may be poor; --lead chooses the lead"
        )
