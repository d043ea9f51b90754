"""The model study's AFIB stages: `select_afib` on two folds of the real records outside DS2,
`final_afib` on DS2."""

from __future__ import annotations

import json
from typing import Any

import model_configs as cfg
import numpy as np
from model_ledger import unscored
from model_recipes import (
    afib_floor_kinds,
    afib_recipe_flags,
    afib_synthetic,
    afib_window,
    best_afib,
    config_of,
    floor_name,
    pretrain_variant,
    pretraining_run,
    split_recipe,
    synthetic_note,
    viewed,
)
from model_runner import Runner, run_tag

from heartlm.labelled.metrics import pooled_curve


def afib_keys(data: Any) -> list[str]:
    """DB/NAME of the AFIB token folder's records (names repeat: LUDB has a 101 too)."""
    return [f"{m['db']}/{m['name']}" for m in data.meta["records"]]


def _afib_grid(
    r: Runner, chosen: dict[str, str], thresholds: dict[str, float]
) -> list[dict[str, Any]]:
    """AFIB fine-tuning on everything outside DS2, scored on DS2, for the seeds x fractions
    x {pretrained, scratch} grid, each initialisation with its own recipe in `chosen`; at
    100 % of the labels windows are called AFIB from each initialisation's threshold in
    `thresholds` (chosen on the folds at 100 %), below at 0.5."""

    from heartlm.train.data import load_tokens

    data = load_tokens(r.work / "tok_afib")

    def afib(init: str, fraction: float, seed: int) -> dict[str, Any]:
        config, views = split_recipe(chosen[init], cfg.AFIB_CONFIGS)
        threshold = thresholds[init] if fraction == 1.0 else 0.5
        called = ["--afib-window", afib_window(), "--afib-threshold", threshold, "--views", views]
        name = f"ft_afib_{init}_{fraction:g}_s{seed}_{run_tag(config, cfg.AFIB_CONFIGS[config])}"
        r.finetune(name, "afib", "tok_afib", *afib_training_records(data, config),
                   "--label-fraction", fraction, "--seed", seed, *cfg.AFIB_CONFIGS[config],
                   pre=pretraining_run(seed, pretrain_variant(config)))  # fmt: skip
        rep = r.evaluate(name, "tok_mitdb", "--records", *cfg.TEST, *called)
        return {"init": init, "label_fraction": fraction, "seed": seed, **rep,
                **_held_out_afib(r, name, threshold, views)}  # fmt: skip

    grid = [(i, f, s) for i in chosen for f in cfg.FRACTIONS for s in cfg.SEEDS]
    return r.parallel([lambda g=g: afib(*g) for g in grid])


def _afib_training_keys(data: Any, synthetic: tuple[str, ...]) -> list[str]:
    """The records an AFIB model or floor trains on for DS2: every real record of the AFIB
    token folder (it holds none of DS2) and the `synthetic` folders' records, in the folder's
    order (with SYNTHETIC: all its records but the AFIB-only ones, as the floors of earlier
    rounds trained)."""
    keys = afib_keys(data)
    return [k for k in keys if k.startswith(synthetic) or not k.startswith(cfg.ANY_SYNTHETIC)]


def afib_training_records(data: Any, config: str) -> list[str]:
    """`--records` for an AFIB configuration's DS2 runs: none where that is the whole token
    folder (as every round before 24 trained), else its records."""
    keys = _afib_training_keys(data, afib_synthetic(config))
    return [] if len(keys) == len(afib_keys(data)) else ["--records", *keys]


def false_alarms(counts: dict[str, int]) -> float:
    """Share of windows called AFIB where none is (the synthetic sick-sinus patients: an
    irregular rhythm with P waves is not atrial fibrillation; flutter is not either)."""
    return counts["fp"] / max(counts["fp"] + counts["tn"], 1)


def held_out_scores(counts: dict[str, dict[str, int]]) -> dict[str, float]:
    """AFIB window scores on the held-out synthetic patients, from their window counts by
    HELD_OUT kind."""
    return {"sick_false_alarms": false_alarms(counts["sick"]),
            "flutter_f1": pooled_scores([counts["flutter"]])["f1"],
            "flutter_false_alarms": false_alarms(counts["flutter"]),
            "ectopy_af_f1": pooled_scores([counts["afib_ectopy"]])["f1"]}  # fmt: skip


def _held_out_afib(
    r: Runner, name: str, threshold: float = 0.5, views: int = 1
) -> dict[str, float]:
    """An AFIB model on the held-out synthetic patients (HELD_OUT)."""
    called = ["--afib-window", afib_window(), "--afib-threshold", threshold, "--views", views]
    return held_out_scores({kind: r.evaluate(name, folder, *called)["counts"]
                             for kind, folder in cfg.HELD_OUT.items()})  # fmt: skip


def _afib_floor_with_held_out(
    r: Runner, folders: tuple[str, str], data: tuple[Any, Any], train: list[str],
    test: list[str], **kw: Any,
) -> tuple[dict[str, Any], dict[str, float]]:  # fmt: skip
    """One AFIB floor, trained as given on the token folder `folders[0]` (its data
    `data[0]`): its scores on `test` of `folders[1]` and on the held-out synthetic patients;
    kept in the work folder (`Runner.remember`), so a resumed call does not fit it again."""
    from tree_floor import afib_floors

    from heartlm.train.data import load_tokens

    def fit() -> dict[str, Any]:
        held_out = [load_tokens(r.work / folder) for folder in cfg.HELD_OUT.values()]
        tests = [(data[1], test), *((d, afib_keys(d)) for d in held_out)]
        report, *held = afib_floors(data[0], train, tests, **kw)
        held_out = held_out_scores(dict(zip(cfg.HELD_OUT, held, strict=True)))
        return {"report": report, "held_out": held_out}

    kept = r.remember(f"afib_floor_{folders[0]}", fit, folders, train, test, sorted(kw.items()))
    return kept["report"], kept["held_out"]


def afib_folds(data: Any) -> tuple[list[str], list[str]]:
    """Two halves of the real records outside DS2, each with AFIB: MIT-BIH 201 in one,
    203 and 217 in the other; LUDB's AFIB records and all other real records alternate.
    Synthetic records (ANY_SYNTHETIC) are never scored and in no fold: a configuration's own
    synthetic folders train in both."""
    from heartlm.labelled.windows import AFIB

    halves: tuple[list[str], list[str]] = ([], [])
    rest = []
    for i, key in enumerate(afib_keys(data)):
        if key.startswith(cfg.ANY_SYNTHETIC):
            continue
        if key in ("mitdb/201",):
            halves[0].append(key)
        elif key in ("mitdb/203", "mitdb/217"):
            halves[1].append(key)
        else:
            lo, hi = data.boundaries[i], data.boundaries[i + 1]
            rest.append((not (data.rhythm_label[lo:hi] == AFIB).any(), key))
    for j, (_, key) in enumerate(sorted(rest)):
        halves[j % 2].append(key)
    return halves


def pooled_scores(counts: list[dict[str, int]]) -> dict[str, float]:
    """F1, Se, +P of window counts summed over folds."""
    from heartlm import scores

    tp, fp, fn = (sum(c[x] for c in counts) for x in ("tp", "fp", "fn"))
    return {
        "f1": scores.f1(tp, fp, fn),
        "se": scores.sensitivity(tp, fn),
        "ppv": scores.positive_predictivity(tp, fp),
    }


def select_afib(r: Runner) -> dict[str, Any]:
    """Every AFIB configuration on both folds of the real records outside DS2."""
    from heartlm.train.data import load_tokens

    data = load_tokens(r.work / "tok_afib")
    folds = afib_folds(data)

    def one(config: str, k: int) -> list[tuple[str, dict[str, Any], dict[str, float]]]:
        synthetic = afib_synthetic(config)
        other = [] if synthetic == cfg.SYNTHETIC else [synthetic]  # earlier rounds' names kept
        name = f"sel_afib_{config}_fold{k}_{run_tag(cfg.AFIB_CONFIGS[config], folds[k], *other)}"
        r.finetune(name, "afib", "tok_afib", "--records", *folds[k],
                   *afib_synthetic_keys(data, synthetic), *cfg.AFIB_CONFIGS[config],
                   pre=pretraining_run(0, pretrain_variant(config)))  # fmt: skip
        return [(viewed(config, views),
                 r.evaluate(name, "tok_afib", "--records", *folds[1 - k], "--afib-window",
                            afib_window(), "--views", views),
                 _held_out_afib(r, name, views=views)) for views in (1, cfg.VIEWS)]  # fmt: skip

    def mean_held_out(held_out: list[dict[str, float]]) -> dict[str, float]:
        return {key: float(np.mean([h[key] for h in held_out])) for key in held_out[0]}

    runs = r.parallel([lambda c=c, k=k: one(c, k) for c in cfg.AFIB_CONFIGS for k in (0, 1)])
    found = [scored for run in runs for scored in run]
    recipes = [viewed(c, views) for c in cfg.AFIB_CONFIGS for views in (1, cfg.VIEWS)]
    rows = {c: pooled_scores([rep["counts"] for cc, rep, _ in found if cc == c]) for c in recipes}
    for c in recipes:
        rows[c].update(mean_held_out([h for cc, _, h in found if cc == c]))
        rows[c].update(fold_threshold_choice([rep for cc, rep, _ in found if cc == c]))
        # each real record is scored in exactly one fold: its row comes from that fold
        rows[c]["per_record"] = [row for cc, rep, _ in found if cc == c
                                 for row in rep.get("per_record", [])]  # fmt: skip
    configs = {c: afib_recipe_flags(c) for c in recipes}
    for inputs, context, synthetic in afib_floor_kinds(list(cfg.AFIB_CONFIGS)):
        synth = afib_synthetic_keys(data, synthetic)
        floors = [_afib_floor_with_held_out(r, ("tok_afib", "tok_afib"), (data, data),
                                            folds[k] + synth, folds[1 - k], window=afib_window(),
                                            inputs=inputs, context=context)
                  for k in (0, 1)]  # fmt: skip
        reports = [rep for rep, _ in floors]
        floor = floor_name(inputs, context, synthetic)
        rows[floor] = {**pooled_scores(reports), **fold_threshold_choice(reports),
                       **mean_held_out([h for _, h in floors])}  # fmt: skip
        configs[floor] = _floor_flags(inputs, context, synthetic)
    return {"folds": folds, "configs": configs, "afib": rows}


def afib_synthetic_keys(data: Any, synthetic: tuple[str, ...]) -> list[str]:
    """The AFIB token folder's records in the `synthetic` folders."""
    return [k for k in afib_keys(data) if k.startswith(synthetic)]


def _floor_flags(inputs: str, context: int, synthetic: tuple[str, ...]) -> list[str]:
    """How an AFIB floor was made, as the tables record it."""
    return ["tree_floor.py", "--inputs", inputs, "--context", str(context),
            *synthetic_note(synthetic)]  # fmt: skip


def fold_threshold_choice(reports: list[dict[str, Any]]) -> dict[str, float]:
    """The AFIB decision threshold chosen on the window F1 pooled over the folds' reports
    (`threshold_counts`) by THRESHOLD_RULE, and the F1 there: used on DS2 as it is. The
    pooled curve and each fold's are kept beside it, so that another rule can be tried on
    the folds' results later without training again (DS2's rows keep their curves too)."""
    curves = [rep["threshold_counts"] for rep in reports]
    threshold, f1 = cfg.THRESHOLD_RULE(curves)
    return {"threshold": threshold, "threshold_f1": f1, "threshold_curve": pooled_curve(curves),
            "fold_curves": curves}  # fmt: skip


def final_afib(r: Runner) -> dict[str, Any]:
    """For each initialisation (pretrained, scratch) the AFIB configuration select_afib found
    best (window F1 pooled over its folds, each configuration at its own fold-chosen
    threshold), as `final` does for beats. At 100 % of the labels DS2 is scored at the
    thresholds the folds chose for the two recipes and for the floors beside them (one per
    inputs and context the recipes use); at 10 % and 1 % (the selection did not see them)
    at 0.5."""
    from heartlm.train.data import load_tokens

    path = r.work / "select_afib.json"
    if not path.is_file():
        raise SystemExit(f"{path}: run select_afib first")
    rows = json.loads(path.read_text())["afib"]
    chosen = {init: best_afib(rows, init) for init in ("pretrained", "scratch")}
    flags = {init: afib_recipe_flags(c) for init, c in chosen.items()}
    chosen = unscored("final_afib", chosen, flags, r.replicate)
    configs = {f"{init}: {c}": flags[init] for init, c in chosen.items()}
    thresholds = {init: float(rows[c].get("threshold", 0.5)) for init, c in chosen.items()}
    afib_rows = _afib_grid(r, chosen, thresholds)
    mitdb, afib_data = load_tokens(r.work / "tok_mitdb"), load_tokens(r.work / "tok_afib")
    kinds = afib_floor_kinds([config_of(c, cfg.AFIB_CONFIGS) for c in chosen.values()])
    for inputs, context, synthetic in kinds:
        floor = floor_name(inputs, context, synthetic)
        floor_threshold = rows.get(floor, {}).get("threshold", 0.5)
        train = _afib_training_keys(afib_data, synthetic)
        for fraction in cfg.FRACTIONS:
            threshold = floor_threshold if fraction == 1.0 else 0.5
            for seed in cfg.SEEDS:
                kw = {"seed": seed, "fraction": fraction, "inputs": inputs, "context": context,
                      "window": afib_window(), "threshold": threshold}  # fmt: skip
                rep, held_out = _afib_floor_with_held_out(
                    r, ("tok_afib", "tok_mitdb"), (afib_data, mitdb), train, list(cfg.TEST), **kw
                )
                afib_rows.append({"init": floor,
                                  "label_fraction": fraction, "seed": seed, "afib": rep,
                                  "threshold": threshold, **held_out})  # fmt: skip
    return {"config": configs, "beats": [], "afib": afib_rows}
