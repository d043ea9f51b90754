"""`heartlm synth OUT`: write a synthetic, labelled ECG corpus as WFDB records."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from heartlm.settings import setting
from heartlm.synth.corpus import SynthConfig, write_config


@dataclass
class SynthCommand:
    out: Path | None = setting(positional=True, required=True, metavar="OUT")
    """output folder for the records"""
    corpus: SynthConfig = setting(factory=SynthConfig)
    workers: int | None = None
    """parallel processes (default: all cores)"""
    overwrite: bool = False
    """replace an existing OUT"""
    json: bool = False
    """print run.json's counts as JSON"""


Config = SynthCommand


def run(cfg: SynthCommand) -> int:
    info = write_config(cfg.out, cfg.corpus, workers=cfg.workers, overwrite=cfg.overwrite)
    counts = info["counts"]
    if cfg.json:
        json.dump(counts, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        classes = " ".join(f"{k}={v}" for k, v in counts["classes"].items())
        print(f"{cfg.out}: {counts['records']} records, {counts['beats']} beats ({classes})")
    return 0
