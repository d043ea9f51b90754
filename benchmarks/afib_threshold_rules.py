"""Which rule for choosing the AFIB decision threshold carries from one fold to the other.

`model_study.py select_afib` chooses each configuration's threshold on the window F1 pooled
over its two folds (`model_configs.THRESHOLD_RULE`), and DS2 is scored there. In rounds 24
and 25 the transformers' chosen thresholds (0.90-0.995) lost on DS2 where their AUROC won.
This compares RULES on the folds alone: each rule picks a threshold on one fold's curve and
is scored at it on the other fold (both ways), for every transformer configuration in
select_afib.json (`fold_curves`, kept since 2026-11-27). The rule with the best mean
fold-to-fold F1 wins; the study's own rule (`best` until round 26, `plateau` since it won
there) stays unless another is strictly better.

Only then, and only with `--final`, are DS2's stored curves read (final_afib.json's
`threshold_counts`), once, at the threshold the winning rule picks on the pooled folds of
each scored recipe and of the floor beside it.

    python benchmarks/afib_threshold_rules.py W/select_afib.json [--final W/final_afib.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from heartlm.labelled.metrics import best_threshold, plateau_threshold, pooled_curve

Curve = list[dict[str, float]]


def _best(curve: Curve) -> float:
    return best_threshold([curve])[0]


def _plateau(curve: Curve) -> float:
    return plateau_threshold([curve])[0]


def _default(curve: Curve) -> float:
    return 0.5


RULES: dict[str, Callable[[Curve], float]] = {
    "best": _best,
    "plateau": _plateau,
    "default": _default,
}
"""Fixed before any DS2 curve was read (round 26)."""
STUDY_RULE = "plateau"
"""The model study's rule (`model_configs.THRESHOLD_RULE`): it wins ties."""


def f1_at(curve: Curve, threshold: float) -> float:
    """The F1 of a pooled curve (or one fold's counts) at one of its thresholds."""
    return pooled_curve([curve])[[p["threshold"] for p in curve].index(threshold)]["f1"]


def fold_to_fold(fold_curves: list[Curve], rule: Callable[[Curve], float]) -> float:
    """Mean F1 on each fold at the threshold the rule picks on the other."""
    a, b = fold_curves
    return (f1_at(b, rule(a)) + f1_at(a, rule(b))) / 2


def judge(rows: dict[str, Any]) -> tuple[str, dict[str, dict[str, float]]]:
    """(winning rule, fold-to-fold F1 per transformer configuration and rule)."""
    scores = {name: {rule: fold_to_fold(row["fold_curves"], fn) for rule, fn in RULES.items()}
              for name, row in rows.items()
              if "fold_curves" in row and not name.startswith("tree floor")}  # fmt: skip
    if not scores:
        raise ValueError("keeps no fold curves (made before 2026-11-27)")
    mean = {rule: statistics.fmean(s[rule] for s in scores.values()) for rule in RULES}
    winner = max(RULES, key=lambda r: (mean[r], r == STUDY_RULE))
    return winner, scores


def _ds2_counts(row: dict[str, Any]) -> Curve:
    """A DS2 row's curve: a transformer's row keeps it at the top, a floor's in its report."""
    return row["threshold_counts"] if "threshold_counts" in row else row["afib"]["threshold_counts"]


def ds2_scores(final: dict[str, Any], rows: dict[str, Any], rule: str) -> list[dict[str, Any]]:
    """DS2 window F1 of each scored recipe and floor at 100 % of the labels, at the threshold
    `rule` picks on its pooled fold curve (mean and population sd over seeds, as the model
    study's tables)."""
    recipes = {key.split(": ", 1)[0]: key.split(": ", 1)[1] for key in final["config"]}
    out = []
    for init in sorted({r["init"] for r in final["afib"]}):
        name = recipes.get(init, init)  # a floor's init is its row name in select
        if name not in rows:
            continue
        threshold = RULES[rule](rows[name]["threshold_curve"])
        f1s = [f1_at(_ds2_counts(r), threshold) for r in final["afib"]
               if r["init"] == init and r["label_fraction"] == 1.0]  # fmt: skip
        out.append({"init": init, "recipe": name, "threshold": threshold, "seeds": len(f1s),
                    "f1": statistics.fmean(f1s),
                    "sd": statistics.pstdev(f1s)})  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("select", type=Path, help="select_afib.json")
    ap.add_argument("--final", type=Path, help="final_afib.json: score DS2 at the winner")
    args = ap.parse_args()
    rows = json.loads(args.select.read_text())["afib"]
    try:
        winner, scores = judge(rows)
    except ValueError as exc:
        print(f"{args.select}: {exc}", file=sys.stderr)
        return 2
    print("| configuration | " + " | ".join(RULES) + " |")
    print("| --- |" + " --- |" * len(RULES))
    for name, s in scores.items():
        print(f"| {name} | " + " | ".join(f"{s[r]:.3f}" for r in RULES) + " |")
    print(f"\nfold-to-fold winner: {winner}")
    if args.final:
        final = json.loads(args.final.read_text())
        print("\n| DS2, 100 % of the labels | threshold | seeds | F1 |\n| --- | --- | --- | --- |")
        for r in ds2_scores(final, rows, winner):
            shown = r["init"] if r["recipe"] == r["init"] else f"{r['init']}: {r['recipe']}"
            print(f"| {shown} | {r['threshold']:g} | {r['seeds']} | "
                  f"{r['f1']:.3f} ± {r['sd']:.3f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
