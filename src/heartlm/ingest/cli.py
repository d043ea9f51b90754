"""`heartlm ingest SRC... --out STORE`: the command-line face of `heartlm.ingest.ingest`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from heartlm.ingest.config import IngestConfig
from heartlm.settings import setting


@dataclass
class IngestCommand:
    sources: list[Path] | None = setting(positional=True, required=True, metavar="SRC")
    """WFDB record paths or folders of records"""
    out: Path | None = setting(required=True, metavar="STORE")
    """beat store folder to write"""
    ingest: IngestConfig = setting(factory=IngestConfig)
    overwrite: bool = False
    """replace an existing STORE"""


Config = IngestCommand


def run(cfg: IngestCommand) -> int:
    from heartlm.ingest.pipeline import ingest

    named = cfg.ingest.annotations is not None
    ingest(cfg.sources, cfg.out, cfg.ingest, overwrite=cfg.overwrite, named_annotations=named)
    return 0
