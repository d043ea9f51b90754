"""Issue 12's test of pretraining, round by round: in each model-study `final` file that scored
both initialisations, does the pretrained model lead scratch at 10 % and at 1 % of DS1's labels
by more than the seed spread (the larger of the two standard deviations, numpy's, ddof 0, as
the tables print them) on S and V F1 (beats) or window F1 (AFIB)?

    python benchmarks/pretraining_pays.py benchmarks/results/h100/model_study/final*_round*.json \
        --out benchmarks/results/pretraining_pays.md

Pairs scored in one file are compared, and the rounds of SCRATCH_FROM: a round that trained
only the pretrained twin of an earlier round's recipe, with the same code and tokens, is
compared with that round's scratch rows. Other rounds that scored one initialisation (round
62's pretrained rows against round 61's scratch) are left out, though their README sections
compare them.

A second reading pairs the runs by seed. `finetune --label-fraction` draws the labelled beats
from the training seed (heartlm.labelled.windows.keep_label_fraction), so seed s of either
initialisation learns from the same labels, and pairing takes the draw out of a spread that
is wide at 10 % and 1 % (round 75's scratch S F1 at 10 %: 0.42 / 0.75 / 0.70 by seed, DS2
record 232 found at 0.30 / 0.81 / 0.77).
"Pays, paired": the pretrained run leads its seed's scratch run at every seed, and the mean of
those differences exceeds their spread. The issue's test is the first reading; the second
says whether a verdict hangs on the draw.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pool_rounds import round_label, scores_of

from heartlm.outdir import atomic_write_text

FRACTIONS = (0.1, 0.01)
SCRATCH_FROM = {"76": "75", "77": "75"}
"""round -> the round whose scratch rows it is compared with: round 76 is round 75's recipe
from the `nextleads` encoder, `src/heartlm` unchanged between them (ce32669), so both
initialisations learn from the same tokens and, seed by seed, the same labelled beats; round
77 (prepared) is the same recipe from `nextleadsmlp`. Commits 777c58f-1da103f changed
`src/heartlm` after ce32669 where the study's tokens, training and scores do not reach
(torchrun's log folder, lead names, evaluate's rows for records with nothing to score, no
AFIB call on a record under 8 beats (the study's such LUDB records carry no rhythm label),
the detector's floor for a lead without a heartbeat: the study's detected stores were
compared byte for byte, unchanged). A pair scored on other tokens is refused
(OtherTokens)."""
METRICS = {"beats": {"S": "S", "V": "V"}, "afib": {"AFIB window": "F1"}}
"""task -> the metric's name in the table -> its column in pool_rounds.scores_of."""


class OtherTokens(ValueError):
    """A SCRATCH_FROM pair whose files were not scored on the same tokens, or whose label
    shares were drawn another way."""


@dataclass(frozen=True)
class Comparison:
    round: str
    task: str
    fraction: float
    metric: str
    pretrained: tuple[float, float]
    scratch: tuple[float, float]
    differences: tuple[float, ...] = ()
    """pretrained - scratch at each seed scored in both (none when rows name no seed)"""

    @property
    def lead(self) -> float:
        return self.pretrained[0] - self.scratch[0]

    @property
    def pays(self) -> bool:
        return self.lead > max(self.pretrained[1], self.scratch[1])

    @property
    def paired(self) -> tuple[float, float] | None:
        """Mean and spread (std, ddof 0) of the per-seed differences."""
        if not self.differences:
            return None
        return float(np.mean(self.differences)), float(np.std(self.differences))

    @property
    def pays_paired(self) -> bool:
        paired = self.paired
        return paired is not None and min(self.differences) > 0 and paired[0] > paired[1]


def comparisons(path: Path, scratch_path: Path | None = None) -> list[Comparison]:
    """Every (task, fraction, metric) at which `path` scored both initialisations (a file of
    the early rounds holds beats and AFIB rows together); with `scratch_path`, its pretrained
    rows against that file's scratch rows."""
    result = json.loads(path.read_text())
    rows = {task: result.get(task) or [] for task in ("beats", "afib")}
    if scratch_path is not None:
        other = json.loads(scratch_path.read_text())
        if other.get("codebook_version") != result.get("codebook_version"):
            raise OtherTokens(f"its scratch rows' file {scratch_path} has another codebook")
        if other.get("keep_synthetic_labels", False) != result.get("keep_synthetic_labels", False):
            raise OtherTokens(f"its scratch rows' file {scratch_path} drew its label shares "
                              "another way (keep_synthetic_labels)")  # fmt: skip
        for task in rows:
            rows[task] = [r for r in rows[task] if r["init"] != "scratch"] + [
                r for r in other.get(task) or [] if r["init"] == "scratch"
            ]
    out = []
    for task in ("beats", "afib"):
        values: dict[tuple[str, float, str], list[tuple[int | None, float]]] = defaultdict(list)
        for row in rows[task]:
            if "ensemble" in row or row["init"] not in ("pretrained", "scratch"):
                continue
            scores = scores_of(row, task)
            for metric, column in METRICS[task].items():
                key = row["init"], row["label_fraction"], metric
                values[key].append((row.get("seed"), float(scores[column])))
        for fraction in FRACTIONS:
            for metric in METRICS[task]:
                pre = values.get(("pretrained", fraction, metric))
                scr = values.get(("scratch", fraction, metric))
                if pre and scr:
                    out.append(Comparison(round_label(path), task, fraction, metric,
                                          _mean_std(pre), _mean_std(scr),
                                          _differences(pre, scr)))  # fmt: skip
    return out


def _mean_std(scored: list[tuple[int | None, float]]) -> tuple[float, float]:
    values = [v for _, v in scored]
    return float(np.mean(values)), float(np.std(values))


def _differences(
    pre: list[tuple[int | None, float]], scr: list[tuple[int | None, float]]
) -> tuple[float, ...]:
    """pretrained - scratch at each seed both scored once; none if a row names no seed."""
    by_pre, by_scr = dict(pre), dict(scr)
    if None in by_pre or None in by_scr or len(by_pre) < len(pre) or len(by_scr) < len(scr):
        return ()
    return tuple(by_pre[s] - by_scr[s] for s in sorted(by_pre.keys() & by_scr.keys()))


def markdown(rows: list[Comparison]) -> str:
    lines = [
        "# Does pretraining pay? Pretrained against scratch on DS2, per round",
        "",
        "Generated by `python benchmarks/pretraining_pays.py "
        "benchmarks/results/h100/model_study/final*_round*.json --out "
        'benchmarks/results/pretraining_pays.md`. "Pays": the pretrained mean leads scratch\'s '
        "by more than the larger of the two seed spreads (mean ± std over seeds, ddof 0). "
        '"Paired lead": the mean ± std of pretrained - scratch at each seed (a seed draws the '
        'same labelled beats for both); "pays, paired": it leads at every seed and its mean '
        "exceeds its spread.",
        "",
        "| round | task | DS1 labels | metric | pretrained | scratch | lead | pays "
        "| paired lead | pays, paired |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in rows:
        pre, scr, paired = c.pretrained, c.scratch, c.paired
        by_seed = "-" if paired is None else f"{paired[0]:+.3f} ± {paired[1]:.3f}"
        lines.append(f"| {c.round} | {c.task} | {c.fraction:.0%} | {c.metric} F1 | "
                     f"{pre[0]:.3f} ± {pre[1]:.3f} | {scr[0]:.3f} ± {scr[1]:.3f} | "
                     f"{c.lead:+.3f} | {_yes(c.pays)} | {by_seed} | "
                     f"{'-' if paired is None else _yes(c.pays_paired)} |")  # fmt: skip
    for verdict, reading in (("pays", "the issue's reading"), ("pays_paired", "paired by seed")):
        by_round: dict[tuple[str, str], list[bool]] = defaultdict(list)
        for c in rows:
            by_round[c.round, c.task].append(getattr(c, verdict))
        everywhere = [f"{r} ({t})" for (r, t), pays in by_round.items() if all(pays)]
        lines += ["", f"Rounds in which it pays ({reading}) at every fraction and metric "
                      f"compared: {', '.join(everywhere) or 'none'}."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _scratch_file(path: Path, finals: list[Path]) -> Path | None:
    """The file among `finals` that holds the scratch rows of `path`'s round (SCRATCH_FROM):
    the other round's file of the same task (its name alike up to the round number), so that
    a share scored by a later call (`final_round76_share1.json`) finds it too."""
    number = round_label(path)
    if number not in SCRATCH_FROM:
        return None
    parent, task = SCRATCH_FROM[number], path.name.split(f"round{number}")[0]
    found = [f for f in finals if f.name.startswith(f"{task}round") and round_label(f) == parent]
    return found[0] if found else None


def _yes(pays: bool) -> str:
    return "yes" if pays else "no"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("finals", type=Path, nargs="+", help="model-study final_*.json files")
    parser.add_argument("--out", type=Path, help="write the table here (else stdout)")
    args = parser.parse_args(argv)
    rows: list[Comparison] = []
    for path in args.finals:
        try:
            rows += comparisons(path, _scratch_file(path, args.finals))
        except OSError as exc:
            print(f"pretraining_pays: {path}: cannot read it ({exc.strerror})", file=sys.stderr)
            return 2
        except OtherTokens as exc:
            print(f"pretraining_pays: {path}: {exc}", file=sys.stderr)
            return 2
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            print(f"pretraining_pays: {path}: not a model-study final file ({exc!r})",
                  file=sys.stderr)  # fmt: skip
            return 2
    rows.sort(key=lambda c: (c.task, int(c.round) if c.round.isdigit() else 0, -c.fraction))
    text = markdown(rows)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        atomic_write_text(args.out, text)
    except OSError as exc:
        print(f"pretraining_pays: {args.out}: cannot write it ({exc.strerror})", file=sys.stderr)
        return 2
    print(f"pretraining_pays: wrote {args.out} ({len(rows)} comparisons)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
