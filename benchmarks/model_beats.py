"""The model study's beat stages: `select` on two record-wise folds of DS1, `final` on DS2."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import model_configs as cfg
import numpy as np
from model_ledger import unscored
from model_recipes import (
    beat_data,
    beat_floor_kinds,
    best_of_each_init,
    best_pair,
    choice_rule,
    config_of,
    data_note,
    ensembled,
    floor_name,
    folder_synthetic,
    offsetted,
    pair_members,
    pair_recipe_flags,
    pretrain_variant,
    pretraining_run,
    recipe_flags,
    rule_floor,
    scoring_args,
    select_score,
    shared,
    viewed,
    views_of,
    voting_pair_flags,
)
from model_runner import Runner, run_tag

from heartlm.ecg.labels import AAMI_CLASSES


def mitdb_keys(names: Sequence[str]) -> list[str]:
    """DB/NAME of MIT-BIH records: in BEATS_LEADS a plain name also takes the record's copy,
    which is never scored."""
    return [f"mitdb/{name}" for name in names]


def sum_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    from heartlm.labelled import metrics

    cm = np.sum([np.asarray(rep["confusion"]) for rep in reports], axis=0)
    return {
        "accuracy": metrics.accuracy(cm),
        "per_class": metrics.class_scores(cm),
        "confusion": cm.tolist(),
        "n_beats": int(cm.sum()),
    }


def at_offset(report: dict[str, Any], name: str, offset: float) -> dict[str, Any]:
    """An evaluation's report as the same models would score with class `name`'s offset at
    `offset` (its `offset_counts`; the other classes at the evaluation's own offsets)."""
    counts = report["offset_counts"]
    return {"confusion": counts["confusion"][name][counts["offsets"].index(offset)]}


def offset_scores(
    reports: list[dict[str, Any]], floor: dict[str, Any] | None
) -> dict[tuple[str, float], float]:
    """The evaluations' summed confusion matrices ranked by `select_score` (against `floor`,
    or by the mean where it is None) at each class offset of OFFSET_CLASSES x CLASS_OFFSETS,
    the other classes at the evaluations' own."""
    from heartlm.labelled.offsets import CLASS_OFFSETS

    return {(name, x): select_score(sum_reports([at_offset(rep, name, x) for rep in reports]),
                                    cfg.SELECT_CLASSES, floor)
            for name in cfg.OFFSET_CLASSES for x in CLASS_OFFSETS}  # fmt: skip


def best_offset(scores: dict[tuple[str, float], float]) -> tuple[str, float]:
    """The (class, offset) that ranks first; of offsets that rank alike the one nearest 0, then
    the first class of OFFSET_CLASSES."""
    return max(scores, key=lambda k: (scores[k], -abs(k[1])))


def add_offset_rows(
    found: list[tuple[str, int, dict, dict]],
    recipes: list[str],
    rows: dict[str, Any],
    held_out: dict[str, Any],
    floors: dict[str, Any],
    seed_scores: dict[str, Any],
    seed_score: Callable[[str, int, list[dict[str, Any]]], float],
) -> list[str]:
    """For each recipe, the class offset of OFFSET_CLASSES x CLASS_OFFSETS that ranks its
    summed fold row highest by SELECT_RULE, added as a row of its own (`offsetted`) where it
    ranks above the recipe without one; the names added. Evaluations of a heartlm that did not
    count offsets (no `offset_counts`) add none."""
    added = []
    for recipe in recipes:
        mine = [(seed, rep, sick) for c, seed, rep, sick in found if c == recipe]
        if not mine or any("offset_counts" not in rep for _, rep, _ in mine):
            continue
        floor = rule_floor(floors, recipe, cfg.SELECT_RULE)
        scores = offset_scores([rep for _, rep, _ in mine], floor)
        name, x = best_offset(scores)
        if x == 0 or scores[name, x] <= select_score(rows[recipe], cfg.SELECT_CLASSES, floor):
            continue
        row = offsetted(recipe, name, x)
        rows[row] = sum_reports([at_offset(rep, name, x) for _, rep, _ in mine])
        held_out[row] = sum_reports([at_offset(sick, name, x) for _, _, sick in mine])
        seed_scores[row] = {
            s: seed_score(row, s, [at_offset(rep, name, x) for ss, rep, _ in mine if ss == s])
            for s in cfg.SELECT_SEEDS
        }  # fmt: skip
        added.append(row)
    return added


def kept_beat_floor(r: Runner, folder: str, data: Any, train: list[str], test: list[str],
                    seed: int, fraction: float, inputs: str) -> dict[str, Any]:  # fmt: skip
    """The LightGBM floor's report (tree_floor.beat_floor) on `data`, token folder `folder`,
    kept in the work folder so that a resumed call does not fit it again; its labels drawn
    as the runs beside it draw theirs (labels_kept_whole)."""
    from tree_floor import beat_floor

    whole = labels_kept_whole(train, fraction)
    return r.remember(
        f"floor_{inputs}_{folder}",
        lambda: beat_floor(data, train, test, seed, fraction=fraction, inputs=inputs,
                           whole=whole),
        folder, train, test, seed, fraction, inputs, *([whole] if whole else []),
    )  # fmt: skip


def labels_kept_whole(train: list[str], fraction: float) -> list[str]:
    """The databases of `train`'s synthetic patients whose labels stay whole at `fraction`
    (KEEP_SYNTHETIC_LABELS, below 1; none otherwise): `train` names DS1's records bare and
    the synthetic patients' as DB/NAME (synthetic_keys)."""
    if fraction == 1.0 or not cfg.KEEP_SYNTHETIC_LABELS:
        return []
    return sorted({key.split("/")[0] for key in train if "/" in key})


def kept_labels_note() -> list[str]:
    """What a recipe's recorded flags add under KEEP_SYNTHETIC_LABELS (nothing otherwise, so
    earlier rounds' flags stay as they were): the DS2 ledger then tells its rows apart."""
    return ["(label shares of", "DS1's labels alone)"] if cfg.KEEP_SYNTHETIC_LABELS else []


def label_share(train: list[str], fraction: float) -> list[Any]:
    """finetune's flags for the labels of `train` at `fraction` (labels_kept_whole)."""
    whole = labels_kept_whole(train, fraction)
    return ["--label-fraction", fraction, *(["--keep-labels-of", ",".join(whole)] if whole else [])]


def synthetic_keys(data: Any, folders: tuple[str, ...] | None = None) -> list[str]:
    """DB/NAME of the records of the synthetic patient `folders` (TRAIN_SYNTHETIC unless
    given) inside a token folder."""
    wanted = cfg.TRAIN_SYNTHETIC if folders is None else folders
    return [f"{m['db']}/{m['name']}" for m in data.meta["records"]
            if m.get("db") in wanted]  # fmt: skip


def beat_folders(work: Path, folders: set[str]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """tok_beats and the beat token `folders` of `work`, each loaded once, and each folder's
    synthetic training records (folder_synthetic)."""
    from heartlm.train.data import load_tokens

    loaded = {f: load_tokens(work / f) for f in sorted({"tok_beats", *folders})}
    return loaded, {f: synthetic_keys(d, folder_synthetic(f)) for f, d in loaded.items()}


def select(r: Runner) -> dict[str, Any]:
    """Every configuration on both DS1 folds (train on one with the TRAIN_SYNTHETIC records,
    score the other), summed; and each model on the held-out sick-sinus records."""
    tokens, synthetic = beat_folders(r.work, {beat_data(c) for c in cfg.CONFIGS})

    def train_of(config: str, k: int) -> list[str]:
        return [*cfg.FOLDS[k], *synthetic[beat_data(config)]]

    def name_of(config: str, k: int, seed: int) -> str:
        tag = run_tag(cfg.CONFIGS[config], train_of(config, k), cfg.SELECT_FRACTION)
        return f"sel_{config}_fold{k}_s{seed}_{tag}"

    def one(config: str, k: int, seed: int) -> list[tuple[str, int, dict, dict, dict | None]]:
        """Each scoring's (recipe, seed, fold report, HELD_OUT sick-sinus report, SICK_STRESS
        report at one view or None)."""
        train, test = train_of(config, k), cfg.FOLDS[1 - k]
        name = name_of(config, k, seed)
        r.finetune(name, "beats", beat_data(config), "--records", *train, "--seed", seed,
                   *label_share(train, cfg.SELECT_FRACTION), *cfg.CONFIGS[config],
                   pre=pretraining_run(seed, pretrain_variant(config)))  # fmt: skip
        scorings = [(viewed(config, views), views, []) for views in (1, cfg.VIEWS)]
        scorings += [(shared(config, share), 1, ["--beat-mlp-share", share])
                     for share in cfg.BEAT_MLP_SHARES.get(config, ())]  # fmt: skip
        return [
            (
                recipe,
                seed,
                r.evaluate(name, "tok_beats", "--records", *test, "--views", views, *more),
                r.evaluate(name, cfg.HELD_OUT["sick"], "--views", views, *more),
                r.evaluate(name, cfg.SICK_STRESS_TOKENS, "--views", views, *more)
                if views == 1
                else None,
            )
            for recipe, views, more in scorings
        ]

    def ensemble(config: str, k: int, views: int) -> tuple[str, dict[str, Any] | None]:
        """The fold's models of every seed, their class probabilities averaged (None in a
        resumed call that does not have them all)."""
        first, *more = [name_of(config, k, s) for s in cfg.SELECT_SEEDS]
        rep = r.evaluate_trained(first, "tok_beats", "--records", *cfg.FOLDS[1 - k],
                                 "--views", views, "--ensemble", *more)  # fmt: skip
        return ensembled(viewed(config, views)), rep

    grid = [(c, k, s) for c in cfg.CONFIGS for k in (0, 1) for s in cfg.SELECT_SEEDS]
    scored = [row for rows in r.parallel([lambda g=g: one(*g) for g in grid]) for row in rows]
    found = [row[:4] for row in scored]
    stress = [(recipe, rep) for recipe, *_, rep in scored if rep is not None]
    recipes = list(dict.fromkeys(recipe for recipe, *_ in found))
    rows = {c: sum_reports([rep for cc, _, rep, _ in found if cc == c]) for c in recipes}
    held_out = {c: sum_reports([rep for cc, _, _, rep in found if cc == c]) for c in recipes}
    configs = {c: [*recipe_flags(c), *kept_labels_note()] for c in recipes}
    floors: dict[str, dict[str, Any]] = {}
    seed_floors: dict[int, dict[str, Any]] = {s: {} for s in cfg.SELECT_SEEDS}
    for inputs, folder in beat_floor_kinds(list(cfg.CONFIGS)):
        by_seed = {s: [kept_beat_floor(r, folder, tokens[folder],
                                       [*cfg.FOLDS[k], *synthetic[folder]],
                                       mitdb_keys(cfg.FOLDS[1 - k]), s, cfg.SELECT_FRACTION,
                                       inputs) for k in (0, 1)]
                   for s in cfg.SELECT_SEEDS}  # fmt: skip
        floor = floor_name(inputs, data=folder)
        floors[floor] = sum_reports([rep for reps in by_seed.values() for rep in reps])
        for s, reps in by_seed.items():
            seed_floors[s][floor] = sum_reports(reps)
        configs[floor] = ["tree_floor.py", "--inputs", inputs, *data_note(folder)]

    def seed_score(name: str, seed: int, reports: list[dict[str, Any]]) -> float:
        """One seed's score by SELECT_RULE, against the same seed's floor."""
        floor = rule_floor(seed_floors[seed], name, cfg.SELECT_RULE)
        return select_score(sum_reports(reports), cfg.SELECT_CLASSES, floor)

    seed_scores = {
        c: {s: seed_score(c, s, [rep for cc, ss, rep, _ in found if (cc, ss) == (c, s)])
            for s in cfg.SELECT_SEEDS}
        for c in recipes
    }  # fmt: skip
    offset_rows = add_offset_rows(found, recipes, rows, held_out, floors, seed_scores, seed_score)
    configs |= {row: recipe_flags(row) for row in offset_rows}
    if len(cfg.SELECT_SEEDS) > 1:
        egrid = [(c, k, views) for c in cfg.CONFIGS for views in (1, cfg.VIEWS) for k in (0, 1)]
        pooled = r.parallel([lambda g=g: ensemble(*g) for g in egrid])
        for name in dict.fromkeys(n for n, _ in pooled):
            reports = [rep for n, rep in pooled if n == name]
            if None not in reports:  # both folds, or no row
                rows[name] = sum_reports(reports)
    measure_voting_pairs(r, name_of, rows, seed_scores, seed_score)
    configs |= {pair: voting_pair_flags(pair) for pair in cfg.VOTING_PAIRS if pair in rows}
    seeds_text = " ".join(map(str, cfg.SELECT_SEEDS))
    configs |= {ensembled(c): [*recipe_flags(c), f"(evaluate --ensemble: seeds {seeds_text})"]
                for c in recipes if ensembled(c) in rows}  # fmt: skip
    rows |= floors  # the floor last
    return {"folds": cfg.FOLDS, "label_fraction": cfg.SELECT_FRACTION, "seeds": cfg.SELECT_SEEDS,
            "configs": configs, "beats": rows, "sick_test": held_out,
            "sick_stress": stress_scores(stress),
            "select_classes": list(cfg.SELECT_CLASSES), **choice_rule(),
            "seed_scores": seed_scores}  # fmt: skip


def _pooled_precision(rows: list[dict[str, Any]], c: int) -> float | None:
    """Class `c`'s precision over per-record rows' confusion matrices summed (None if a row
    has no matrix or no beat was called `c`)."""
    if not all("confusion" in row for row in rows):
        return None
    pooled = np.sum([row["confusion"] for row in rows], axis=0)
    called = int(pooled[:, c].sum())
    return float(pooled[c, c] / called) if called else None


def stress_scores(found: list[tuple[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each SICK_STRESS folder's S sensitivity, S precision and accuracy per recipe, over the
    evaluations of `found` (recipe, report) together, from their per-record rows (precision
    from their confusion matrices: None where a row has none, as before round 72, or no beat
    was called S)."""
    out: dict[str, dict[str, Any]] = {}
    for folder in cfg.SICK_STRESS:
        for recipe in dict.fromkeys(name for name, _ in found):
            # a record without a labelled beat has no accuracy to weigh
            rows = [row for name, rep in found if name == recipe
                    for row in rep.get("per_record", [])
                    if row["record"].split("/")[0] == folder and row["n_beats"]]  # fmt: skip
            if not rows:
                continue
            s_beats = sum(row["S"]["support"] for row in rows)
            beats = sum(row["n_beats"] for row in rows)
            out.setdefault(folder, {})[recipe] = {
                "S beats": s_beats,
                "S Se": sum(row["S"]["se"] * row["S"]["support"] for row in rows) / s_beats
                if s_beats
                else None,
                "S +P": _pooled_precision(rows, AAMI_CLASSES.index("S")),
                "accuracy": sum(row["accuracy"] * row["n_beats"] for row in rows) / beats,
            }
    return out


def measure_voting_pairs(
    r: Runner,
    name_of: Callable[[str, int, int], str],
    rows: dict[str, Any],
    seed_scores: dict[str, Any],
    seed_score: Callable[[str, int, list[dict[str, Any]]], float],
) -> None:
    """Add to `rows` and `seed_scores` each VOTING_PAIRS row whose two configurations are in
    CONFIGS: their fold models of one fold and seed voting together, VIEWS views; no row
    where a resumed call lacks a member's weights. `seed_score` scores one seed's reports."""

    def vote(pair: str, k: int, seed: int) -> tuple[str, int, dict[str, Any] | None]:
        first, second = (name_of(c, k, seed) for c in cfg.VOTING_PAIRS[pair])
        rep = r.evaluate_trained(first, "tok_beats", "--records", *cfg.FOLDS[1 - k],
                                 "--views", cfg.VIEWS, "--ensemble", second)  # fmt: skip
        return pair, seed, rep

    pairs = [p for p, members in cfg.VOTING_PAIRS.items() if set(members) <= set(cfg.CONFIGS)]
    grid = [(p, k, s) for p in pairs for k in (0, 1) for s in cfg.SELECT_SEEDS]
    found = r.parallel([lambda g=g: vote(*g) for g in grid])
    for pair in pairs:
        reports = [(seed, rep) for p, seed, rep in found if p == pair]
        if any(rep is None for _, rep in reports):
            continue
        rows[pair] = sum_reports([rep for _, rep in reports])
        seed_scores[pair] = {
            s: seed_score(pair, s, [rep for seed, rep in reports if seed == s])
            for s in cfg.SELECT_SEEDS
        }  # fmt: skip


def final(r: Runner) -> dict[str, Any]:
    """DS1 -> DS2 for beat classes with the configuration `select` chose for each
    initialisation, and the VOTING_PAIRS row that beat both its members on the folds
    (best_pair); 3 seeds."""
    chosen = (best_of_each_init(r.work / "select.json") if cfg.FINAL == "auto"
              else {init: cfg.FINAL for init in ("pretrained", "scratch")})  # fmt: skip
    flags = {init: [*recipe_flags(name), *kept_labels_note()] for init, name in chosen.items()}
    if cfg.FINAL == "auto" and (pair := best_pair(r.work / "select.json")):
        chosen["pair"], flags["pair"] = pair, [*pair_recipe_flags(pair), *kept_labels_note()]
    chosen = unscored("final", chosen, flags, r.replicate)
    configs = {f"{init}: {name}": flags[init] for init, name in chosen.items()}
    pair = chosen.pop("pair", None)
    voters = pair_members(pair) if pair else []
    runs = list(dict.fromkeys([*((i, config_of(n)) for i, n in chosen.items()), *voters]))

    floor_kinds = beat_floor_kinds([config for _, config in runs])
    tokens, synthetic = beat_folders(r.work, {folder for _, folder in floor_kinds})

    def train_of(config: str) -> list[str]:
        return [*cfg.TRAIN, *synthetic[beat_data(config)]]

    def name_of(init: str, config: str, fraction: float, seed: int) -> str:
        tag = run_tag(config, cfg.CONFIGS[config], train_of(config))
        return f"ft_beats_{init}_{fraction:g}_s{seed}_{tag}"

    def tune(init: str, config: str, fraction: float, seed: int) -> str:
        name = name_of(init, config, fraction, seed)
        flags = [f for f in cfg.CONFIGS[config] if f != "--from-scratch"]
        scratch = ["--from-scratch"] if init == "scratch" else []
        r.finetune(name, "beats", beat_data(config), "--records", *train_of(config),
                   *label_share(train_of(config), fraction), "--seed", seed, *flags, *scratch,
                   pre=pretraining_run(seed, pretrain_variant(config)))  # fmt: skip
        return name

    def beats(init: str, config: str, fraction: float, seed: int) -> dict[str, Any] | None:
        """A run trained and, where it is an initialisation's choice, scored alone."""
        name = tune(init, config, fraction, seed)
        if chosen.get(init) is None or config_of(chosen[init]) != config:
            return None  # a pair's member only
        scored = ["--views", views_of(chosen[init]), *scoring_args(chosen[init])]
        # DS2 only, not the synthetic records
        rep = r.evaluate(name, "tok_beats", "--records", *cfg.TEST, *scored)
        held_out = r.evaluate(name, cfg.HELD_OUT["sick"], *scored)
        return {"init": init, "label_fraction": fraction, "seed": seed, **rep,
                "sick_test": sum_reports([held_out])}  # fmt: skip

    def vote(fraction: float, seed: int) -> dict[str, Any]:
        """The pair's two members of one label share and seed voting together, as `select`
        measured it. Asked in a job that names both runs (trained already, or deferred by
        RESUME), so that its answer marks them answered: a resumed call neither drops the
        row nor trains a pair-only member again (`model_runner.Runner.parallel`)."""
        first, second = (tune(i, c, fraction, seed) for i, c in voters)
        rep = r.evaluate(first, "tok_beats", "--records", *cfg.TEST, "--views", cfg.VIEWS,
                         "--ensemble", second)  # fmt: skip
        # one model per seed, with a spread: not a row of runs read together (`ensemble`)
        rep = {k: v for k, v in rep.items() if k != "ensemble"}
        return {"init": "pair", "label_fraction": fraction, "seed": seed,
                "voters": [first, second], **rep}  # fmt: skip

    def together(init: str, fraction: float) -> dict[str, Any] | None:
        """The seeds' models of one label share, their class probabilities averaged: no
        training of its own, so no spread (round 45: on the folds +0.029 for the pretrained
        recipe); None in a resumed call that does not have them all."""
        first, *more = [name_of(init, config_of(chosen[init]), fraction, seed)
                        for seed in cfg.SEEDS]  # fmt: skip
        scored = ["--views", views_of(chosen[init]), *scoring_args(chosen[init])]
        rep = r.evaluate_trained(first, "tok_beats", "--records", *cfg.TEST, *scored,
                                 "--ensemble", *more)  # fmt: skip
        if rep is None:
            return None
        return {"init": f"{init}, {len(cfg.SEEDS)} seeds together", "label_fraction": fraction,
                "ensemble": list(cfg.SEEDS), **rep}  # fmt: skip

    grid = [(i, c, f, s) for i, c in runs for f in cfg.FRACTIONS for s in cfg.SEEDS]
    beat_rows = [row for row in r.parallel([lambda g=g: beats(*g) for g in grid]) if row]
    if pair:
        beat_rows += r.parallel([lambda f=f, s=s: vote(f, s)
                                 for f in cfg.FRACTIONS for s in cfg.SEEDS])  # fmt: skip
    if len(cfg.SEEDS) > 1:
        shares = [(i, f) for i in chosen for f in cfg.FRACTIONS]
        found = r.parallel([lambda p=p: together(*p) for p in shares])
        beat_rows += [row for row in found if row is not None]
    for inputs, folder in floor_kinds:
        floor_train = [*cfg.TRAIN, *synthetic[folder]]
        for fraction in cfg.FRACTIONS:
            # the same share of DS1's labels; scored, as above, on all of DS2
            for seed in cfg.SEEDS:
                rep = kept_beat_floor(r, folder, tokens[folder], floor_train, mitdb_keys(cfg.TEST),
                                      seed, fraction, inputs)  # fmt: skip
                beat_rows.append({"init": floor_name(inputs, data=folder),
                                  "label_fraction": fraction, "seed": seed, **rep})  # fmt: skip
    rule = choice_rule() if cfg.FINAL == "auto" else {}
    return {"config": configs, **rule, "beats": beat_rows, "afib": []}
