"""Does the LightGBM floor, fed what the per-beat network reads (a beat and its two
neighbours), still find the atrial ectopic beats of synthetic sick-sinus patients when those
beats carry the sinus P wave instead of an ectopic one? A CPU probe, DS2 not read.

On DS2 the recipes that lean on the per-beat network lose record 232's S beats, while the
held-out synthetic sick-sinus patients (ectopic P waves) score S F1 about 0.97 for every
recipe: this asks whether the P wave is what makes the synthetic ones easy.

    python benchmarks/sick_sinus_p_probe.py W/tok_beats_leads_ectopy W/tok_pre --out OUT

W is a model-study work folder (`model_study.py prepare`, `--quick` will do): the floor trains
on its beat training set (DS1 and the synthetic patients), as `final`'s floor does; the probe's
patients are tokenized with its codebook (tok_pre).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import model_configs as cfg
import numpy as np
from model_beats import synthetic_keys
from model_recipes import folder_synthetic
from tree_floor import beat_inputs, fit_tree, labelled_beats, record_indices

SEEDS = (0, 1, 2)
RECORDS, MINUTES, SYNTH_SEED = 20, 10, 8  # as prepare's held-out synth_sick_test


def synthesize(out: Path, sinus_p: bool) -> None:
    """20 sick-sinus patients (prepare's held-out seed); with `sinus_p` every atrial ectopic
    beat drawn with the patient's sinus P wave (same template as a normal beat)."""
    from heartlm.cli import main
    from heartlm.synth import patient

    original = patient._templates
    if sinus_p:

        def templates(rng, leads):
            shapes = original(rng, leads)
            return {**shapes, "A": [shapes["N"][0]]}

        patient._templates = templates
    try:
        argv = ["synth", str(out), "--records", str(RECORDS), "--minutes", str(MINUTES),
                "--fs", "360", "--seed", str(SYNTH_SEED), "--sick-sinus-fraction", "1",
                "--paced-fraction", "0", "--workers", "1"]  # fmt: skip
        if main(argv) != 0:
            raise SystemExit(f"synth {out} failed")
    finally:
        patient._templates = original


def tokens(work: Path, name: str, codebook: Path, sinus_p: bool) -> Path:
    from heartlm.cli import main

    synth, store, tok = work / f"synth_{name}", work / f"store_{name}", work / f"tok_{name}"
    if not tok.is_dir():
        synthesize(synth, sinus_p)
        assert main(["ingest", str(synth), "--out", str(store)]) == 0
        assert main(["tokenize", str(store), "--out", str(tok), "--codebook", str(codebook)]) == 0
    return tok


def s_scores(reference: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    s = 1  # AAMI_CLASSES.index("S")
    hit = int(((reference == s) & (predicted == s)).sum())
    n, called = int((reference == s).sum()), int((predicted == s).sum())
    se, ppv = hit / max(n, 1), hit / max(called, 1)
    return {"S beats": n, "Se": se, "+P": ppv, "F1": 2 * se * ppv / max(se + ppv, 1e-12)}


def main() -> int:
    from heartlm.train.data import load_tokens

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("train_tokens", type=Path, help="the study's beat training tokens")
    parser.add_argument("codebook", type=Path, help="the study's tok_pre (its codebook)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--inputs", default="relative")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    train = load_tokens(args.train_tokens)
    names = [*cfg.TRAIN, *synthetic_keys(train, folder_synthetic(args.train_tokens.name))]
    x_train = beat_inputs(train, args.inputs)
    aami = np.asarray(train.aami).astype(np.int64)
    rows = labelled_beats(train, record_indices(train, names), aami)
    tests = {name: load_tokens(tokens(args.out, name, args.codebook, sinus_p))
             for name, sinus_p in (("ectopic_p", False), ("sinus_p", True))}  # fmt: skip
    result: dict[str, dict] = {}
    for seed in SEEDS:
        tree = fit_tree(x_train[rows], aami[rows], 5, seed, threads=0)
        for name, data in tests.items():
            labels = np.asarray(data.aami).astype(np.int64)
            keep = labels >= 0
            x = beat_inputs(data, args.inputs)[keep]
            predicted = tree.predict(x).reshape(len(x), -1).argmax(axis=1)
            result.setdefault(name, {})[seed] = s_scores(labels[keep], predicted)
    (args.out / "sick_sinus_p_probe.json").write_text(json.dumps(result, indent=2) + "\n")
    print("| held-out sick-sinus patients | seed | S beats | S Se | S +P | S F1 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, by_seed in result.items():
        for seed, r in by_seed.items():
            print(f"| {name} | {seed} | {r['S beats']} | {r['Se']:.3f} | {r['+P']:.3f} | "
                  f"{r['F1']:.3f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
