"""Markdown tables of `model_study.py` results: DS1 selection, DS2 mean ± spread over seeds."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
from model_recipes import s_mostly_from_network, select_classes, selection_rule

BEAT_COLUMNS = (
    ("accuracy", lambda r: r["accuracy"]),
    ("N F1", lambda r: r["per_class"]["N"]["f1"]),
    ("S Se", lambda r: r["per_class"]["S"]["se"]),
    ("S +P", lambda r: r["per_class"]["S"]["ppv"]),
    ("S F1", lambda r: r["per_class"]["S"]["f1"]),
    ("V Se", lambda r: r["per_class"]["V"]["se"]),
    ("V +P", lambda r: r["per_class"]["V"]["ppv"]),
    ("V F1", lambda r: r["per_class"]["V"]["f1"]),
    ("F F1", lambda r: r["per_class"]["F"]["f1"]),
)
HELD_OUT_NOTE = (
    "Last four columns: held-out synthetic patients, never trained on (AFIB calls among the "
    "sick-sinus windows; window F1 where half the patients have AF and half atrial flutter; "
    "AFIB calls among their sinus and flutter windows; window F1 on patients whose AF has "
    "10-25 % ventricular beats, from round 37)."
)
HELD_OUT_AFIB_COLUMNS = (  # the held-out synthetic patients (model_configs.PATIENTS)
    ("sick-sinus false alarms", lambda r: r.get("sick_false_alarms", np.nan)),
    ("flutter/AF F1", lambda r: r.get("flutter_f1", np.nan)),
    ("flutter false alarms", lambda r: r.get("flutter_false_alarms", np.nan)),
    ("AF+ectopy F1", lambda r: r.get("ectopy_af_f1", np.nan)),
)
AFIB_COLUMNS = (
    ("threshold", lambda r: r.get("threshold", 0.5)),
    ("F1", lambda r: r["afib"]["f1"]),
    ("Se", lambda r: r["afib"]["se"]),
    ("+P", lambda r: r["afib"]["ppv"]),
    ("AUROC", lambda r: r["afib"]["auroc"] if r["afib"]["auroc"] is not None else np.nan),
    ("episode Se", lambda r: r["afib_episodes"]["se"] if "afib_episodes" in r else np.nan),
    ("episode +P", lambda r: r["afib_episodes"]["ppv"] if "afib_episodes" in r else np.nan),
    *HELD_OUT_AFIB_COLUMNS,
)


def _stopped_where(results: dict[str, Any]) -> str:
    """Where a call that final_from_answers.py read was stopped, by what it lacks."""
    if not results.get("ds2_only"):
        return "after its last evaluation"
    before = "before the held-out patients and the seeds together were scored"
    if unscored := results.get("unscored"):
        return (f"before these runs were scored on DS2: {', '.join(unscored)} (trained; their "
                f"rows are not here), and {before}")  # fmt: skip
    return f"after each run's DS2 evaluation, {before}"


_KEPT_LABELS = [
    "Label shares below 1 are drawn from DS1's labels alone; the synthetic patients keep every "
    "label (`--keep-synthetic-labels`), in the runs and the floors alike.",
    "",
]


def _header(results: dict[str, Any]) -> list[str]:
    machine = ", ".join(f"{k} {v}" for k, v in results["machine"].items())
    soft = ", ".join(f"{k} {v}" for k, v in results["versions"].items())
    corpus = results.get("pretrain_corpus", {})
    return [
        f"{results['date']} on {machine}; {soft}",
        "",
        f"Command: `{results['command']}`"
        + ("" if results["seconds"] is None else f" ({results['seconds']} s)"),
        "",
        *(_KEPT_LABELS if results.get("keep_synthetic_labels") else []),
        *(
            [
                f"Stopped by the call's limit {_stopped_where(results)}; written from its "
                f"kept answers by `{results['assembled']}`, the floor "
                f"rows from `{results['floors_from']}` (the same floor: the "
                f"{results.get('floors_checked', 0)} fit(s) the call finished equal their "
                "rows there).",
                "",
            ]
            if "assembled" in results
            else []
        ),
        f"Pretraining: `heartlm pretrain tok_pre {' '.join(results['pretrain'])}`"
        + "".join(
            f" (variant `{name}`: then `{' '.join(flags)}`"
            + (f", on `{corpus[name]}`" if name in corpus else "")
            + ")"
            for name, flags in results.get("pretrain_variants", {}).items()
            if name
        )
        + "; fine-tuning "
        f"flags: beats `{' '.join(results['finetune']['beats'])}`, AFIB "
        f"`{' '.join(results['finetune']['afib'])}`.",
        "",
    ]


def _table(first: list[str], rows: list[tuple[list[str], list[str]]], columns) -> list[str]:
    names = [*first, *(c[0] for c in columns)]
    lines = ["| " + " | ".join(names) + " |", "|" + " --- |" * len(names)]
    lines += ["| " + " | ".join([*keys, *cells]) + " |" for keys, cells in rows]
    return lines


SELECT_AFIB_COLUMNS = (
    ("F1", lambda r: r["f1"]),
    ("Se", lambda r: r["se"]),
    ("+P", lambda r: r["ppv"]),
    ("chosen threshold", lambda r: r.get("threshold", np.nan)),
    ("F1 there", lambda r: r.get("threshold_f1", np.nan)),
    *HELD_OUT_AFIB_COLUMNS,
)


def _cell(value: float) -> str:
    return f"{value:.3f}" if np.isfinite(value) else "–"


def _selection(results: dict[str, Any], key: str, columns, title: str, how: str) -> list[str]:
    """A selection stage's table: one row per configuration, the floor last."""
    rows = [
        (
            [name, " ".join(results["configs"][name])],
            [_cell(f(rep)) for _, f in columns],
        )
        for name, rep in results[key].items()
    ]
    folds = " / ".join(" ".join(f) for f in results["folds"])
    return [title, "", *_header(results), f"Folds: {folds}. {how}", "",
            *_table(["configuration", "flags"], rows, columns)]  # fmt: skip


SICK_COLUMNS = tuple(c for c in BEAT_COLUMNS if c[0] in ("accuracy", "S Se", "S +P", "S F1"))
SICK_TITLE = (
    "## Held-out synthetic sick-sinus patients (ectopic atrial beats outnumber sinus beats; "
    "never trained on)"
)


def _sick(results: dict[str, Any]) -> list[str]:
    """The generalisation check beside the selection and the DS2 table, when it ran."""
    if results.get("sick_test"):  # select: one summed report per configuration
        rows = [([name], [f"{f(rep):.3f}" for _, f in SICK_COLUMNS])
                for name, rep in results["sick_test"].items()]  # fmt: skip
        return ["", SICK_TITLE, "", *_table(["configuration"], rows, SICK_COLUMNS)]
    runs = [{**r["sick_test"], "init": r["init"], "label_fraction": r["label_fraction"]}
            for r in results.get("beats", []) if "sick_test" in r]  # fmt: skip
    if not runs:
        return []
    table = _table(["DS1 labels", "init", "seeds"], _grouped(runs, SICK_COLUMNS), SICK_COLUMNS)
    return ["", SICK_TITLE, "", *table]


def _stress(results: dict[str, Any]) -> list[str]:
    """`select`'s harder held-out sick-sinus patients (model_configs.SICK_STRESS), when it
    scored them: S sensitivity, S precision (where the rows carry it) and accuracy of each
    reading, folds and seeds together."""
    found = results.get("sick_stress")
    if not found:
        return []
    folders = list(found)
    recipes = list(dict.fromkeys(r for scores in found.values() for r in scores))
    scored = [scores for by_recipe in found.values() for scores in by_recipe.values()]
    columns = [c for c in ("S Se", "S +P", "accuracy") if any(c in s for s in scored)]
    head = ["configuration", *(f"{f}: {c}" for f in folders for c in columns)]
    lines = ["", "## Harder held-out sick-sinus patients (never trained on; one view; not in the "
             "selection rule)", "", "| " + " | ".join(head) + " |",
             "| " + " | ".join("---" for _ in head) + " |"]  # fmt: skip
    for recipe in recipes:
        cells = [f"{found[f][recipe][c]:.3f}"
                 if recipe in found[f] and found[f][recipe].get(c) is not None else ""
                 for f in folders for c in columns]  # fmt: skip
        lines.append("| " + " | ".join([recipe, *cells]) + " |")
    return lines


def _offset_probe(results: dict[str, Any]) -> list[str]:
    """V at each V offset for models trained on a fold's records and on half of them."""
    lines = ["# Class offsets against training size (MIT-BIH DS1 folds; DS2 not read)", "",
             f"`{results['recipe']}` trained on each fold's records or every other one of them "
             "(synthetic patients whole), scored on the other fold; both folds summed, seeds "
             f"{', '.join(map(str, results['seeds']))}. Margin: the smallest of "
             f"{', '.join(results['select_classes'])} F1 less the floor's on the same records.",
             "", "| training | seeds | V offset | V Se | V +P | V F1 | margin |",
             "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for size, found in results["sizes"].items():
        for seeds, table in [("all", found["all_seeds"]), *found["by_seed"].items()]:
            for g in table["v_offsets"]:
                mark = " (best V)" if g["offset"] == table["best_v_offset"] else ""
                margin = table["rule_scores"][f"V{g['offset']:+g}"]
                lines.append(f"| {size} | {seeds} | {g['offset']:+g}{mark} | {g['se']:.3f} | "
                             f"{g['ppv']:.3f} | {g['f1']:.3f} | {margin:+.3f} |")  # fmt: skip
        floor = found["all_seeds"]["floor_v"]
        lines.append(f"| {size} | floor | | {floor['se']:.3f} | {floor['ppv']:.3f} | "
                     f"{floor['f1']:.3f} | |")  # fmt: skip
    lines += ["", "| training | seeds | best offset of any class (margin) |", "| --- | --- | --- |"]
    for size, found in results["sizes"].items():
        for seeds, table in [("all", found["all_seeds"]), *found["by_seed"].items()]:
            best = table["best_offset"]
            lines.append(f"| {size} | {seeds} | {best} ({table['rule_scores'][best]:+.3f}) |")
    return lines


def _select(results: dict[str, Any]) -> list[str]:
    return _selection(
        results,
        "beats",
        BEAT_COLUMNS,
        "# Model selection on MIT-BIH DS1 (two record-wise folds; DS2 not read)",
        "Each configuration trains on one fold (validation records carved from it unless its "
        "flags hold `--val-fraction 0`) and is "
        "scored on the other; confusion matrices summed over both folds"
        + (
            f" and seeds {', '.join(map(str, results['seeds']))}; "
            f"{results['label_fraction']:.0%} of the training fold's labels."
            if "seeds" in results
            else "."
        ),
    )


def _seed_scores(results: dict[str, Any]) -> list[str]:
    """Each recipe's selection score seed by seed (both folds summed): the folds' own noise."""
    scores = results.get("seed_scores")
    if not scores:
        return []
    seeds = list(next(iter(scores.values())))
    classes = select_classes(results)
    named = f"{', '.join(classes[:-1])} and {classes[-1]}" if len(classes) > 1 else classes[0]
    score = {"mean": f"Mean of {named} F1",
             "floor_margin": f"Smallest margin of {named} F1 over the floor's"}  # fmt: skip
    lines = ["", f"## {score[selection_rule(results)]} seed by seed (both folds summed)", "",
             f"| configuration | {' | '.join(f'seed {s}' for s in seeds)} | mean ± std |",
             f"| --- |{' --- |' * (len(seeds) + 1)}"]  # fmt: skip
    for name, by_seed in scores.items():
        values = [by_seed[s] for s in seeds]
        cells = " | ".join(f"{v:.3f}" for v in values)
        lines.append(f"| {name} | {cells} | {np.mean(values):.3f} ± {np.std(values):.3f} |")
    guarded = results.get("s_needs_transformer")  # files of rounds 1-74 do not say: no guard
    if guarded and (barred := [name for name in scores if s_mostly_from_network(name)]):
        lines += ["", "Not chosen, however they rank: S read mostly from the per-beat network "
                  f"(model_configs.S_NEEDS_TRANSFORMER): {', '.join(barred)}."]  # fmt: skip
    return lines


def _grouped(rows: list[dict[str, Any]], columns) -> list[tuple[list[str], list[str]]]:
    groups: dict[tuple[str, float], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["init"], row["label_fraction"])].append(row)
    out = []
    for (init, fraction), members in sorted(groups.items(), key=lambda kv: (-kv[0][1], kv[0][0])):
        cells = []
        together = all("ensemble" in m for m in members)  # one reading: no spread to show
        for _, f in columns:
            values = np.array([f(m) for m in members], dtype=np.float64)
            values = values[np.isfinite(values)]
            if not values.size:
                cells.append("–")
                continue
            spread = "" if together else f" ± {values.std():.3f}"
            cells.append(f"{values.mean():.3f}{spread}")
        seeds = " ".join(map(str, members[0]["ensemble"])) if together else str(len(members))
        out.append(([f"{fraction:.0%}", init, seeds], cells))
    return out


TITLES = {
    "final": "# MIT-BIH DS2: beat classes (scored once; mean ± std over seeds)",
    "final_afib": "# MIT-BIH DS2: AFIB windows (scored once; mean ± std over seeds)",
    "crossfit_afib": "# AFIB: how to call DS2's windows, chosen outside DS2 (nested); then MIT-BIH "
    "DS2 scored once that way (mean ± std over seeds)",
}
"""The heading of each final stage's results file."""


RULES = {"mean": "the mean F1 of its classes",
         "floor_margin": "the smallest margin of its classes' F1 over the floor's"}  # fmt: skip
"""How a final file's heading names the rule (model_configs.SELECT_RULE) its choice was made by."""


def _chosen_by(results: dict[str, Any]) -> str:
    """How a final file's choice was made, as its heading says it (nothing where no rule made
    it: FINAL named the configurations)."""
    if not (rule := results.get("select_rule")):
        return ""
    guarded = results.get("s_needs_transformer")
    return f" (chosen on the folds by {RULES[rule]}" + (
        ", S at least half from the transformer)" if guarded else ")"
    )


def _final(results: dict[str, Any]) -> list[str]:
    g = results["goals"]
    return [
        TITLES[results["stage"]],
        "",
        *_header(results),
        f"Configuration: {results['config']}"
        + _chosen_by(results)
        + f". Goals: accuracy >= {g['accuracy']}, "
        f"V F1 >= {g['V_f1']}, S F1 >= {g['S_f1']}, AFIB F1 >= {g['afib_f1']}.",
        "",
        *(
            [
                "## Beat classes: trained on DS1, scored on all DS2 beats",
                "",
                *_table(
                    ["DS1 labels", "init", "seeds"],
                    _grouped(results["beats"], BEAT_COLUMNS),
                    BEAT_COLUMNS,
                ),
                "",
            ]
            if results["beats"]
            else []
        ),
        *(
            [
                "## AFIB 32-beat windows: trained outside DS2 (MIT-BIH DS1 + paced, LUDB, "
                "synthetic), scored on DS2",
                "",
                HELD_OUT_NOTE,
                "",
                *_table(
                    ["labels", "init", "seeds"],
                    _grouped(results["afib"], AFIB_COLUMNS),
                    AFIB_COLUMNS,
                ),
            ]
            if results["afib"]
            else []
        ),
    ]


def _select_afib(results: dict[str, Any]) -> list[str]:
    return _selection(
        results,
        "afib",
        SELECT_AFIB_COLUMNS,
        "# AFIB selection on real records outside DS2 (two folds; DS2 not read)",
        "The synthetic records train in both folds and are never scored; window counts "
        "pooled over both folds, at 0.5 and at the threshold chosen on the pooled curve (the "
        "best F1 until round 26, the middle of the thresholds within 0.01 of it since; chosen "
        "here, used on DS2 at 100 % of the labels; the held-out columns and the per-record "
        "table at 0.5). "
        f"{HELD_OUT_NOTE}",
    ) + fold_records(results)


def fold_records(results: dict[str, Any]) -> list[str]:
    """Each fold record's false AFIB windows and missed AFIB windows per configuration (the
    records where some configuration erred), so a failure has a name before DS2 is read."""
    runs = {c: [rep["per_record"]] for c, rep in results["afib"].items() if rep.get("per_record")}
    return _record_errors("Per record on the folds", "Configurations", runs)


def _final_afib_records(results: dict[str, Any]) -> list[str]:
    """DS2's records at 100 % of the labels, per initialisation and floor, summed over seeds."""
    runs: dict[str, list[list[dict[str, Any]]]] = {}
    for r in results["afib"]:
        rows = r.get("per_record") or r.get("afib", {}).get("per_record")
        if r["label_fraction"] == 1.0 and rows:
            runs.setdefault(r["init"], []).append(rows)
    seeds = "/".join(str(n) for n in sorted({len(v) for v in runs.values()}))
    title = f"Per record, 100 % of the labels, summed over {seeds} seeds"
    return _record_errors(title, "Columns", runs)


def _record_errors(title: str, legend_name: str, runs: dict[str, list[list[dict]]]) -> list[str]:
    """A table of each record's false AFIB windows / missed AFIB windows per column, each
    column's per-record rows summed over its runs; only the records where some column erred."""
    if not runs:
        return []
    sizes: dict[str, tuple[int, int]] = {}
    errors: dict[str, dict[str, list[int]]] = {}
    for column, rows_per_run in runs.items():
        for rows in rows_per_run:
            for row in rows:
                sizes.setdefault(row["record"], (row["n_windows"], row["n_afib"]))
                fp_fn = errors.setdefault(row["record"], {}).setdefault(column, [0, 0])
                fp_fn[0] += row["fp"]
                fp_fn[1] += row["fn"]
    erred = [r for r, per in errors.items() if any(fp or fn for fp, fn in per.values())]
    if not erred:
        return []
    columns = list(runs)
    legend = "; ".join(f"{i} = {c}" for i, c in enumerate(columns, 1))
    lines = ["", f"## {title}: false AFIB windows / missed AFIB windows", "",
             f"{legend_name}: {legend}.", "",
             "| record | windows | AFIB windows | " + " | ".join(
                 str(i) for i in range(1, len(columns) + 1)) + " |",
             "|" + " --- |" * (3 + len(columns))]  # fmt: skip
    for record in sorted(erred):
        per = errors[record]
        cells = [f"{per[c][0]} / {per[c][1]}" if c in per else "–" for c in columns]
        windows, afib = sizes[record]
        lines.append(f"| {record} | {windows} | {afib} | " + " | ".join(cells) + " |")
    return lines


def per_record_table(results: dict[str, Any]) -> list[str]:
    """The per-record table of the first pretrained run at 100 % of the labels (seed 0) for
    beats; for AFIB every initialisation's and floor's runs (`_final_afib_records`)."""
    if results["afib"]:
        return _final_afib_records(results)
    run = next((r for r in results["beats"]
                if r["init"] == "pretrained" and r["label_fraction"] == 1.0 and "per_record" in r),
               None)  # fmt: skip
    if run is None:
        return []
    rows = run["per_record"]
    classes = [c for c in ("S", "V", "F") if all(c in r for r in rows)]  # F: newer answers
    lines = ["", f"## Per record: pretrained, 100 % of the labels, seed {run['seed']}", ""]
    heads = [f"{c} {h}" for c in classes for h in ("n", "Se", "+P")]
    lines += [f"| record | beats | accuracy | {' | '.join(heads)} |",
              "|" + " --- |" * (3 + len(heads))]  # fmt: skip
    for r in rows:
        sv = [f"{r[c]['support']} | {r[c]['se']:.3f} | {r[c]['ppv']:.3f}" for c in classes]
        acc = "-" if r["accuracy"] is None else f"{r['accuracy']:.3f}"  # no labelled beat
        lines.append(f"| {r['record']} | {r['n_beats']} | {acc} | {' | '.join(sv)} |")
    return lines


def _pretrain(results: dict[str, Any]) -> list[str]:
    """Each pretraining run's validations: training and validation loss per check."""
    lines = ["# Pretraining runs: loss at each validation", "", *_header(results)]
    lines += ["| run | steps | best validation at step | step: training / validation loss "
              "(the per-beat network's validation code loss) |", "|" + " --- |" * 4]  # fmt: skip
    for name, run in sorted(results["pretraining"].items()):
        checks = ", ".join(_validation(c) for c in run["validations"])
        lines.append(f"| {name} | {run['steps']} | {run['best_step']} | {checks} |")
    return lines


def _validation(check: dict[str, Any]) -> str:
    text = f"{check['step']}: {check['loss']:.3f} / {check['val_loss']:.3f}"
    code = check.get("val_beat_code_loss")
    return text if code is None else f"{text} ({code:.3f})"


def _crossfit(results: dict[str, Any]) -> list[str]:
    """crossfit_afib's nested comparison of the rules (outside DS2), before its DS2 table."""
    from afib_crossfit import RULES

    lines = ["", "## How to call DS2's windows, chosen outside DS2 (nested)", ""]
    lines += ["Three groups of the real records outside DS2, one AF patient each: "
              + "; ".join(f"group {i}: {', '.join(g[:3])} ... ({len(g)} records)"
                          for i, g in enumerate(results["groups"]))
              + ". Each group is the test set in turn, the other two the folds; window "
              "counts on the test groups pooled over groups and seeds (F1 / Se / +P). "
              "The rule with the best F1 (ties: the earlier column) scores DS2.", ""]  # fmt: skip
    lines += ["| model | " + " | ".join(RULES) + " | folds' thresholds | chosen |",
              "|" + " --- |" * (len(RULES) + 3)]  # fmt: skip
    for who, nested in results["nested"].items():
        cells = [f"{nested[r]['f1']:.3f} / {nested[r]['se']:.3f} / {nested[r]['ppv']:.3f}"
                 for r in RULES]  # fmt: skip
        thresholds = ", ".join(f"{t:g}" for t in nested["thresholds"].values())
        lines.append(f"| {who} | " + " | ".join(cells)
                     + f" | {thresholds} | {results['rules'][who]} |")  # fmt: skip
    return [*lines, "", f"Recipes: {results['chosen']}.", ""]


def markdown(results: dict[str, Any]) -> str:
    stage = results["stage"]
    if stage == "pretrain":
        lines = _pretrain(results)
    elif stage == "select":
        lines = _select(results) + _seed_scores(results) + _sick(results) + _stress(results)
    elif stage == "select_afib":
        lines = _select_afib(results)
    elif stage == "crossfit_afib":
        lines = _final(results) + _crossfit(results) + per_record_table(results)
    elif stage == "offset_probe":
        lines = _offset_probe(results)
    else:
        lines = _final(results) + _sick(results) + per_record_table(results)
    lines += ["", "## Commands (in the work folder, in order)", ""]
    lines += [
        f"    {c['command']}" + ("" if c["seconds"] is None else f"    # {c['seconds']} s")
        for c in results["commands"]
    ]
    return "\n".join(lines) + "\n"
