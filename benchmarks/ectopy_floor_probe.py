"""CPU probe behind round 46 (model_beat_rounds): the LightGBM beat floor on DS1's two folds
(10 % of the labels, patient-relative inputs, seeds 0-2, confusion matrices summed), trained
with and without the synthetic ectopy patients of BEATS_ECTOPY.

    python benchmarks/ectopy_floor_probe.py W/tok_beats_leads_ectopy

(W: a model-study work folder whose `prepare` made BEATS_ECTOPY, e.g. of `--quick`.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import model_configs as cfg
import numpy as np
import tree_floor
from model_beats import mitdb_keys, sum_reports, synthetic_keys

from heartlm.train.data import load_tokens

VARIANTS = {
    "without": cfg.TRAIN_SYNTHETIC,
    "with the AF-with-ectopy patients": (*cfg.TRAIN_SYNTHETIC, "synth_afib_ectopy"),
    "with the bigeminy patients": (*cfg.TRAIN_SYNTHETIC, "synth_bigeminy"),
    "with both": (*cfg.TRAIN_SYNTHETIC, *cfg.AFIB_ONLY_SYNTHETIC),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokens", type=Path, help="a BEATS_ECTOPY token folder")
    ap.add_argument(
        "--fraction",
        type=float,
        default=cfg.EARLIER_SELECT_FRACTION,
        help="share of the labels (default: rounds 6-46's `select` share, which it probed)",
    )
    args = ap.parse_args()
    data = load_tokens(args.tokens)
    print("| synthetic patients | S F1 | V Se | V +P | V F1 | F F1 | V called N (a seed) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, folders in VARIANTS.items():
        synthetic = synthetic_keys(data, folders)
        reports = [
            tree_floor.beat_floor(data, [*cfg.FOLDS[k], *synthetic], mitdb_keys(cfg.FOLDS[1 - k]),
                                  seed, fraction=args.fraction, inputs="relative")
            for seed in (0, 1, 2) for k in (0, 1)
        ]  # fmt: skip
        summed = sum_reports(reports)
        c, cm = summed["per_class"], np.asarray(summed["confusion"])
        cells = [c["S"]["f1"], c["V"]["se"], c["V"]["ppv"], c["V"]["f1"], c["F"]["f1"]]
        shown = " | ".join(f"{v:.3f}" for v in cells)
        print(f"| {name} | {shown} | {cm[2, 0] / 3:.0f} |", flush=True)


if __name__ == "__main__":
    main()
