"""The DS1 fold table of a `select` call that its time limit stopped before it wrote
select.json: every recipe's beat evaluations that the call kept (finetune_runs.tar.gz),
summed over both folds and the seeds, one row per recipe, label share and reading (views,
per-beat network share), with the seeds' S and V F1 apart. DS2 is not read: `select` scores
folds only.

    python benchmarks/fold_answers.py CALL/finetune_runs.tar.gz [CALL2/...] --out folds_roundNN.md

Several calls' answers make one table (a twin's fold runs beside its parent's, from two
calls); an answer two of them both kept (the same run and command) counts once. Each run's
label share is read from its finetune.json in the tarball, so calls at different shares
(`model_study.py --select-fraction`) keep their rows apart.

Left out: the held-out synthetic patients and the floor (a stopped call may lack them), and
the answers of two seeds' models together (one model, not a seed). The columns are the fold
table's, not the selection rule's margins.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

from final_from_answers import kept_answers
from model_beats import at_offset, sum_reports

from heartlm.outdir import atomic_write_bytes

RUN = re.compile(r"^sel_(?P<recipe>.+)_fold(?P<fold>\d)_s(?P<seed>\d+)_[0-9a-f]{8}$")
FOLD_TOKENS = "tok_beats"
CLASSES = ("S", "V", "F")
V_OFFSET = 1.0
"""The V offset of the recipes chosen since round 75, read beside each reading's own."""

Found = dict[tuple[str, float, str], dict[int, list[dict[str, Any]]]]
"""(recipe, label share, reading) -> seed -> the folds' reports."""


class NotASelectCall(ValueError):
    """The tarball holds no fold answer of a `select` run."""


def label_shares(tarball: Path) -> dict[str, float]:
    """run -> the share of its training fold's labels, from each `select` run's finetune.json."""
    shares = {}
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            path = Path(member.name)
            if member.isfile() and path.name == "finetune.json" and RUN.match(path.parent.name):
                summary = json.load(tar.extractfile(member))
                shares[path.parent.name] = float(summary["label_fraction"])
    return shares


def reading_of(words: list[str]) -> str:
    """What follows an evaluation's records: how the run's answer was read."""
    start = words.index("--views") if "--views" in words else len(words)
    return " ".join(words[start:]) or "--views 1"


def fold_answers(kept: list[tuple[str, dict[str, Any]]], shares: dict[str, float]) -> Found:
    """Every kept answer of one `select` run on the folds' tokens, by recipe, share and
    reading."""
    found: Found = defaultdict(lambda: defaultdict(list))
    seen: set[tuple[str, str]] = set()
    for name, answer in kept:
        match = RUN.match(name)
        command = answer.get("command", "")
        words = command.split()
        data = words[words.index(name) + 1 : words.index(name) + 2] if name in words else []
        if (not match or data != [FOLD_TOKENS] or "--records" not in words
                or "--ensemble" in words or (name, command) in seen):  # fmt: skip
            continue
        seen.add((name, command))
        if name not in shares:
            raise NotASelectCall(f"{name}: no finetune.json tells its label share")
        found[(match["recipe"], shares[name], reading_of(words))][int(match["seed"])].append(
            answer["report"]
        )
    if not found:
        raise NotASelectCall("no fold answer of a `select` run")
    return found


def _f1(report: dict[str, Any], cls: str) -> float:
    return float(report["per_class"][cls]["f1"])


def table(found: Found) -> str:
    lines = [
        "| recipe | labels | reading | folds × seeds | accuracy | S F1 | V F1 | V F1 at V +1 "
        "| F F1 | S F1 by seed | V F1 by seed |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (recipe, share, reading), by_seed in sorted(found.items()):
        reports = [rep for seed in sorted(by_seed) for rep in by_seed[seed]]
        summed = sum_reports(reports)
        offsets = [at_offset(rep, "V", V_OFFSET) for rep in reports if "offset_counts" in rep]
        v_offset = f"{_f1(sum_reports(offsets), 'V'):.3f}" if offsets else "n/a"
        seeds = {seed: sum_reports(reps) for seed, reps in sorted(by_seed.items())}
        by = {cls: " / ".join(f"{_f1(rep, cls):.3f}" for rep in seeds.values()) for cls in "SV"}
        cells = [f"{_f1(summed, cls):.3f}" for cls in CLASSES]
        lines.append(f"| {recipe} | {share:.0%} | `{reading}` | {len(reports)} | "
                     f"{summed['accuracy']:.4f} | {cells[0]} | {cells[1]} | {v_offset} | "
                     f"{cells[2]} | {by['S']} | {by['V']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("answers", type=Path, nargs="+",
                        help="the calls' finetune_runs.tar.gz")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="the Markdown table to write")
    args = parser.parse_args(argv)
    kept, shares = [], {}
    for path in args.answers:
        try:
            kept += kept_answers(path)
            shares |= label_shares(path)
        except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:  # a cut-off tarball too
            print(f"fold_answers: {path}: cannot read it ({exc})", file=sys.stderr)
            return 2
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSON, fields
            print(f"fold_answers: {path}: not a call's kept answers ({exc!r})", file=sys.stderr)
            return 2
    names = ", ".join(map(str, args.answers))
    try:
        text = f"# DS1 folds from kept answers: {names}\n\n{table(fold_answers(kept, shares))}"
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
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
