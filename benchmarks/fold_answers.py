"""The DS1 fold table of a `select` call that its time limit stopped before it wrote
select.json: every recipe's beat evaluations that the call kept (finetune_runs.tar.gz),
summed over both folds and the seeds, one row per recipe and reading (views, per-beat
network share), with the seeds' S and V F1 apart. DS2 is not read: `select` scores folds only.

    python benchmarks/fold_answers.py CALL/finetune_runs.tar.gz [CALL2/...] --out folds_roundNN.md

Several calls' answers make one table (a twin's fold runs beside its parent's, from two
calls); an answer two of them both kept (the same run and command) counts once.

The held-out synthetic patients and the floor are not here (a stopped call may lack them);
the columns are the fold table's, not the selection rule's margins.
"""

from __future__ import annotations

import argparse
import re
import sys
import tarfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from final_from_answers import kept_answers
from model_beats import at_offset, sum_reports

from heartlm.outdir import atomic_write_bytes

RUN = re.compile(r"^sel_(?P<recipe>.+)_fold(?P<fold>\d)_s(?P<seed>\d+)_[0-9a-f]{8}$")
CLASSES = ("S", "V", "F")
V_OFFSET = 1.0
"""The V offset of the recipes chosen since round 75, read beside each reading's own."""


class NotASelectCall(ValueError):
    """The tarball holds no fold answer of a `select` run."""


def reading_of(command: str) -> str:
    """What follows an evaluation's records: how the run's answer was read."""
    words = command.split()
    start = words.index("--views") if "--views" in words else len(words)
    return " ".join(words[start:]) or "--views 1"


def fold_answers(kept: list[tuple[str, dict[str, Any]]]) -> dict[tuple[str, str], dict]:
    """(recipe, reading) -> {seed: [reports]} of every kept answer on the folds' tokens."""
    found: dict[tuple[str, str], dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    seen: set[tuple[str, str]] = set()
    for name, answer in kept:
        match = RUN.match(name)
        command = answer.get("command", "")
        if not match or " tok_beats" not in command or "--records" not in command:
            continue
        if (name, command) in seen:
            continue
        seen.add((name, command))
        key = (match["recipe"], reading_of(command))
        found[key][int(match["seed"])].append(answer["report"])
    if not found:
        raise NotASelectCall("no fold answer of a `select` run")
    return found


def _f1(report: dict[str, Any], cls: str) -> float:
    return float(report["per_class"][cls]["f1"])


def table(found: dict[tuple[str, str], dict[int, list[dict]]]) -> str:
    lines = [
        "| recipe | reading | folds × seeds | accuracy | S F1 | V F1 | V F1 at V +1 | F F1 "
        "| S F1 by seed | V F1 by seed |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (recipe, reading), by_seed in sorted(found.items()):
        reports = [rep for seed in sorted(by_seed) for rep in by_seed[seed]]
        summed = sum_reports(reports)
        offsets = [at_offset(rep, "V", V_OFFSET) for rep in reports if "offset_counts" in rep]
        v_offset = f"{_f1(sum_reports(offsets), 'V'):.3f}" if offsets else "n/a"
        seeds = {seed: sum_reports(reps) for seed, reps in sorted(by_seed.items())}
        by = {cls: " / ".join(f"{_f1(rep, cls):.3f}" for rep in seeds.values()) for cls in "SV"}
        cells = [f"{_f1(summed, cls):.3f}" for cls in CLASSES]
        lines.append(f"| {recipe} | `{reading}` | {len(reports)} | {summed['accuracy']:.4f} | "
                     f"{cells[0]} | {cells[1]} | {v_offset} | {cells[2]} | {by['S']} | "
                     f"{by['V']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("answers", type=Path, nargs="+",
                        help="the calls' finetune_runs.tar.gz")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="the Markdown table to write")
    args = parser.parse_args(argv)
    kept = []
    for path in args.answers:
        try:
            kept += kept_answers(path)
        except (OSError, tarfile.TarError, ValueError) as exc:  # ValueError: JSON
            print(f"fold_answers: {path}: cannot read it ({exc})", file=sys.stderr)
            return 2
    names = ", ".join(map(str, args.answers))
    try:
        text = f"# DS1 folds from kept answers: {names}\n\n{table(fold_answers(kept))}"
    except (ValueError, KeyError, TypeError) as exc:  # NotASelectCall, missing fields
        print(f"fold_answers: {names}: not a select call's answers ({exc})", file=sys.stderr)
        return 2
    try:
        atomic_write_bytes(args.out, text.encode())
    except OSError as exc:
        print(f"fold_answers: {args.out}: cannot write it ({exc.strerror or exc})",
              file=sys.stderr)  # fmt: skip
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
