"""Do MIT-BIH's second leads help AFIB? The LightGBM floor on the model study's AFIB folds,
trained with and without the lead copies of its training fold's records (CPU; DS2 not read).

    python benchmarks/afib_lead_copies_probe.py WORK --out results/cpu/afib_lead_copies.json

WORK is a model study work folder after `prepare`, with `tok_afib_leads` made beside it:
`tok_afib`'s sources plus `leads/mitdb_*` (`lead_copies.py`'s copies, whose `.atr` carries
the records' rhythm annotations), tokenized with `--codebook tok_pre`. The floor is round
37's: rhythm inputs, 32-beat windows inside 256 beats of context, the synthetic sick-sinus
and flutter/AF patients in both folds. Each fold's copies train only beside their own
record; the other fold is scored on MLII alone. Window counts pooled over the folds, at 0.5
and at the threshold the study's rule chooses, seeds 0-2.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import model_study as ms
from tree_floor import afib_floors

from heartlm.train.data import TokenData, load_tokens

CONTEXT = 256


def with_copies(data: TokenData, keys: list[str]) -> list[str]:
    """`keys` and the lead copies (`mitdb_<lead>/NAME`) of their MIT-BIH records in `data`."""
    names = {key.split("/", 1)[1] for key in keys if key.startswith("mitdb/")}
    copies = [k for k in ms._afib_keys(data) if k.startswith("mitdb_") and k.split("/")[1] in names]
    return [*keys, *copies]


def probe(work: Path, seeds: tuple[int, ...] = (0, 1, 2)) -> dict[str, list[dict[str, float]]]:
    plain, leads = load_tokens(work / "tok_afib"), load_tokens(work / "tok_afib_leads")
    folds = ms.afib_folds(plain)
    out: dict[str, list[dict[str, float]]] = {}
    for label, data in (("MLII", plain), ("MLII and lead copies", leads)):
        out[label] = []
        for seed in seeds:
            reports = []
            for k in (0, 1):
                train = folds[k] if data is plain else with_copies(data, folds[k])
                train = [*train, *ms._afib_synthetic_keys(data, ms.PATIENTS_ONLY)]
                (report,) = afib_floors(data, train, [(plain, folds[1 - k])], window=32,
                                        seed=seed, inputs="rhythm", context=CONTEXT)  # fmt: skip
                reports.append(report)
            chosen = ms._fold_threshold(reports)
            out[label].append({"seed": seed, "f1_at_0.5": ms._pooled(reports)["f1"],
                               "threshold": chosen["threshold"],
                               "f1_at_threshold": chosen["threshold_f1"]})  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    result = probe(args.work)
    for label, rows in result.items():
        print(label, [f"{r['f1_at_0.5']:.3f} / {r['f1_at_threshold']:.3f}" for r in rows])
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
