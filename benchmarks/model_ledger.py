"""The DS2 ledger of the model study: the recipes earlier rounds scored on DS2, which the final
stages do not score again."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from heartlm.tokens.codebook import VERSION as CODEBOOK_VERSION

DS2_LEDGER: Path | None = Path(__file__).resolve().parent / "ds2_scored.json"
"""Every recipe a committed round scored on DS2 (`python benchmarks/pool_rounds.py --ledger
benchmarks/ds2_scored.json benchmarks/results/h100/model_study/final*_round*.json` after a
round's files are committed). `final` and `final_afib` stop before training when the folds
chose a recipe listed there (the other initialisation's is still scored; both listed: the
stage stops): rounds 16-20 re-scored one recipe five times, each time from new pretraining
runs, and DS2 is a test set. `--replicate` scores it again on purpose (pool the rounds with
pool_rounds.py). A recipe is its name and fine-tuning flags: a pretraining variant changed
under the same name would need `--replicate` (a stop, never a silent re-read of DS2). The
codebook format is part of the recipe: a new format brings new feature columns, so a recipe
scored on an older one is a new recipe on this one (entries without `codebook_version` were
scored on format 3: pool_rounds.UNRECORDED_CODEBOOK)."""


def _ledger_key(entry: dict[str, Any]) -> tuple[str, str, list[str], int]:
    from pool_rounds import UNRECORDED_CODEBOOK

    return (entry["stage"], entry["config"], entry["flags"],
            entry.get("codebook_version", UNRECORDED_CODEBOOK))  # fmt: skip


def scored_rounds(stage: str, init: str, name: str, flags: list[str]) -> list[str]:
    """The rounds DS2_LEDGER lists `init`'s recipe `name` (with `flags`) under for `stage`."""
    if DS2_LEDGER is None or not DS2_LEDGER.is_file():
        return []
    key = (stage, f"{init}: {name}", flags, CODEBOOK_VERSION)
    return [e["round"] for e in json.loads(DS2_LEDGER.read_text()) if _ledger_key(e) == key]


def unscored(stage: str, chosen: dict[str, str], flags: dict[str, list[str]],
             replicate: bool) -> dict[str, str]:  # fmt: skip
    """`chosen` (init -> recipe) without the recipes DS2_LEDGER lists for `stage` (`flags`:
    init -> the recipe's flags as the round files record them): their DS2 scores stand in
    the earlier rounds. SystemExit when none is left."""
    if replicate:
        return dict(chosen)
    left = {}
    for init, name in chosen.items():
        if rounds := scored_rounds(stage, init, name, flags[init]):
            print(f"{stage}: {init}: {name} was scored on DS2 in round {', '.join(rounds)} "
                  f"({DS2_LEDGER.name}): not scored again", file=sys.stderr)  # fmt: skip
        else:
            left[init] = name
    if not left:
        raise SystemExit(
            f"{stage}: every recipe the folds chose was scored on DS2 before; let the folds "
            "choose a new one, or pass --replicate to score them again (then pool the "
            "rounds: benchmarks/pool_rounds.py)"
        )
    return left
