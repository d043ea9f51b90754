"""Where the transformers' fold models miss beats that the floor finds: per DS1 record, the
S, V and F beats (F where the answers hold it) each recipe found (its seeds summed, four
views) beside the LightGBM floor refitted on the same folds.

    python benchmarks/fold_misses_by_record.py \\
        benchmarks/results/h100/model_study/select_finetune_runs_round51.tar.gz \\
        WORK/tok_beats_leads_ectopy --out benchmarks/results/cpu/fold_misses_round51.json

The tarball is a `select` call's (`model_study_call.sh` brings it back: each fold model's
`evaluate` answers). The token folder is a work folder's (a `--quick` one serves: the
patient-relative columns the floor reads do not depend on the codebook but for
`code_share`). DS2 is not read.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import tarfile
from pathlib import Path
from typing import Any

import model_configs as cfg
import numpy as np
from model_beats import synthetic_keys
from model_recipes import folder_synthetic

CLASSES = ("S", "V", "F")
RUN = re.compile(r"^sel_(?P<recipe>.+)_fold(?P<fold>\d)_s(?P<seed>\d+)_[0-9a-f]{8}$")


def add_found(counts: dict[str, collections.Counter], per_record: list[dict[str, Any]]) -> None:
    """Add `metrics.per_record_beats` rows (as `evaluate` reports them) to `counts`: by record,
    "{class}_support" and "{class}_found"."""
    for row in per_record:
        for name in CLASSES:
            if row.get(name, {}).get("support"):
                c = counts[row["record"]]
                c[f"{name}_support"] += row[name]["support"]
                c[f"{name}_found"] += round(row[name]["se"] * row[name]["support"])


def transformer_found(tarball: Path) -> dict[str, dict[str, collections.Counter]]:
    """recipe -> record -> counts (add_found), over both folds and every seed, from each fold
    model's four-view answer on the other fold."""
    found: dict[str, dict[str, collections.Counter]] = collections.defaultdict(
        lambda: collections.defaultdict(collections.Counter)
    )
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if len(parts) < 3 or parts[-3] != ".evaluations" or not member.name.endswith(".json"):
                continue
            run = RUN.match(parts[-2])
            if run is None or parts[-1] == "finetune.json":
                continue
            answer = json.load(tar.extractfile(member))
            command = answer.get("command", "")
            if " tok_beats " not in f" {command} " or "--ensemble" in command:
                continue
            if f"--views {cfg.VIEWS}" not in command:
                continue
            add_found(found[run["recipe"]], answer["report"]["per_record"])
    return found


def floor_found(tokens: Path, folder: str) -> dict[str, collections.Counter]:
    """The floor's counts by record (add_found), trained on each fold (with the folder's
    synthetic patients) and scored on the other, seeds cfg.SELECT_SEEDS summed."""
    import tree_floor

    from heartlm.labelled import metrics
    from heartlm.train.data import load_tokens

    data = load_tokens(tokens)
    synthetic = synthetic_keys(data, folder_synthetic(folder))
    x = tree_floor.beat_inputs(data, "relative")
    aami = np.asarray(data.aami).astype(np.int64)
    names = tree_floor.record_keys(data)
    found: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for k in (0, 1):
        train = [*cfg.FOLDS[k], *synthetic]
        test = [f"mitdb/{r}" for r in cfg.FOLDS[1 - k]]
        tr = tree_floor.labelled_beats(data, tree_floor.record_indices(data, train), aami)
        te = tree_floor.labelled_beats(data, tree_floor.record_indices(data, test), aami)
        record = np.searchsorted(data.boundaries, te, side="right") - 1
        for seed in cfg.SELECT_SEEDS:
            model = tree_floor.fit_tree(x[tr], aami[tr], 5, seed, 0)
            predicted = model.predict(x[te]).reshape(len(te), -1).argmax(axis=1)
            add_found(found, metrics.per_record_beats(aami[te], predicted, record, names))
    return found


def counted(found: dict[str, dict[str, collections.Counter]]) -> list[str]:
    """The classes every recipe's answers count (`evaluate` reports F by record since the
    twenty-sixth session; older answers hold S and V only)."""
    return [n for n in CLASSES
            if all(any(c[f"{n}_support"] for c in f.values()) for f in found.values())]  # fmt: skip


def table(found: dict[str, Any], floor: dict[str, Any], classes: list[str], least: int = 20) -> str:
    recipes = sorted(found)
    lines = []
    for name in classes:
        lines += [f"## {name} beats found by record (seeds summed)", "",
                  f"| record | {name} beats | {' | '.join(recipes)} | floor |",
                  f"| --- | --- |{' --- |' * (len(recipes) + 1)}"]  # fmt: skip
        for record in sorted(floor):
            support = floor[record][f"{name}_support"]
            if support < least:
                continue
            cells = [str(found[r][record][f"{name}_found"]) for r in recipes]
            lines.append(f"| {record} | {support} | {' | '.join(cells)} | "
                         f"{floor[record][f'{name}_found']} |")  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tarball", type=Path)
    parser.add_argument("tokens", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="JSON; a .md table beside it")
    args = parser.parse_args()
    found = transformer_found(args.tarball)
    if not found:
        raise SystemExit(f"{args.tarball}: no fold model's four-view answer on tok_beats")
    floor = floor_found(args.tokens, args.tokens.name)
    classes = counted(found)
    for counts in found.values():  # both summed over the same seeds
        for record, c in counts.items():
            if any(c[f"{n}_support"] != floor[record][f"{n}_support"] for n in classes):
                raise SystemExit(f"{args.tokens}: {record}'s beats differ from the tarball's")
    out = {"tarball": args.tarball.name, "tokens": args.tokens.name,
           "seeds": list(cfg.SELECT_SEEDS),
           "recipes": {r: {k: dict(v) for k, v in f.items()} for r, f in found.items()},
           "floor": {k: dict(v) for k, v in floor.items()}}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(table(found, floor, classes))
    print(table(found, floor, classes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
