"""Does the AFIB floor on the folds depend on which synthetic records it trains beside?

A CPU probe behind model_configs' AFIB_TRAIN_SYNTHETIC (round 24): the LightGBM floor (rhythm
inputs, 128 beats of context) on the two AFIB folds of the real records outside DS2
(`model_afib.afib_folds`), trained with every synthetic folder, with the sick-sinus and
flutter/AF patients and GENERAL of the 100 general `synth` records, and with the patients
alone (the AFIB-only bigeminy patients of round 27 are not used); three seeds each. The
threshold is the one with the best pooled F1, the model study's rule when this ran. Reads a
model-study work folder after `prepare` (its `tok_afib`); DS2 is not read.

    python benchmarks/afib_synthetic_probe.py --work /tmp/hlm-model \
        --out benchmarks/results/cpu/afib_synthetic_probe.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
from pathlib import Path

import model_configs as cfg
import model_study
from model_afib import afib_folds, afib_keys, pooled_scores
from tree_floor import afib_floors

from heartlm.labelled.metrics import best_threshold
from heartlm.runinfo import versions
from heartlm.train.data import load_tokens

GENERAL = 20
SEEDS = (0, 1, 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="a model-study work folder")
    ap.add_argument("--out", type=Path, required=True, help="the markdown table to write")
    args = ap.parse_args()
    tokens = args.work / "tok_afib"
    if not (tokens / "tokens.json").is_file():
        print(f"afib_synthetic_probe: {tokens}: no token folder (run `prepare`)", file=sys.stderr)
        return 2
    data = load_tokens(tokens)
    folds = afib_folds(data)
    keys = afib_keys(data)
    patients = [k for k in keys if k.startswith(cfg.PATIENTS_ONLY)]
    general = sorted(k for k in keys if k.startswith("synth/"))
    variants = {
        f"every synthetic folder ({len(general)} general records)": patients + general,
        f"the patients and {GENERAL} general records": patients + general[:GENERAL],
        "the patients only": patients,
    }
    lines = [
        "# AFIB floor on the folds by synthetic training records",
        "",
        f"{dt.date.today()}, command: `python {shlex.join(sys.argv)}`. LightGBM, rhythm inputs, "
        "context 128, 32-beat windows; window F1 pooled over the two folds, at 0.5 and at the "
        "threshold with the best pooled F1.",
        "",
        f"Machine: {model_study.machine()}; versions: {versions()}.",
        "",
        "| synthetic records beside the fold | seed | F1 at 0.5 | Se | +P | chosen threshold "
        "| F1 there |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, synth in variants.items():
        for seed in SEEDS:
            reports = [afib_floors(data, folds[k] + synth, [(data, folds[1 - k])], window=32,
                                   seed=seed, inputs="rhythm", context=128)[0]
                       for k in (0, 1)]  # fmt: skip
            pooled = pooled_scores(reports)
            threshold, f1 = best_threshold([rep["threshold_counts"] for rep in reports])
            lines.append(
                f"| {name} | {seed} | {pooled['f1']:.3f} | {pooled['se']:.3f} | "
                f"{pooled['ppv']:.3f} | {threshold:.3f} | {f1:.3f} |"
            )
            print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    staged = args.out.with_suffix(".tmp")
    staged.write_text("\n".join(lines) + "\n")
    staged.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
