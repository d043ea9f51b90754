"""Pool the DS2 scores of one recipe over the model-study rounds that scored it.

Several rounds of benchmarks/model_study.py re-scored an unchanged fine-tuning recipe on DS2,
each time from new pretraining runs (the folds chose it again). One round's three seeds then
understate the spread: this prints, for each recipe, initialisation and label share, the
mean and standard deviation over every seed of every round, beside each round's own mean.

    python benchmarks/pool_rounds.py benchmarks/results/h100/model_study/final_round{16..20}.json
    python benchmarks/pool_rounds.py benchmarks/results/h100/model_study/final_afib_round1{6,9}.json

Evaluation views (`evaluate --views`) are part of the recipe here: one view and four views
are pooled apart. The tree floor is pooled likewise: it is nearly the same in every round
(seeded LightGBM; its inputs' columns changed little between rounds), so its "seeds" count
repeats rather than new draws.

`--ledger FILE` writes instead the list of recipes the files scored on DS2 (round, stage,
config, flags): model_study.py's `final` stages refuse to score one of them again unless
asked (`--replicate`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import model_flags
import numpy as np

from heartlm.outdir import atomic_write_text

UNRECORDED_CODEBOOK = 3
"""The codebook format of a round file without `codebook_version` (written before format 4)."""

BEAT_COLUMNS = ("accuracy", "S", "V", "F")
VIEWS_SUFFIX = re.compile(
    f"{model_flags.VIEWS_SUFFIX}"
    f"(?=(?:{model_flags.SHARE_SUFFIX})?(?:{model_flags.OFFSET_SUFFIX})?$)"
)
"""A recipe name's views, which pool as one recipe; its per-beat network's share
(`_share0.75`) and class offset (`_offsetV+1`) stay."""


def _recipes(result: dict) -> dict[str, str]:
    """init -> the recipe's flags as one string (a round's `config`)."""
    out = {}
    for key, flags in result.get("config", {}).items():
        init, _, name = key.partition(": ")
        cut = next((i for i, f in enumerate(flags) if f.startswith("(evaluate")), len(flags))
        flags = " ".join(flags[:cut])  # the views are a column of their own
        out[init] = f"{VIEWS_SUFFIX.sub('', name)} [{flags}]"
    return out


def round_label(path: Path) -> str:
    """The round number a result file's name carries (its stem where it has none)."""
    found = re.search(r"round(\d+)", path.name)
    return found.group(1) if found else path.stem


def ledger(paths: list[Path]) -> list[dict]:
    """One entry per recipe each round scored on DS2, in the study's own terms; a round whose
    label shares were scored by separate calls (final_round76.json, final_round76_share1.json)
    lists its recipe once."""
    entries = []
    for path in paths:
        result = json.loads(path.read_text())
        codebook = result.get("codebook_version", UNRECORDED_CODEBOOK)
        for config, flags in result.get("config", {}).items():
            entry = {
                "round": round_label(path),
                "stage": result.get("stage", "final"),
                "config": config,
                "flags": flags,
                "codebook_version": codebook,
            }
            if entry not in entries:
                entries.append(entry)
    return sorted(entries, key=lambda e: (int(e["round"]) if e["round"].isdigit() else 0,
                                          e["stage"], e["config"]))  # fmt: skip


def scores_of(entry: dict, task: str) -> dict[str, float]:
    """A scored row's columns: AFIB window F1 (`F1`), or accuracy and each beat class's F1."""
    if task == "afib":
        return {"F1": entry["afib"]["f1"]}
    got = {"accuracy": entry["accuracy"]}
    got.update({c: entry["per_class"][c]["f1"] for c in BEAT_COLUMNS[1:]})
    return got


def pool(paths: list[Path]) -> tuple[str, dict]:
    task, codebook = "", None
    groups: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for path in paths:
        result = json.loads(path.read_text())
        kind = "afib" if result.get("afib") else "beats"
        if task and kind != task:
            raise ValueError(f"{path.name} holds {kind} scores, the files before it {task}")
        task = kind
        # Another codebook format reads other feature columns: another recipe (the ledger too).
        version = result.get("codebook_version", UNRECORDED_CODEBOOK)
        if codebook is not None and version != codebook:
            raise ValueError(f"{path.name} was scored on codebook format {version}, the files "
                             f"before it on {codebook}")  # fmt: skip
        codebook = version
        recipes = _recipes(result)
        label = round_label(path)
        for entry in result[task]:
            if "ensemble" in entry:  # one reading of the seeds' models together, not a seed
                continue
            init = entry["init"]
            recipe = recipes.get(init, "floor" if "floor" in init else "?")
            # AFIB reports name their views from round 23 on; before, they had one.
            views = entry.get("views") or (1 if task == "afib" else None)
            key = (init, recipe, views, entry["label_fraction"])
            for column, value in scores_of(entry, task).items():
                groups[key][column].append((label, value))
    return task, groups


def markdown(task: str, groups: dict) -> str:
    columns = ("F1",) if task == "afib" else BEAT_COLUMNS
    head = ["labels", "init", "views", "rounds", "seeds", *[f"{c} pooled" for c in columns],
            *[f"{c} per round" for c in columns[:2]]]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    recipes = sorted({k[1] for k in groups if k[1] not in ("floor", "?")})
    for key in sorted(groups, key=lambda k: (-k[3], k[0], str(k[1]), str(k[2]))):
        init, recipe, views, fraction = key
        by = groups[key]
        rounds = sorted({r for r, _ in by[columns[0]]}, key=lambda r: (len(r), r))
        pooled = [f"{np.mean([v for _, v in by[c]]):.3f} ± {np.std([v for _, v in by[c]]):.3f}"
                  for c in columns]  # fmt: skip
        per_round = [
            ", ".join(f"{np.mean([v for r, v in by[c] if r == rr]):.3f}" for rr in rounds)
            for c in columns[:2]
        ]
        name = f"{init} (recipe {recipes.index(recipe) + 1})" if recipe in recipes else init
        row = [f"{fraction:.0%}", name, str(views or "–"), ", ".join(rounds),
               str(len(by[columns[0]])), *pooled, *per_round]  # fmt: skip
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Recipes:"] + [f"{i + 1}. {r}" for i, r in enumerate(recipes)]
    lines.append("\nStandard deviations are over every seed pooled (numpy's, ddof 0, as the "
                 "study's tables).")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", type=Path, nargs="+", help="final[_afib]_round*.json files")
    ap.add_argument("--ledger", type=Path, help="write the scored recipes here instead")
    args = ap.parse_args()
    try:
        if args.ledger:
            atomic_write_text(args.ledger, json.dumps(ledger(args.files), indent=1) + "\n")
            return 0
        task, groups = pool(args.files)
    except (OSError, ValueError, KeyError) as exc:
        print(f"pool_rounds: cannot read the rounds ({exc})", file=sys.stderr)
        return 2
    sys.stdout.write(markdown(task, groups))
    return 0


if __name__ == "__main__":
    sys.exit(main())
