"""Does pretraining the per-beat pathway pay at few labels? (issue 12, DS1 only)

V is carried by the per-beat network beside the transformer (rounds 59-63), and no
pretraining objective reaches it: every heartlm objective pretrains the transformer. This
probe pretrains the same kind of small network (two hidden layers of 256 over the beat and
one neighbour each side, as `feature_scale_probe.py` and the floor read them) as a denoising
autoencoder on unlabelled beats: a quarter of each row's columns hidden (zero, with their
missing flag set), every known column reconstructed; apart, contrastively on the same beats
in two leads (each training record's MLII rows beside its other lead's); and apart again to
name each unlabelled beat's morphology code (the codebook's k-means cluster, the
transformer's masked-prediction target) from its patient-relative columns, which leave the
code and the absolute shape out. It then
fine-tunes each on one DS1 fold at a share of the labels, scores the other fold, and sets
them beside the same network from a random start and the LightGBM floor on the same rows.

The unlabelled rows are a pretraining token folder (the study's `tok_pre_leads`: MIT-BIH
outside DS2 with its other leads, LUDB's 12 leads, NSTDB, the synthetic corpus) without the
scored fold's records: a record is left out where its name, less an NSTDB noise suffix, is
one of that fold's (LUDB records of the same number go too), so the scored patients are
never seen, as DS2's are not in the study.

    python benchmarks/beat_mlp_pretraining_probe.py LABELLED UNLABELLED PAIRED [--out FILE.json]

LABELLED is a labelled MIT-BIH token folder (a work folder's tok_mitdb), UNLABELLED a
pretraining token folder and PAIRED one with MIT-BIH's other leads as copies (the study's
tok_beats_leads_ectopy), all tokenized with the same codebook; the pairs leave the scored
fold out as the unlabelled rows do. DS2 is not read.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
import model_configs
import tree_floor
from feature_scale_probe import epoch_batches, fold_beats, network_inputs, train

from heartlm.ecg.labels import AAMI_CLASSES
from heartlm.labelled import metrics
from heartlm.labelled.windows import class_weights
from heartlm.outdir import atomic_write_text
from heartlm.runinfo import cpu_model, versions
from heartlm.train.data import TokenData, load_tokens

WIDTH = 256
HIDE = 0.25
"""the share of a row's columns the autoencoder hides from itself"""
TEMPERATURE = 0.1
"""the cross-lead contrast's softmax temperature (SimCLR's and CLOCS's order of size)"""
ARMS = ("network, random start", "network, denoising-pretrained",
        "network, cross-lead contrastive", "network, code-pretrained",
        "floor (LightGBM)")  # fmt: skip


def encoder(n_inputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_inputs, WIDTH), nn.GELU(), nn.Dropout(0.1),
                         nn.Linear(WIDTH, WIDTH), nn.GELU(), nn.Dropout(0.1))  # fmt: skip


def unseen_rows(data: TokenData, x: np.ndarray, scored: tuple[str, ...]) -> np.ndarray:
    """The rows of `x` (one per beat of `data`) whose record is none of `scored`'s."""
    base = [re.sub(r"e\d\d$", "", name.rsplit("/", 1)[-1]) for name in data.records]
    kept = np.array([b not in scored for b in base])
    record = np.repeat(np.arange(len(data.records)), np.diff(data.boundaries))
    return x[kept[record]]


def lead_pairs(
    data: TokenData, x: np.ndarray, scored: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """The rows of `x` (one per beat of `data`) of the same beats in two leads: each MIT-BIH
    record outside `scored` beside its copy in another lead (`mitdb_V1/101` for `mitdb/101`,
    as `lead_copies.py` writes them) where both hold as many beats."""
    from heartlm.ingest.leads import recorded_in

    records = data.meta["records"]
    own = {r["name"]: r for r in records if r["db"] == "mitdb"}
    first, second = [], []
    for copy in records:
        record = own.get(copy["name"])
        is_copy = recorded_in(copy["db"]) == "mitdb" and copy["db"] != "mitdb"
        if is_copy and record and copy["name"] not in scored and (
                copy["n_beats"] == record["n_beats"]):  # fmt: skip
            first.append(np.arange(record["start"], record["start"] + record["n_beats"]))
            second.append(np.arange(copy["start"], copy["start"] + copy["n_beats"]))
    if not first:
        raise SystemExit("no record beside a copy in another lead: give a token folder with "
                         "lead copies (the study's tok_beats_leads_ectopy)")  # fmt: skip
    return x[np.concatenate(first)], x[np.concatenate(second)]


def pretrain_cross_lead(
    first: np.ndarray, second: np.ndarray, seed: int, epochs: int
) -> nn.Sequential:
    """An encoder trained to tell which beat of a batch a beat in another lead is (InfoNCE
    both ways through a small projection, as CLOCS pairs leads), never pairing two beats of
    one patient: such pairs teach what is stable within a patient, which a V beat is not."""
    torch.manual_seed(seed)
    views = network_inputs(first), network_inputs(second)
    body = encoder(views[0].shape[1])
    projection = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.GELU(), nn.Linear(WIDTH, 64))
    generator = torch.Generator().manual_seed(seed)

    def losses() -> Iterator[torch.Tensor]:
        for batch in epoch_batches(len(views[0]), epochs, generator):
            a, b = (nn.functional.normalize(projection(body(v[batch])), dim=1) for v in views)
            logits = a @ b.T / TEMPERATURE
            same = torch.arange(len(batch))
            yield (nn.functional.cross_entropy(logits, same)
                   + nn.functional.cross_entropy(logits.T, same)) / 2  # fmt: skip

    train([*body.parameters(), *projection.parameters()], losses())
    return body


def pretrain_denoising(rows: np.ndarray, seed: int, epochs: int) -> nn.Sequential:
    """An encoder trained to restore every known column of `rows` from the row with HIDE of
    its columns hidden."""
    torch.manual_seed(seed)
    clean = network_inputs(rows)
    n_columns = rows.shape[1]
    known = ~torch.isnan(torch.tensor(rows))
    body = encoder(clean.shape[1])
    decoder = nn.Linear(WIDTH, n_columns)
    generator = torch.Generator().manual_seed(seed)

    def losses() -> Iterator[torch.Tensor]:
        for batch in epoch_batches(len(clean), epochs, generator):
            hidden = torch.rand(len(batch), n_columns, generator=generator) < HIDE
            corrupted = clean[batch].clone()
            corrupted[:, :n_columns][hidden] = 0.0
            corrupted[:, n_columns:][hidden] = 1.0
            target, counted = clean[batch, :n_columns], known[batch]
            yield (decoder(body(corrupted)) - target)[counted].pow(2).mean()

    train([*body.parameters(), *decoder.parameters()], losses())
    return body


def pretrain_codes(rows: np.ndarray, codes: np.ndarray, seed: int, epochs: int) -> nn.Sequential:
    """An encoder trained to name each row's morphology code (`codes`, one id per row)
    through a linear head with an output per id up to the largest."""
    torch.manual_seed(seed)
    inputs, targets = network_inputs(rows), torch.tensor(codes, dtype=torch.int64)
    body = encoder(inputs.shape[1])
    head = nn.Linear(WIDTH, int(targets.max()) + 1)
    generator = torch.Generator().manual_seed(seed)
    train([*body.parameters(), *head.parameters()],
          (nn.functional.cross_entropy(head(body(inputs[b])), targets[b])
           for b in epoch_batches(len(inputs), epochs, generator)))  # fmt: skip
    return body


def fine_tune(
    x: np.ndarray, y: np.ndarray, seed: int, steps: int, start: nn.Sequential | None
) -> nn.Module:
    """The encoder (`start`'s weights, else a random start) and a class head trained on the
    labelled rows as `feature_scale_probe.fit_network` trains its network, for `steps`
    batches of up to 512 rows drawn anew each step: at 1 % of a fold's labels an epoch is one
    batch, so both starts get the same steps whatever the share."""
    torch.manual_seed(seed)
    inputs, targets = network_inputs(x), torch.tensor(y)
    body = encoder(inputs.shape[1])
    if start is not None:
        body.load_state_dict(start.state_dict())
    n = len(AAMI_CLASSES)
    model = nn.Sequential(body, nn.Linear(WIDTH, n))
    weight = torch.tensor(class_weights(y, n, np.inf, power=0.5), dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    batches = (torch.randperm(len(targets), generator=generator)[:512] for _ in range(steps))
    train(model.parameters(), (nn.functional.cross_entropy(model(inputs[b]), targets[b], weight)
                               for b in batches))  # fmt: skip
    return model.eval()


def probe(
    labelled: TokenData,
    unlabelled: TokenData,
    paired: TokenData,
    seeds: list[int],
    fractions: list[float],
    steps: int,
    pretrain_epochs: int,
    contrast_epochs: int,
) -> dict[str, dict[str, dict]]:
    """Per label share and arm, confusion matrices summed over both fold directions and
    `seeds` (each seed its own pretraining run and label draw)."""
    x = tree_floor.beat_inputs(labelled, "relative")
    pool = tree_floor.beat_inputs(unlabelled, "relative")
    both_leads = tree_floor.beat_inputs(paired, "relative")
    codes = np.asarray(unlabelled.morph, np.int64)
    if not pool.shape[1] == both_leads.shape[1] == x.shape[1]:
        raise SystemExit(f"rows of {x.shape[1]}, {pool.shape[1]} and {both_leads.shape[1]} "
                         "columns: tokenize the three folders with one codebook")  # fmt: skip
    aami = np.asarray(labelled.aami).astype(np.int64)
    n = len(AAMI_CLASSES)
    by_seed = {f: {arm: {s: np.zeros((n, n), np.int64) for s in seeds} for arm in ARMS}
               for f in fractions}  # fmt: skip
    for train_fold, test_fold in (model_configs.FOLDS, model_configs.FOLDS[::-1]):
        te = fold_beats(labelled, test_fold, aami, 1.0, 0)
        rows = unseen_rows(unlabelled, pool, tuple(test_fold))
        row_codes = unseen_rows(unlabelled, codes, tuple(test_fold))
        pairs = lead_pairs(paired, both_leads, tuple(test_fold))
        for seed in seeds:
            starts = (None, pretrain_denoising(rows, seed, pretrain_epochs),
                      pretrain_cross_lead(*pairs, seed, contrast_epochs),
                      pretrain_codes(rows, row_codes, seed, pretrain_epochs))  # fmt: skip
            for fraction in fractions:
                tr = fold_beats(labelled, train_fold, aami, fraction, seed)
                for arm, start in zip(ARMS[:-1], starts, strict=True):
                    model = fine_tune(x[tr], aami[tr], seed, steps, start)
                    with torch.no_grad():
                        called = model(network_inputs(x[te])).argmax(1).numpy()
                    by_seed[fraction][arm][seed] += metrics.confusion_matrix(aami[te], called, n)
                tree = tree_floor.fit_tree(x[tr], aami[tr], n, seed, threads=0)
                called = tree.predict(x[te]).reshape(len(te), -1).argmax(axis=1)
                by_seed[fraction][ARMS[-1]][seed] += metrics.confusion_matrix(aami[te], called, n)
    return {
        f"{fraction:g}": {arm: _scores(seeded) for arm, seeded in arms.items()}
        for fraction, arms in by_seed.items()
    }


def _scores(by_seed: dict[int, np.ndarray]) -> dict:
    """One arm's scores over both folds and every seed, and its S, V and F F1 seed by seed."""
    cm = sum(by_seed.values())
    seeded = {s: metrics.class_scores(m) for s, m in by_seed.items()}
    return {"accuracy": metrics.accuracy(cm), "per_class": metrics.class_scores(cm),
            "confusion": cm.tolist(),
            "f1_by_seed": {c: {s: scores[c]["f1"] for s, scores in seeded.items()}
                           for c in ("S", "V", "F")}}  # fmt: skip


def table(results: dict[str, dict[str, dict]]) -> str:
    rows = ["| DS1 labels | model | accuracy | S F1 | V Se | V +P | V F1 | V F1 by seed | F F1 |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for fraction, arms in results.items():
        for arm, r in arms.items():
            c = r["per_class"]
            seeds = " / ".join(f"{v:.3f}" for v in r["f1_by_seed"]["V"].values())
            rows.append(
                f"| {float(fraction):.0%} | {arm} | {r['accuracy']:.3f} | {c['S']['f1']:.3f} | "
                f"{c['V']['se']:.3f} | {c['V']['ppv']:.3f} | {c['V']['f1']:.3f} | {seeds} | "
                f"{c['F']['f1']:.3f} |"
            )
    return "\n".join(rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("labelled", help="labelled MIT-BIH token folder")
    p.add_argument("unlabelled", help="pretraining token folder, the same codebook")
    p.add_argument("paired", help="MIT-BIH token folder with lead copies, the same codebook")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--steps", type=int, default=400, help="fine-tuning steps")
    p.add_argument("--pretrain-epochs", type=int, default=3,
                   help="the autoencoder's and the code prediction's epochs")  # fmt: skip
    p.add_argument("--contrast-epochs", type=int, default=10, help="the contrast's epochs")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--label-fractions", type=float, nargs="+", default=[0.01, 0.1])
    args = p.parse_args()
    results = probe(load_tokens(args.labelled), load_tokens(args.unlabelled),
                    load_tokens(args.paired), args.seeds, args.label_fractions, args.steps,
                    args.pretrain_epochs, args.contrast_epochs)  # fmt: skip
    print(table(results))
    if args.out:
        body = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "machine": {"cpu": cpu_model(), "cores": os.cpu_count()},
                "command": " ".join(sys.argv), "versions": versions(), "folds": model_configs.FOLDS,
                "seeds": args.seeds, "steps": args.steps, "pretrain_epochs": args.pretrain_epochs,
                "contrast_epochs": args.contrast_epochs, "temperature": TEMPERATURE,
                "hide": HIDE, "width": WIDTH, "results": results}  # fmt: skip
        atomic_write_text(args.out, json.dumps(body, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
