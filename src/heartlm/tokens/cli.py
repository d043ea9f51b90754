"""`heartlm tokenize STORE --out TOKENS`: command-line front end of `heartlm.tokens.tokenize`."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from heartlm.errors import HeartlmError
from heartlm.settings import setting
from heartlm.tokens.pipeline import TokenizeConfig, tokenize


@dataclass
class TokenizeCommand:
    store: Path | None = setting(positional=True, required=True, metavar="STORE")
    """beat store folder (from `heartlm ingest`)"""
    out: Path | None = setting(required=True, metavar="TOKENS")
    """token folder to write"""
    tokenize: TokenizeConfig = setting(factory=TokenizeConfig)
    json: bool = False
    """print the summary as JSON"""


Config = TokenizeCommand


def run(cfg: TokenizeCommand) -> int:
    try:
        summary = tokenize(cfg.store, cfg.out, cfg.tokenize)
    except ValueError as exc:
        raise HeartlmError(str(exc)) from None
    if cfg.json:
        print(json.dumps(summary, indent=1, default=float))
        return 0
    c = summary["counts"]
    print(
        f"{cfg.out}: {c['beats']} beats of {c['records']} records,"
        f" {c['codes_used']} codes used, {c['unk_morph']} UNK morphology,"
        f" {c['unk_rhythm']} UNK rhythm, {summary['beats_per_s']:.0f} beats/s"
    )
    if "decode" in summary:
        from heartlm.tokens.decode import format_table

        sys.stdout.write(format_table(summary["decode"]))
    return 0
