"""`crossfit_afib`, a stage of benchmarks/model_study.py: how the AFIB recipes that
`select_afib` chose should call DS2's windows, decided on the records outside DS2, then DS2
scored once that way.

Round 32's transformers scored DS2 under their floor at the threshold the folds chose (0.99):
a threshold read off fold models, each trained on some of the AF patients, and applied to one
model trained on all of them. Two ways to score and two thresholds make four RULES:

- `full_fold`: one model trained on every record, at the folds' threshold (rounds 14-32);
- `full_0.5`: the same model at 0.5;
- `ensemble_fold`: the fold models themselves, their AFIB probabilities averaged
  (`heartlm evaluate --ensemble`), at the folds' threshold: the threshold is then chosen on
  the models that are scored;
- `ensemble_0.5`: the fold models at 0.5.

Nested, outside DS2 only: three groups of the real records, one AF patient in each (AF_PATIENTS)
and the others dealt round-robin. Each group in turn is the test set and the other two are the
folds: a model per fold, and one on both; the folds' threshold is THRESHOLD_RULE on the
out-of-fold curves of every seed, pooled. Each rule's window counts on the test group are
summed over groups and seeds. Each initialisation, and each floor beside it, takes the rule with
the best pooled F1 (ties: the earlier protocol, in RULES order), and is scored on DS2 that way
with the two halves of `model_afib.afib_folds` as its folds; a recipe whose rule is
`full_fold` is not scored again (its round-32 scores stand, DS2_LEDGER)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import model_configs as cfg
import numpy as np
from model_afib import afib_folds, afib_keys, afib_synthetic_keys, held_out_scores
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
)
from model_runner import run_tag

from heartlm import scores as score_fns
from heartlm.labelled import metrics

RULES = ("full_fold", "full_0.5", "ensemble_fold", "ensemble_0.5")
AF_PATIENTS = ("mitdb/201", "mitdb/203", "mitdb/217")
"""The AF patients of MIT-BIH outside DS2, one per nested group (LUDB's 15 AF records are 10 s
long, one window each: they are dealt among the groups with the other records)."""
Curve = list[dict[str, float]]
FLOOR_THREADS = 4
"""LightGBM threads of the floors, which train beside the transformers' fine-tuning runs."""


def afib_groups(data: Any) -> list[list[str]]:
    """Three groups of the real records outside DS2 in the AFIB token folder: one AF patient
    each, the other records dealt in turn (those with AF first, as `afib_folds` deals)."""
    from heartlm.labelled.windows import AFIB

    keys = afib_keys(data)
    if missing := [patient for patient in AF_PATIENTS if patient not in keys]:
        raise SystemExit(f"crossfit_afib: the AFIB token folder lacks {', '.join(missing)}")
    groups = [[patient] for patient in AF_PATIENTS]
    rest = []
    for i, key in enumerate(keys):
        if key.startswith(cfg.ANY_SYNTHETIC) or key in AF_PATIENTS:
            continue
        lo, hi = data.boundaries[i], data.boundaries[i + 1]
        rest.append((not (data.rhythm_label[lo:hi] == AFIB).any(), key))
    for j, (_, key) in enumerate(sorted(rest)):
        groups[j % len(groups)].append(key)
    return groups


def _at(curve: Curve, threshold: float) -> dict[str, int]:
    """tp, fp, fn of a `threshold_counts` curve at one of its thresholds."""
    row = next(r for r in curve if abs(r["threshold"] - threshold) < 1e-12)
    return {k: int(row[k]) for k in ("tp", "fp", "fn")}


def fold_threshold(out_of_fold: list[Curve]) -> float:
    """The threshold the folds choose from their out-of-fold curves (every seed's, pooled)."""
    return cfg.THRESHOLD_RULE(out_of_fold)[0]


def rule_threshold(rule: str, out_of_fold: list[Curve]) -> float:
    return fold_threshold(out_of_fold) if rule.endswith("_fold") else 0.5


def nested_scores(cells: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each rule's window scores pooled over the nested cells. A cell is one test group and
    seed: `group`, `out_of_fold` (that seed's two out-of-fold curves), and the test group's
    curves of the `full` model and of the `ensemble`."""
    by_group: dict[int, list[Curve]] = {}
    for cell in cells:
        by_group.setdefault(cell["group"], []).extend(cell["out_of_fold"])
    out = {}
    for rule in RULES:
        counts = []
        for cell in cells:
            threshold = rule_threshold(rule, by_group[cell["group"]])
            counts.append(_at(cell[rule.split("_")[0]], threshold))
        tp, fp, fn = (sum(c[k] for c in counts) for k in ("tp", "fp", "fn"))
        out[rule] = {"f1": score_fns.f1(tp, fp, fn), "se": score_fns.sensitivity(tp, fn),
                     "ppv": score_fns.positive_predictivity(tp, fp)}  # fmt: skip
    out["thresholds"] = {str(g): fold_threshold(c) for g, c in sorted(by_group.items())}
    return out


def best_rule(nested: dict[str, dict[str, float]]) -> str:
    """The rule with the best pooled F1; ties go to the earlier one in RULES."""
    return max(RULES, key=lambda rule: (nested[rule]["f1"], -RULES.index(rule)))


def _splits(groups: list[list[str]]) -> list[tuple[int, list[str], list[str]]]:
    """(test group, fold a, fold b) for each group in turn."""
    out = []
    for g in range(len(groups)):
        a, b = (groups[i] for i in range(len(groups)) if i != g)
        out.append((g, a, b))
    return out


class Transformer:
    """One AFIB recipe's runs: fine-tuned on given records (with its synthetic folders) and
    evaluated as `select_afib` evaluates them, alone or with `--ensemble`."""

    def __init__(self, r: Any, data: Any, recipe: str) -> None:
        self.r, self.data, self.recipe = r, data, recipe
        self.config, self.views = split_recipe(recipe, cfg.AFIB_CONFIGS)
        self.synthetic = afib_synthetic(self.config)

    def name(self, records: list[str], seed: int) -> str:
        tag = run_tag(cfg.AFIB_CONFIGS[self.config], sorted(records), self.synthetic, seed)
        return f"xfit_afib_{self.config}_s{seed}_{tag}"

    def train(self, records: list[str], seed: int) -> str:
        records = sorted(records)  # one set, one run, whatever order it comes in
        name = self.name(records, seed)
        self.r.finetune(name, "afib", "tok_afib", "--records", *records,
                        *afib_synthetic_keys(self.data, self.synthetic),
                        *cfg.AFIB_CONFIGS[self.config], "--seed", seed,
                        pre=pretraining_run(seed, pretrain_variant(self.config)))  # fmt: skip
        return name

    def called(self, threshold: float = 0.5) -> list[Any]:
        return ["--afib-window", afib_window(), "--afib-threshold", threshold,
                "--views", self.views]  # fmt: skip

    def evaluate(self, names: list[str], folder: str, records: list[str] | None = None,
                 threshold: float = 0.5) -> dict[str, Any]:  # fmt: skip
        chosen = ["--records", *records] if records else []
        ensemble = ["--ensemble", *names[1:]] if len(names) > 1 else []
        return self.r.evaluate(names[0], folder, *chosen, *self.called(threshold), *ensemble)

    def held_out(self, names: list[str], threshold: float) -> dict[str, float]:
        counts = {kind: self.evaluate(names, folder, threshold=threshold)["counts"]
                  for kind, folder in cfg.HELD_OUT.items()}  # fmt: skip
        return held_out_scores(counts)


def _nested_trainings(t: Transformer, groups: list[list[str]]) -> list[Callable[[], str]]:
    """The fine-tuning runs of the nested comparison: each group alone and each pair, per seed."""
    sets = {tuple(recs) for _, a, b in _splits(groups) for recs in (a, b, a + b)}
    return [lambda recs=recs, s=s: t.train(list(recs), s) for recs in sorted(sets)
            for s in cfg.SEEDS]  # fmt: skip


def _nested_cells(t: Transformer, groups: list[list[str]]) -> list[Callable[[], dict]]:
    """One job per test group and seed: the out-of-fold curves of its two fold models, and the
    test group's curves of the model on both folds and of the two averaged."""

    def cell(g: int, a: list[str], b: list[str], seed: int) -> dict[str, Any]:
        fa, fb, full = t.name(a, seed), t.name(b, seed), t.name(a + b, seed)
        test = groups[g]
        return {"group": g, "seed": seed,
                "out_of_fold": [t.evaluate([fa], "tok_afib", b)["threshold_counts"],
                                t.evaluate([fb], "tok_afib", a)["threshold_counts"]],
                "full": t.evaluate([full], "tok_afib", test)["threshold_counts"],
                "ensemble": t.evaluate([fa, fb], "tok_afib", test)["threshold_counts"]}  # fmt: skip

    return [lambda c=c, s=s: cell(*c, s) for c in _splits(groups) for s in cfg.SEEDS]


def _real_records(data: Any) -> list[str]:
    """The AFIB token folder's real records (all outside DS2): what a full model trains on
    beside its synthetic folders."""
    return [k for k in afib_keys(data) if not k.startswith(cfg.ANY_SYNTHETIC)]


def _needs_halves(rule: str) -> bool:
    """Whether `rule` trains the two halves' fold models on DS2's side (to score with, or to
    choose its threshold)."""
    return rule.startswith("ensemble") or rule.endswith("_fold")


def _ds2_transformer(t: Transformer, halves: tuple[list[str], list[str]], rule: str,
                     init: str) -> list[dict[str, Any]]:  # fmt: skip
    """DS2 at 100 % of the labels, `rule`'s way (not `full_fold`)."""
    r = t.r
    real = _real_records(t.data)
    needed = [(half, s) for s in cfg.SEEDS for half in halves] if _needs_halves(rule) else []
    needed += [(real, s) for s in cfg.SEEDS] if rule.startswith("full") else []
    r.parallel([lambda recs=recs, s=s: t.train(recs, s) for recs, s in needed])
    threshold = 0.5
    if rule.endswith("_fold"):
        oof = r.parallel([lambda s=s, k=k: t.evaluate([t.name(halves[k], s)], "tok_afib",
                                                       halves[1 - k])["threshold_counts"]
                          for s in cfg.SEEDS for k in (0, 1)])  # fmt: skip
        threshold = fold_threshold(oof)

    def one(seed: int) -> dict[str, Any]:
        names = ([t.name(half, seed) for half in halves] if rule.startswith("ensemble")
                 else [t.name(real, seed)])  # fmt: skip
        rep = t.evaluate(names, "tok_mitdb", list(cfg.TEST), threshold)
        return {"init": f"{init} ({rule})", "label_fraction": 1.0, "seed": seed,
                "threshold": threshold, **rep, **t.held_out(names, threshold)}  # fmt: skip

    return r.parallel([lambda s=s: one(s) for s in cfg.SEEDS])


class Floor:
    """One LightGBM floor kind (inputs, context, synthetic folders), as `final_afib` trains it,
    with its window probabilities kept so that fold floors can be averaged."""

    def __init__(self, r: Any, data: Any, kind: tuple[str, int, tuple[str, ...]]) -> None:
        from heartlm.train.data import load_tokens

        self.data, (self.inputs, self.context, self.synthetic) = data, kind
        self.name = floor_name(*kind)
        self.mitdb = load_tokens(r.work / "tok_mitdb")
        self.held = [load_tokens(r.work / folder) for folder in cfg.HELD_OUT.values()]

    def scores(self, train: list[str], tests: list[tuple[Any, list[str]]], seed: int) -> list:
        from tree_floor import afib_floor_scores

        records = [*train, *afib_synthetic_keys(self.data, self.synthetic)]
        return afib_floor_scores(self.data, records, tests, window=afib_window(), seed=seed,
                                 threads=FLOOR_THREADS, inputs=self.inputs,
                                 context=self.context)  # fmt: skip


def _nested_floor(f: Floor, groups: list[list[str]]) -> list[dict[str, Any]]:
    cells = []
    for g, a, b in _splits(groups):
        test = [(f.data, groups[g])]
        for seed in cfg.SEEDS:
            (oof_a, test_a), (oof_b, test_b) = (
                f.scores(fold, [(f.data, other), *test], seed) for fold, other in ((a, b), (b, a))
            )
            (full,) = f.scores(a + b, test, seed)
            ensemble = (test_a[1] + test_b[1]) / 2
            curve = metrics.threshold_counts
            cells.append({"group": g, "seed": seed,
                          "out_of_fold": [curve(*oof_a[:2]), curve(*oof_b[:2])],
                          "full": curve(*full[:2]),
                          "ensemble": curve(test_a[0], ensemble)})  # fmt: skip
    return cells


def _ds2_floor(f: Floor, halves: tuple[list[str], list[str]], rule: str) -> list[dict[str, Any]]:
    """The floor on DS2 (and the held-out synthetic patients), `rule`'s way."""
    from tree_floor import afib_report

    real = _real_records(f.data)
    tests = [(f.mitdb, list(cfg.TEST)), *((d, afib_keys(d)) for d in f.held)]
    oof: list[Curve] = []
    members: dict[int, list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]]] = {}
    for seed in cfg.SEEDS:
        if _needs_halves(rule):
            for k in (0, 1):
                first, *rest = f.scores(halves[k], [(f.data, halves[1 - k]), *tests], seed)
                oof.append(metrics.threshold_counts(*first[:2]))
                members.setdefault(seed, []).append(rest)
        if rule.startswith("full"):
            members[seed] = [f.scores(real, tests, seed)]
    threshold = fold_threshold(oof) if rule.endswith("_fold") else 0.5
    rows = []
    for seed, models in members.items():
        reports = []
        for i, (data, _) in enumerate(tests):
            labels, _, record = models[0][i]
            averaged = np.mean([model[i][1] for model in models], axis=0)
            reports.append(afib_report(labels, averaged, record, data, threshold))
        ds2, *held = reports
        held_out = {kind: _counts(rep) for kind, rep in zip(cfg.HELD_OUT, held, strict=True)}
        rows.append({"init": f"{f.name} ({rule})", "label_fraction": 1.0, "seed": seed,
                     "afib": ds2, "threshold": threshold,
                     **held_out_scores(held_out)})  # fmt: skip
    return rows


def floor_study(
    f: Floor, groups: list[list[str]], halves: tuple[list[str], list[str]]
) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    """A floor's nested scores, the rule they choose, and its DS2 rows by that rule."""
    nested = nested_scores(_nested_floor(f, groups))
    rule = best_rule(nested)
    return nested, rule, _ds2_floor(f, halves, rule)


def _counts(report: dict[str, Any]) -> dict[str, int]:
    return {k: report[k] for k in ("tp", "fp", "fn", "tn")}


class Background:
    """A job on a daemon thread. A thread pool joins its workers before the interpreter exits,
    so a failed fine-tuning run would end the stage only once the floors' minutes of CPU work
    were done; a daemon thread lets the failure end it at once."""

    def __init__(self, job: Callable[[], Any]) -> None:
        self._result: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(job,), daemon=True)
        self._thread.start()

    def _run(self, job: Callable[[], Any]) -> None:
        try:
            self._result = job()
        except BaseException as exc:  # handed to result(), in the caller's thread
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result


def crossfit_afib(r: Any) -> dict[str, Any]:
    """The stage: nested rules for each chosen recipe and floor, then DS2 by the winners."""
    import json

    from heartlm.train.data import load_tokens

    path = r.work / "select_afib.json"
    if not path.is_file():
        raise SystemExit(f"{path}: run select_afib first")
    rows = json.loads(path.read_text())["afib"]
    data = load_tokens(r.work / "tok_afib")
    groups, halves = afib_groups(data), afib_folds(data)
    chosen = {init: best_afib(rows, init) for init in ("pretrained", "scratch")}
    nested: dict[str, Any] = {}
    rules: dict[str, str] = {}
    transformers = {init: Transformer(r, data, recipe) for init, recipe in chosen.items()}
    kinds = afib_floor_kinds([config_of(c, cfg.AFIB_CONFIGS) for c in chosen.values()])
    floors = [Floor(r, data, kind) for kind in kinds]
    floor_rows: list[dict[str, Any]] = []
    # The floors train on the CPU while the transformers train on the GPU.
    floor_job = Background(lambda: [floor_study(f, groups, halves) for f in floors])
    r.parallel([job for t in transformers.values() for job in _nested_trainings(t, groups)])
    cells = {init: _nested_cells(t, groups) for init, t in transformers.items()}
    found = r.parallel([job for jobs in cells.values() for job in jobs])
    for init, jobs in cells.items():
        nested[init] = nested_scores(found[: len(jobs)])
        rules[init] = best_rule(nested[init])
        found = found[len(jobs) :]
    for f, (floor_nested, rule, rows_of_floor) in zip(floors, floor_job.result(), strict=True):
        nested[f.name], rules[f.name] = floor_nested, rule
        floor_rows += rows_of_floor
    scored = {init: f"{chosen[init]}_{rules[init]}" for init in chosen
              if rules[init] != "full_fold"}  # fmt: skip
    flags = {init: afib_recipe_flags(chosen[init]) for init in scored}
    try:
        left = unscored("crossfit_afib", scored, flags, r.replicate) if scored else {}
    except SystemExit as listed:  # the nested results and the floors are still written
        print(listed, file=sys.stderr)
        left = {}
    afib_rows: list[dict[str, Any]] = []
    for init in left:
        afib_rows += _ds2_transformer(transformers[init], halves, rules[init], init)
    afib_rows += floor_rows
    return {"config": {f"{init}: {name}": flags[init] for init, name in left.items()},
            "chosen": chosen, "groups": groups, "folds": halves, "nested": nested,
            "rules": rules, "beats": [], "afib": afib_rows}  # fmt: skip
