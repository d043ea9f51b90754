"""Do MIT-BIH's second leads help? The LightGBM floor on the model study's folds, trained with
and without the lead copies of its training fold's records (CPU; DS2 not read).

    python benchmarks/lead_copies_probe.py beats WORK --out results/cpu/beat_lead_copies.json
    python benchmarks/lead_copies_probe.py afib WORK --out results/cpu/afib_lead_copies.json

WORK is a model study work folder after `prepare` with a `_leadcopies` beat configuration
in CONFIGS, so that it holds `tok_beats_leads` (`lead_copies.py`'s copies, whose `.atr`
carries the records' beat and rhythm annotations, tokenized with `--codebook tok_pre`); for
`afib` also `tok_afib_leads`: `tok_afib`'s sources plus `leads/mitdb_*`, ingested and
tokenized the same way. Each fold's copies train only beside their own record; the other
fold is scored on MLII alone.

- beats: `select`'s floor for each input set and label share, confusion matrices summed over
  folds and seeds 0-1. The share is drawn per recording, as `heartlm finetune` draws it: a
  copy keeps the labels of the beats its record keeps.
- afib: round 37's AFIB floor (rhythm inputs, 32-beat windows inside 256 beats of context,
  the synthetic sick-sinus and flutter/AF patients in both folds); window counts pooled over
  the folds, at 0.5 and at the threshold the study's rule chooses, seeds 0-2.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import model_configs as cfg
from model_afib import (
    afib_folds,
    afib_keys,
    afib_synthetic_keys,
    fold_threshold_choice,
    pooled_scores,
)
from model_beats import mitdb_keys, sum_reports, synthetic_keys
from tree_floor import afib_floors, beat_floor

from heartlm.train.data import TokenData, load_tokens, recordings

INPUTS = ("relative", "no-heart-rate", "all")
FRACTIONS = (0.1, 1.0)
CONTEXT = 256


def beats(work: Path, seeds: tuple[int, ...] = (0, 1)) -> list[dict[str, Any]]:
    """One row per training set, input set and label share."""
    plain = load_tokens(work / "tok_beats")
    leads = load_tokens(work / cfg.BEATS_LEADS)
    synthetic = synthetic_keys(plain)
    rows = []
    for label, data in (("MLII", plain), ("MLII and lead copies", leads)):
        for inputs in INPUTS:
            for fraction in FRACTIONS:
                reports = [beat_floor(data, [*cfg.FOLDS[k], *synthetic],
                                      mitdb_keys(cfg.FOLDS[1 - k]), seed, fraction=fraction,
                                      inputs=inputs)
                           for k in (0, 1) for seed in seeds]  # fmt: skip
                summed = sum_reports(reports)
                classes = summed["per_class"]
                rows.append({"training": label, "inputs": inputs, "label_fraction": fraction,
                             "accuracy": summed["accuracy"],
                             **{f"{c}_f1": classes[c]["f1"] for c in ("S", "V", "F")},
                             "V_se": classes["V"]["se"], "V_ppv": classes["V"]["ppv"]})  # fmt: skip
                print(" ".join(f"{v:.3f}" if isinstance(v, float) else str(v)
                               for v in rows[-1].values()), flush=True)  # fmt: skip
    return rows


def with_copies(data: TokenData, keys: list[str]) -> list[str]:
    """`keys` and the lead copies (`mitdb_V1/NAME`: `recording_key`) of their records in
    `data`."""
    wanted = set(keys)
    copies = [k for k, rec in zip(afib_keys(data), recordings(data), strict=True)
              if rec in wanted and k not in wanted]  # fmt: skip
    return [*keys, *copies]


def afib(work: Path, seeds: tuple[int, ...] = (0, 1, 2)) -> dict[str, list[dict[str, float]]]:
    """Per training set, one row per seed."""
    plain, leads = load_tokens(work / "tok_afib"), load_tokens(work / "tok_afib_leads")
    folds = afib_folds(plain)
    out: dict[str, list[dict[str, float]]] = {}
    for label, data in (("MLII", plain), ("MLII and lead copies", leads)):
        out[label] = []
        for seed in seeds:
            reports = []
            for k in (0, 1):
                train = folds[k] if data is plain else with_copies(data, folds[k])
                train = [*train, *afib_synthetic_keys(data, cfg.PATIENTS_ONLY)]
                (report,) = afib_floors(data, train, [(plain, folds[1 - k])], window=32,
                                        seed=seed, inputs="rhythm", context=CONTEXT)  # fmt: skip
                reports.append(report)
            chosen = fold_threshold_choice(reports)
            out[label].append({"seed": seed, "f1_at_0.5": pooled_scores(reports)["f1"],
                               "threshold": chosen["threshold"],
                               "f1_at_threshold": chosen["threshold_f1"]})  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task", choices=["beats", "afib"])
    ap.add_argument("work", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    result = beats(args.work) if args.task == "beats" else afib(args.work)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
