"""Label-efficiency figure of one model-study `final` file: F1 of the S, V and F beat classes
on DS2 against the share of DS1's labels, mean ± standard deviation over seeds (numpy's,
ddof 0, as the tables print it), one line per model (pretrained, scratch, the tree floor).

    python benchmarks/label_curve.py benchmarks/results/h100/model_study/final_round64.json \
        --out benchmarks/results/h100/model_study/label_curve_round64.png

The seed ensembles ("3 seeds together") are left out: they are one model, not a spread.
Several files draw one figure: a twin round whose pretrained rows lie in two files and whose
scratch rows are its parent's (pretraining_pays.SCRATCH_FROM):

    python benchmarks/label_curve.py final_round76.json final_round76_share1.json \
        final_round75.json --out label_curve_round76.png

A row that two files both hold (the same model, share and seed, as the floor rows of a twin
and its parent) counts once when its F1s agree, and is refused when they differ.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from heartlm.outdir import atomic_write_bytes

CLASSES = ("S", "V", "F")
COLOURS = {"pretrained": "C0", "scratch": "C1"}
"""One colour per model in every figure, so that two rounds' figures read alike."""
FLOOR_COLOUR = "C2"


@dataclass(frozen=True)
class Point:
    fraction: float
    mean: float
    std: float
    seeds: int


Curves = dict[str, dict[str, list[Point]]]
"""model -> class -> points, label fractions ascending."""

SeedF1s = dict[tuple[str, float, int], dict[str, float]]
"""(model, label fraction, seed) -> class -> F1."""


class NotAFinalFile(ValueError):
    """The file is not a model-study `final` file with beat rows."""


class ConflictingRows(ValueError):
    """Two files score one run (model, share, seed) with different F1s."""


def seed_f1s(final: dict) -> SeedF1s:
    rows = final.get("beats") if isinstance(final, dict) else None
    if not isinstance(rows, list):
        raise NotAFinalFile("no `beats` list")
    f1s: SeedF1s = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise NotAFinalFile(f"row {i} is not an object")
        if "ensemble" in row:
            continue
        try:
            key = (row["init"], float(row["label_fraction"]), int(row["seed"]))
            values = {cls: float(row["per_class"][cls]["f1"]) for cls in CLASSES}
        except (KeyError, TypeError, ValueError) as exc:
            raise NotAFinalFile(f"row {i}: a field is missing or malformed ({exc})") from exc
        if not isinstance(key[0], str):
            raise NotAFinalFile(f"row {i}: its `init` is not a name")
        if key in f1s:
            raise NotAFinalFile(f"row {i} ({key[0]}, {key[1]:g}): seed {key[2]} twice")
        f1s[key] = values
    if not f1s:
        raise NotAFinalFile("no beat rows")
    return f1s


def merged(into: SeedF1s, more: SeedF1s) -> SeedF1s:
    """`into` with `more`'s rows; a row both hold must agree (the same run in two files)."""
    for (model, fraction, seed), values in more.items():
        if into.get((model, fraction, seed), values) != values:
            raise ConflictingRows(f"{model}, {fraction:g}, seed {seed}: an earlier file scores "
                                  "this run with other F1s (a second look at one recipe? "
                                  "draw the two files apart)")  # fmt: skip
    return {**into, **more}


def curves(f1s: SeedF1s) -> Curves:
    by_model: dict[str, dict[str, dict[float, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for (model, fraction, _seed), values in f1s.items():
        for cls, f1 in values.items():
            by_model[model][cls][fraction].append(f1)
    return {model: {cls: [Point(fr, float(np.mean(s)), float(np.std(s)), len(s))
                          for fr, s in sorted(by_fraction.items())]
                    for cls, by_fraction in by_model[model].items()}
            for model in sorted(by_model)}  # fmt: skip


def _colour(model: str) -> str:
    return FLOOR_COLOUR if model.startswith("tree floor") else COLOURS.get(model, "C3")


def _seed_counts(lines: Curves) -> str:
    counts = sorted({p.seeds for by_class in lines.values() for ps in by_class.values()
                     for p in ps})  # fmt: skip
    return f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"


def plot(lines: Curves, title: str, out: Path) -> None:
    fig, axes = plt.subplots(1, len(CLASSES), figsize=(4.2 * len(CLASSES), 3.8),
                             squeeze=False, layout="constrained")  # fmt: skip
    for ax, cls in zip(axes[0], CLASSES, strict=True):
        for i, (model, by_class) in enumerate(lines.items()):
            points = by_class[cls]
            nudge = 1.05 ** (i - (len(lines) - 1) / 2)  # side by side, so error bars do not hide
            ax.errorbar([100 * p.fraction * nudge for p in points], [p.mean for p in points],
                        yerr=[p.std for p in points], marker="o", capsize=3,
                        color=_colour(model), label=model.split(" (")[0],
                        linestyle="--" if model.startswith("tree floor") else "-")  # fmt: skip
        ax.set_xscale("log")
        ax.set_xticks([1, 10, 100], ["1 %", "10 %", "100 %"])
        ax.set_xlabel("share of DS1's labels")
        ax.set_ylabel(f"{cls} F1 on DS2")
        ax.set_title(cls)
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(lines))
    fig.suptitle(title)
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, dpi=120, format="png")
    finally:
        plt.close(fig)
    atomic_write_bytes(out, buffer.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("finals", type=Path, nargs="+", metavar="final",
                        help="model-study final_*.json files, drawn as one figure")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = parser.parse_args(argv)
    if args.out.suffix.lower() != ".png" or args.out.is_dir() or not args.out.parent.is_dir():
        print(f"label_curve: {args.out}: --out must be a .png file in an existing folder",
              file=sys.stderr)  # fmt: skip
        return 2
    f1s: SeedF1s = {}
    for path in args.finals:
        try:
            f1s = merged(f1s, seed_f1s(json.loads(path.read_text())))
        except OSError as exc:
            print(f"label_curve: {path}: cannot read it ({exc.strerror})", file=sys.stderr)
            return 2
        except ConflictingRows as exc:
            print(f"label_curve: {path}: {exc}", file=sys.stderr)
            return 2
        except ValueError as exc:  # NotAFinalFile and JSON errors
            print(f"label_curve: {path}: not a model-study final file ({exc})", file=sys.stderr)
            return 2
    lines = curves(f1s)
    title = " + ".join(path.stem for path in args.finals)
    try:
        plot(lines, f"{title}: DS2 beat F1, mean ± std over {_seed_counts(lines)} seeds",
             args.out)  # fmt: skip
    except OSError as exc:
        print(f"label_curve: {args.out}: cannot write it ({exc.strerror or exc})", file=sys.stderr)
        return 2
    print(f"label_curve: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
