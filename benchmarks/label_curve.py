"""Label-efficiency figure of one model-study `final` file: F1 of the S, V and F beat classes
on DS2 against the share of DS1's labels, mean ± standard deviation over seeds (numpy's,
ddof 0, as the tables print it), one line per model (pretrained, scratch, the tree floor).

    python benchmarks/label_curve.py benchmarks/results/h100/model_study/final_round64.json \
        --out benchmarks/results/h100/model_study/label_curve_round64.png

The seed ensembles ("3 seeds together") are left out: they are one model, not a spread.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

CLASSES = ("S", "V", "F")


def curves(final: dict) -> dict[str, dict[str, list[tuple[float, float, float]]]]:
    """model -> class -> [(label fraction, mean F1, std F1)], fractions ascending."""
    f1s: dict[tuple[str, float, str], list[float]] = defaultdict(list)
    for row in final["beats"]:
        if "ensemble" in row:
            continue
        for cls in CLASSES:
            f1s[row["init"], row["label_fraction"], cls].append(row["per_class"][cls]["f1"])
    out: dict[str, dict[str, list[tuple[float, float, float]]]] = defaultdict(dict)
    for model in sorted({m for m, _, _ in f1s}):
        for cls in CLASSES:
            points = sorted((fr, f1s[m, fr, c]) for m, fr, c in f1s if m == model and c == cls)
            out[model][cls] = [(fr, float(np.mean(v)), float(np.std(v))) for fr, v in points]
    return dict(out)


def plot(lines: dict[str, dict[str, list[tuple[float, float, float]]]], title: str,
         out: Path) -> None:  # fmt: skip
    fig, axes = plt.subplots(1, len(CLASSES), figsize=(4.2 * len(CLASSES), 3.4), squeeze=False)
    for ax, cls in zip(axes[0], CLASSES, strict=True):
        for i, (model, by_class) in enumerate(lines.items()):
            fr, mean, std = (np.array(v) for v in zip(*by_class[cls], strict=True))
            style = "--" if model.startswith("tree floor") else "-"
            nudge = 1.05 ** (i - (len(lines) - 1) / 2)  # side by side, so error bars do not hide
            ax.errorbar(100 * fr * nudge, mean, yerr=std, marker="o", capsize=3,
                        linestyle=style, label=model.split(" (")[0])  # fmt: skip
        ax.set_xscale("log")
        ax.set_xticks([1, 10, 100], ["1 %", "10 %", "100 %"])
        ax.set_xlabel("share of DS1's labels")
        ax.set_ylabel(f"{cls} F1 on DS2")
        ax.set_title(cls)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    staged = out.with_name(f".{out.stem}.partial{out.suffix}")
    fig.savefig(staged, dpi=120)
    plt.close(fig)
    staged.replace(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("final", type=Path, help="a model-study final_*.json")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = parser.parse_args(argv)
    try:
        final = json.loads(args.final.read_text())
        lines = curves(final)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"label_curve: {args.final}: not a model-study final file ({exc!r})", file=sys.stderr)
        return 2
    if not lines:
        print(f"label_curve: {args.final}: no beat rows", file=sys.stderr)
        return 2
    seeds = max(len({r["seed"] for r in final["beats"] if r["init"] == m}) for m in lines)
    plot(lines, f"{args.final.stem}: DS2 beat F1, mean ± std over {seeds} seeds", args.out)
    print(f"label_curve: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
