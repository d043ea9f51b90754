"""Does the scale of the beat features cost a neural model V sensitivity? (issue 12)

On the DS1 folds the transformer finds fewer V beats than the LightGBM floor on the same
inputs, calling the rest N or S. A tree splits a column at any value; a network reads it
through weights, and heartlm's patient-relative columns are standardised and clipped, so a
column such as the QRS correlation with the record's template keeps almost every beat
between 0.2 and 0.26 and spreads the ectopic ones down to -7. This probe trains the same
small per-beat network (the beat and one neighbour each side, as the floor reads them) on
one fold and scores it on the other, on the columns as the model reads them, after a rank
(quantile-normal) transform fitted on the training fold, and with each column also through
the model's piecewise-linear encoding over quantile bins (`finetune --beat-mlp-bins`),
beside the floor.

    python benchmarks/feature_scale_probe.py TOKENS [--out FILE.json] [--epochs 8] [--bins 32]

TOKENS is a labelled token folder of MIT-BIH (e.g. a model-study work folder's tok_mitdb).
DS2 is not read: both folds are DS1's (model_configs.FOLDS).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import torch
from scipy.stats import norm
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
import model_configs
import tree_floor

from heartlm.ecg.labels import AAMI_CLASSES
from heartlm.labelled import metrics
from heartlm.labelled.windows import class_weights
from heartlm.model.config import BEAT_MLP_EMBEDDING
from heartlm.model.piecewise import PiecewiseLinear
from heartlm.runinfo import versions
from heartlm.train.data import TokenData, load_tokens

QUANTILES = 1001


def quantile_normal(train: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Each column of `x` mapped through the training rows' empirical distribution onto a
    standard normal (ties and NaN kept: NaN stays NaN)."""
    probabilities = np.linspace(0.0, 1.0, QUANTILES)
    out = np.empty_like(x)
    edge = 0.5 / QUANTILES
    for j in range(x.shape[1]):
        known = train[:, j][np.isfinite(train[:, j])]
        if known.size == 0:
            out[:, j] = 0.0
            continue
        levels = np.quantile(known, probabilities)
        # np.interp needs increasing x: a repeated quantile level (ties) takes its first rank
        levels, first = np.unique(levels, return_index=True)
        ranks = np.interp(x[:, j], levels, probabilities[first])
        out[:, j] = norm.ppf(np.clip(ranks, edge, 1.0 - edge))
        out[~np.isfinite(x[:, j]), j] = np.nan
    return out


def network_inputs(x: np.ndarray) -> torch.Tensor:
    """The columns with NaN as 0, then a missing flag per column, as the networks read them."""
    return torch.tensor(
        np.concatenate([np.nan_to_num(x), np.isnan(x)], axis=1), dtype=torch.float32
    )


def fit_network(
    x: np.ndarray, y: np.ndarray, n_classes: int, seed: int, epochs: int, bins: int = 0
) -> nn.Module:
    """Two hidden layers of 256 over the columns (NaN as 0, plus a missing flag per column);
    with `bins`, the columns also enter through the model's piecewise-linear encoding
    (`--beat-mlp-bins`), its edges placed on these training rows."""
    torch.manual_seed(seed)
    inputs, targets = network_inputs(x), torch.tensor(y)
    encoding: list[nn.Module] = []
    width = inputs.shape[1]
    if bins:
        encoding = [PiecewiseLinear(width, bins, BEAT_MLP_EMBEDDING)]
        encoding[0].fit(inputs.numpy(), seed)
        width = encoding[0].out_features
    model = nn.Sequential(
        *encoding, nn.Linear(width, 256), nn.GELU(), nn.Dropout(0.1),
        nn.Linear(256, 256), nn.GELU(), nn.Dropout(0.1), nn.Linear(256, n_classes),
    )  # fmt: skip
    weight = torch.tensor(class_weights(y, n_classes, np.inf, power=0.5), dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    batches = epoch_batches(len(targets), epochs, generator)
    train(model.parameters(), (nn.functional.cross_entropy(model(inputs[b]), targets[b], weight)
                               for b in batches))  # fmt: skip
    return model.eval()


def train(parameters: Iterable[nn.Parameter], losses: Iterator[torch.Tensor]) -> None:
    """AdamW (learning rate 1e-3, weight decay 0.01) down each loss `losses` yields; each is
    computed after the step before it."""
    optimizer = torch.optim.AdamW(list(parameters), lr=1e-3, weight_decay=0.01)
    for loss in losses:
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def epoch_batches(n: int, epochs: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Batches of up to 512 of `n` rows, each epoch in a new order."""
    for _ in range(epochs):
        yield from torch.randperm(n, generator=generator).split(512)


def predict(model: nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(network_inputs(x)).argmax(1).numpy()


def fold_beats(
    data: TokenData, records: tuple[str, ...], aami: np.ndarray, fraction: float, seed: int
) -> np.ndarray:
    """The labelled beats of `records`, a seeded `fraction` of the labels kept as the floor
    keeps them."""
    indices = tree_floor.record_indices(data, list(records))
    return tree_floor.labelled_beats(data, indices, aami, fraction, seed)


def probe(
    data: TokenData, seeds: list[int], epochs: int, fraction: float, bins: int
) -> dict[str, dict]:
    """Confusion matrices summed over both fold directions and `seeds`, per arm."""
    x = tree_floor.beat_inputs(data, "relative")
    aami = np.asarray(data.aami).astype(np.int64)
    n = len(AAMI_CLASSES)
    arms = ("network, columns as the model reads them", "network, quantile-normal columns",
            f"network, columns and {bins} piecewise-linear bins each",
            "floor (LightGBM)")  # fmt: skip
    confusion = {arm: np.zeros((n, n), np.int64) for arm in arms}
    for train_fold, test_fold in (model_configs.FOLDS, model_configs.FOLDS[::-1]):
        te = fold_beats(data, test_fold, aami, 1.0, 0)
        for seed in seeds:
            tr = fold_beats(data, train_fold, aami, fraction, seed)
            ranked = quantile_normal(x[tr], x)
            for arm, columns, n_bins in zip(arms[:3], (x, ranked, x), (0, 0, bins), strict=True):
                model = fit_network(columns[tr], aami[tr], n, seed, epochs, n_bins)
                confusion[arm] += metrics.confusion_matrix(aami[te], predict(model, columns[te]), n)
            tree = tree_floor.fit_tree(x[tr], aami[tr], n, seed, threads=0)
            predicted = tree.predict(x[te]).reshape(len(te), -1).argmax(axis=1)
            confusion[arms[-1]] += metrics.confusion_matrix(aami[te], predicted, n)
    return {
        arm: {
            "accuracy": metrics.accuracy(cm),
            "per_class": metrics.class_scores(cm),
            "confusion": cm.tolist(),
        }
        for arm, cm in confusion.items()
    }


def table(results: dict[str, dict]) -> str:
    rows = ["| model | accuracy | S F1 | V Se | V +P | V F1 | F F1 |",
            "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for arm, r in results.items():
        c = r["per_class"]
        rows.append(
            f"| {arm} | {r['accuracy']:.3f} | {c['S']['f1']:.3f} | {c['V']['se']:.3f} | "
            f"{c['V']['ppv']:.3f} | {c['V']['f1']:.3f} | {c['F']['f1']:.3f} |"
        )
    return "\n".join(rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tokens", help="labelled MIT-BIH token folder")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument(
        "--label-fraction",
        type=float,
        default=model_configs.EARLIER_SELECT_FRACTION,
        help="share of the labels (default: rounds 6-46's `select` share, which it probed)",
    )
    p.add_argument("--bins", type=int, default=32, help="the piecewise-linear arm's bins")
    args = p.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    data = load_tokens(args.tokens)
    results = probe(data, args.seeds, args.epochs, args.label_fraction, args.bins)
    print(table(results))
    if args.out:
        body = {"command": " ".join(sys.argv), "versions": versions(), "folds": model_configs.FOLDS,
                "seeds": args.seeds, "epochs": args.epochs, "bins": args.bins,
                "label_fraction": args.label_fraction, "results": results}  # fmt: skip
        Path(args.out).write_text(json.dumps(body, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
