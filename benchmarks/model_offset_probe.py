"""`model_study.py offset_probe`: does the class offset the DS1 folds choose depend on how many
patients a model was trained on? (DS1 only.)

In rounds 57, 59 and 60 the folds chose a V offset (+2 to +3) for models trained on one fold
(11 DS1 records and the synthetic patients) that under-call V there, and on DS2 the same
recipe trained on all of DS1 (22 records) over-called V at that offset (V sensitivity above
the floor's, precision under it). If a model trained on more patients calls V more readily,
the offset chosen on half of DS1 is too large for one trained on all of it. This probe
trains model_configs.OFFSET_PROBE_RECIPE on each fold's records and on every other one of
them (the synthetic patients whole in both), scores the other fold as `select` does, and
gives, for each size, V's sensitivity and precision at each V offset and the offset that
ranks first by the smallest margin over a floor trained on the same records (the
floor-margin rule, whatever SELECT_RULE says; each seed against its own floor, as `select`
ranks). Round 60's file was written before that last part: its per-seed margins are against
both seeds' floors summed."""

from __future__ import annotations

from typing import Any

import model_configs as cfg
from model_beats import (
    at_offset,
    beat_folders,
    best_offset,
    kept_beat_floor,
    mitdb_keys,
    offset_scores,
    sum_reports,
)
from model_recipes import (
    _inputs,
    beat_data,
    config_of,
    pretrain_variant,
    pretraining_run,
    scoring_args,
)
from model_runner import Runner, run_tag

SIZES = {"fold": 1, "half fold": 2}
"""Training records: a fold's DS1 records, or every other one of them; the synthetic patients
whole in both, as in `select` and `final`, whose real training records differ twofold."""


def size_records(records: list[str], size: str) -> list[str]:
    return records[:: SIZES[size]]


def _offset_table(reports: list[dict[str, Any]], floor: dict[str, Any]) -> dict[str, Any]:
    """For one size: V's sensitivity, precision and F1 at each V offset, the smallest margin of
    SELECT_CLASSES' F1 over the floor's at each class offset, and the offset it ranks first
    (ties: nearest 0)."""
    from heartlm.labelled.offsets import CLASS_OFFSETS

    scores = offset_scores(reports, floor)
    v_grid = []
    for x in CLASS_OFFSETS:
        v = sum_reports([at_offset(rep, "V", x) for rep in reports])["per_class"]["V"]
        v_grid.append({"offset": x, "se": v["se"], "ppv": v["ppv"], "f1": v["f1"]})
    best_v = best_offset({key: score for key, score in scores.items() if key[0] == "V"})
    name, x = best_offset(scores)
    return {"v_offsets": v_grid, "rule_scores": {f"{n}{o:+g}": v for (n, o), v in scores.items()},
            "best_v_offset": best_v[1], "best_offset": f"{name}{x:+g}",
            "floor_v": floor["per_class"]["V"]}  # fmt: skip


def offset_probe(r: Runner) -> dict[str, Any]:
    config = config_of(cfg.OFFSET_PROBE_RECIPE)
    folder = beat_data(config)
    tokens, synthetic = beat_folders(r.work, {folder})
    inputs = _inputs(cfg.CONFIGS[config])

    def train_of(size: str, k: int) -> list[str]:
        return [*size_records(list(cfg.FOLDS[k]), size), *synthetic[folder]]

    def one(size: str, k: int, seed: int) -> tuple[str, int, int, dict[str, Any]]:
        train = train_of(size, k)
        tag = run_tag(cfg.CONFIGS[config], train, 1.0)
        name = f"probe_{size.replace(' ', '')}_fold{k}_s{seed}_{tag}"
        r.finetune(name, "beats", folder, "--records", *train, "--seed", seed,
                   *cfg.CONFIGS[config],
                   pre=pretraining_run(seed, pretrain_variant(config)))  # fmt: skip
        report = r.evaluate(name, "tok_beats", "--records", *cfg.FOLDS[1 - k],
                            *scoring_args(cfg.OFFSET_PROBE_RECIPE))  # fmt: skip
        return size, k, seed, report

    def floor_of(size: str, k: int, seed: int) -> tuple[str, int, int, dict[str, Any]]:
        report = kept_beat_floor(r, folder, tokens[folder], train_of(size, k),
                                 mitdb_keys(cfg.FOLDS[1 - k]), seed, 1.0, inputs)  # fmt: skip
        return size, k, seed, report

    grid = [(size, k, s) for size in SIZES for k in (0, 1) for s in cfg.SELECT_SEEDS]
    # the trees on the CPU while the transformers train on the GPU
    both = r.parallel([*(lambda g=g: one(*g) for g in grid),
                       *(lambda g=g: floor_of(*g) for g in grid)])  # fmt: skip
    found, trees = both[: len(grid)], both[len(grid) :]

    def of(rows: list[tuple[str, int, int, dict[str, Any]]], size: str, seed: int | None = None):
        return [rep for sz, _, ss, rep in rows if sz == size and seed in (None, ss)]

    # each seed's models against the same seed's floor, as `select` ranks them
    sizes = {size: {"training_records": {k: train_of(size, k) for k in (0, 1)},
                    "all_seeds": _offset_table(of(found, size), sum_reports(of(trees, size))),
                    "by_seed": {s: _offset_table(of(found, size, s),
                                                 sum_reports(of(trees, size, s)))
                                for s in cfg.SELECT_SEEDS}}
             for size in SIZES}  # fmt: skip
    return {"recipe": cfg.OFFSET_PROBE_RECIPE, "folds": cfg.FOLDS, "seeds": cfg.SELECT_SEEDS,
            "select_classes": list(cfg.SELECT_CLASSES), "sizes": sizes}  # fmt: skip
