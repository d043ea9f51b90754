"""Which feature columns carry AFIB: the LightGBM floor on the model study's AFIB folds with
other column sets than `--inputs rhythm` (CPU; DS2 is not read).

    python benchmarks/afib_floor_columns.py WORK/tok_afib

WORK is a model study work folder (`benchmarks/model_study.py prepare`); its `tok_afib`
holds the real records outside DS2 and the synthetic training patients. Each column set
trains the floor of `tree_floor.afib_floors` (32-beat windows seen inside 128 beats of
context, as every AFIB recipe is) on one fold with the synthetic records and scores the
other, for seeds 0-2; window counts are pooled, at 0.5 and at the threshold with the best
pooled F1.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from unittest import mock

import model_configs as cfg
import tree_floor
from model_afib import afib_folds, afib_keys, pooled_scores

from heartlm.inputs import hidden_columns
from heartlm.labelled.metrics import best_threshold
from heartlm.train.data import load_tokens


def column_sets(names: list[str]) -> dict[str, list[int]]:
    """Hidden columns of each set, by name."""
    rhythm = hidden_columns(names, "rhythm")
    p_columns = {i for i, name in enumerate(names) if name.startswith("p_")}
    unpatterned = {i for i, name in enumerate(names) if name == "rr_unpatterned"}
    return {
        "rhythm (--inputs rhythm)": rhythm,
        "rhythm without rr_unpatterned": sorted(set(rhythm) | unpatterned),
        "rhythm without the P columns": sorted(set(rhythm) | p_columns),
        "rhythm + ectopy columns (--inputs rhythm-ectopy)": hidden_columns(names, "rhythm-ectopy"),
        "relative (--inputs relative)": hidden_columns(names, "relative"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokens", help="a model study work folder's tok_afib")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    data = load_tokens(args.tokens)
    folds = afib_folds(data)
    synth = [k for k in afib_keys(data) if k.startswith(cfg.SYNTHETIC)]
    print("| columns | F1 at 0.5 | Se | +P | best pooled threshold | F1 there |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, hidden in column_sets(list(data.meta.get("features", []))).items():
        chosen: Callable[..., list[int]] = lambda *_, h=hidden: h  # noqa: E731
        reports = []
        with mock.patch.object(tree_floor, "hidden_columns", chosen):
            for seed in range(args.seeds):
                for k in (0, 1):
                    reports += tree_floor.afib_floors(
                        data, folds[k] + synth, [(data, folds[1 - k])], window=32, seed=seed,
                        inputs="rhythm", context=128,
                    )  # fmt: skip
        pooled = pooled_scores(reports)
        threshold, f1 = best_threshold([r["threshold_counts"] for r in reports])
        print(f"| {name} | {pooled['f1']:.3f} | {pooled['se']:.3f} | {pooled['ppv']:.3f} "
              f"| {threshold:g} | {f1:.3f} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
