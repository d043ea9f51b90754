"""Write `final`'s result files from the kept answers of a device call that its time limit
stopped after every run was trained and scored on DS2, before the floors were fitted.

    python benchmarks/final_from_answers.py CALL/finetune_runs.tar.gz --log CALL/model_study.log \
        --pretrain CALL/pretrain.json --select select_roundNN.json \
        --floors benchmarks/results/h100/model_study/final_roundMM.json --out OUT \
        [--no-s-guard: a call of round 74 or earlier] [--ds2-only: stopped before the held-out
        patients and the seeds together were scored] [--partial: stopped before some runs'
        DS2 answers too] [--fractions SHARE...: the call's own `model_study.py --fractions`]

Every transformer row is the answer the call kept for the command `final` asks (each
fine-tuning run's DS2 and held-out evaluation, each label share's seeds together), checked
against the recipe the selection chose: the run's fine-tuning command in the call's log (data
folder, flags, initialisation), the evaluation's views, class offset and ensemble members.
The ledger is not consulted (the call scored these recipes; this reads its answers), and
neither is the heartlm source digest an answer was kept under (the code that made it is the
call's commit). The floor rows are read
from an earlier round's final file whose floor has the same inputs, training folder, label
shares and seeds: the floor is a LightGBM tree on the tokens, which the GPU machine makes the
same in every call (rounds 53 and 54's floor rows are identical), so a call need not fit it
again; each floor the call did fit before it was stopped must equal its row there. DS2 is
not read here: it was scored in the call, once.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import tarfile
import zlib
from pathlib import Path
from typing import Any

import model_configs as cfg
from model_beats import mitdb_keys, sum_reports
from model_recipes import (
    beat_data,
    beat_floor_kinds,
    best_of_each_init,
    best_pair,
    choice_rule,
    config_of,
    floor_name,
    recipe_flags,
    scoring_args,
    views_of,
)
from model_study import only_fractions
from model_tables import markdown

from heartlm.outdir import atomic_write_text
from heartlm.tokens.codebook import VERSION as CODEBOOK_VERSION

RUN = re.compile(r"ft_beats_(?P<init>pretrained|scratch)_(?P<fraction>[\d.]+)_s(?P<seed>\d+)_")
COMMAND = re.compile(r"\$ (heartlm .*?)\s*(?=\$ heartlm |$)")
"""One command of the call's log (parallel jobs' output can share a line)"""


def logged_commands(log: str) -> list[str]:
    """Every heartlm command the call's log shows, in order."""
    return [c for line in log.splitlines() for c in COMMAND.findall(line)]


def kept_answers(tarball: Path) -> list[tuple[str, dict[str, Any]]]:
    """(run or floor folder, its kept {"command", "report"}) of every answer in a call's
    finetune_runs.tar.gz (`.evaluations/NAME/*.json`; each run's finetune.json left out)."""
    with tarfile.open(tarball) as tar:
        return [(Path(m.name).parent.name, json.load(tar.extractfile(m)))
                for m in sorted(tar.getmembers(), key=lambda m: m.name)
                if m.isfile() and Path(m.name).parent.parent.name == ".evaluations"
                and m.name.endswith(".json") and Path(m.name).name != "finetune.json"]  # fmt: skip


def _answers(kept: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, list[str], dict]]:
    """(run, command words, report) of every evaluation the call kept for a `final` run."""
    return [(name, answer["command"].split(), answer["report"])
            for name, answer in kept if name.startswith("ft_beats_")]  # fmt: skip


def kept_floors(kept: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, float, int, dict]]:
    """(floor row name, label share, seed, report) of each DS2 floor the call fitted before it
    was stopped (`model_beats.kept_beat_floor`'s kept answers)."""
    found = []
    for name, answer in kept:
        if name.startswith("floor_"):
            *_, folder, _train, test, seed, fraction, inputs = json.loads(answer["command"])
            if test == mitdb_keys(cfg.TEST):
                found.append((floor_name(inputs, data=folder), fraction, seed, answer["report"]))
    return found


def _holds(words: list[str], part: list[str]) -> bool:
    """Whether `part` appears in `words`, in order and together."""
    return any(words[i : i + len(part)] == part for i in range(len(words) - len(part) + 1))


def trained_as(commands: list[str], run: str, init: str, recipe: str) -> bool:
    """Whether the call fine-tuned `run` as `final` fine-tunes `init`'s `recipe`: its data
    folder, its configuration's flags in order, --from-scratch for scratch alone."""
    config = config_of(recipe)
    flags = [f for f in cfg.CONFIGS[config] if f != "--from-scratch"]
    for command in commands:
        words = shlex.split(command)
        if words[1] == "finetune" and _holds(words, ["--out", run]):
            return (_holds(words, ["--data", beat_data(config)]) and _holds(words, flags)
                    and ("--from-scratch" in words) == (init == "scratch"))  # fmt: skip
    return False


def _scored_as(words: list[str], recipe: str) -> bool:
    """Whether an evaluation's command scores the way `recipe` is scored."""
    views = words[words.index("--views") + 1] if "--views" in words else "1"
    scoring = [
        word
        for flag in ("--beat-mlp-share", "--class-offset") if flag in words
        for word in words[words.index(flag) : words.index(flag) + 2]
    ]  # fmt: skip
    return views == str(views_of(recipe)) and scoring == scoring_args(recipe)


def transformer_rows(
    answers: list[tuple[str, list[str], dict[str, Any]]], chosen: dict[str, str],
    commands: list[str], ds2_only: bool = False, partial: bool = False,
) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """`final`'s rows of each initialisation's chosen recipe, in its order: each run (DS2, with
    its held-out patients), then each label share's seeds together; SystemExit where a run,
    an answer or the seeds together are missing or not one. `ds2_only`: each run's DS2 row
    alone, for a call stopped before it scored the held-out patients and the seeds together.
    `partial` (with `ds2_only`): a run the call trained but did not score on DS2 is returned
    in the second list instead of refused, for a call stopped before every DS2 answer."""
    runs, together, unscored = [], [], []
    trained = {run for run, _, _ in answers}
    if partial:  # a run stopped before any answer is named by its fine-tuning
        trained |= {w[w.index("--out") + 1] for c in commands
                    if (w := shlex.split(c))[1] == "finetune" and "--out" in w}  # fmt: skip
    for init, recipe in chosen.items():
        for fraction in cfg.FRACTIONS:
            seeds = {}
            for seed in cfg.SEEDS:
                names = {run for run in trained
                         if (m := RUN.match(run)) and (m["init"], float(m["fraction"]),
                                                       int(m["seed"])) == (init, fraction, seed)
                         and trained_as(commands, run, init, recipe)}  # fmt: skip
                if len(names) != 1:
                    raise SystemExit(f"{init} {fraction:g} seed {seed}: {len(names)} runs "
                                     f"fine-tuned as {recipe}, not one")  # fmt: skip
                seeds[seed] = names.pop()
                mine = [(w, rep) for run, w, rep in answers
                        if run == seeds[seed] and _scored_as(w, recipe)]  # fmt: skip
                ds2 = [rep for w, rep in mine if "tok_beats" in w and "--ensemble" not in w]
                sick = [rep for w, rep in mine if cfg.HELD_OUT["sick"] in w]
                if not ds2 and partial and ds2_only:
                    unscored.append(seeds[seed])
                    continue
                if len(ds2) != 1 or (len(sick) != 1 and not ds2_only):
                    raise SystemExit(f"{seeds[seed]}: {len(ds2)} DS2 and {len(sick)} held-out "
                                     f"answers scored as {recipe}, not one each")  # fmt: skip
                held_out = {} if ds2_only else {"sick_test": sum_reports(sick)}
                runs.append({"init": init, "label_fraction": fraction, "seed": seed, **ds2[0],
                             **held_out})  # fmt: skip
            if ds2_only:
                continue
            first, *more = (seeds[s] for s in cfg.SEEDS)
            pooled = [rep for run, w, rep in answers if run == first and _scored_as(w, recipe)
                      and "--ensemble" in w and w[w.index("--ensemble") + 1 :] == more]  # fmt: skip
            if len(pooled) != 1:
                raise SystemExit(f"{first}: {len(pooled)} answers of its seeds together, not one")
            together.append({"init": f"{init}, {len(cfg.SEEDS)} seeds together",
                             "label_fraction": fraction, "ensemble": list(cfg.SEEDS),
                             **pooled[0]})  # fmt: skip
    return runs + together, unscored


def floor_rows(
    floors: dict[str, Any], chosen: dict[str, str], fitted: list[tuple[str, float, int, dict]]
) -> list[dict[str, Any]]:
    """The floor rows of an earlier final file for the chosen recipes' floors; SystemExit where
    a floor the call fitted (`fitted`, kept_floors) differs from its row there."""
    kinds = beat_floor_kinds([config_of(recipe) for recipe in chosen.values()])
    names = {floor_name(inputs, data=folder) for inputs, folder in kinds}
    rows = [row for row in floors["beats"]
            if row["init"] in names and row["label_fraction"] in cfg.FRACTIONS]  # fmt: skip
    have = {(row["init"], row["label_fraction"], row["seed"]) for row in rows}
    want = {(n, f, s) for n in names for f in cfg.FRACTIONS for s in cfg.SEEDS}
    if have != want:
        raise SystemExit(f"the floor file lacks {sorted(want - have)}")
    for name, fraction, seed, report in fitted:
        row = next(r for r in rows if (r["init"], r["label_fraction"], r["seed"]) == (
            name, fraction, seed))  # fmt: skip
        if row["confusion"] != report["confusion"]:
            raise SystemExit(f"{name}, {fraction:g} of the labels, seed {seed}: the call's fit "
                             "differs from the floor file's row")  # fmt: skip
    return rows


def main() -> int:
    try:
        return _main()
    except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:  # missing or cut off
        raise SystemExit(f"final_from_answers: cannot read an input ({exc})") from None
    except (json.JSONDecodeError, KeyError) as exc:
        raise SystemExit(f"final_from_answers: an input is not what it names ({exc!r})") from None


def _main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("answers", type=Path, help="the call's finetune_runs.tar.gz")
    ap.add_argument("--log", type=Path, required=True, help="the call's model_study.log")
    ap.add_argument("--pretrain", type=Path, required=True, help="the call's pretrain.json")
    ap.add_argument("--select", type=Path, required=True, help="the selection `final` read")
    ap.add_argument("--floors", type=Path, required=True, help="an earlier final file")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--no-s-guard", action="store_true",
                    help="choose as calls before round 75 did: S may come mostly from the "
                         "per-beat network (model_configs.S_NEEDS_TRANSFORMER off)")  # fmt: skip
    ap.add_argument("--ds2-only", action="store_true",
                    help="each run's DS2 row alone: the call was stopped before it scored the "
                         "held-out patients and the seeds together")  # fmt: skip
    ap.add_argument("--partial", action="store_true",
                    help="with --ds2-only: the runs the call trained and did not score on DS2 "
                         "are listed as unscored, their rows left out")  # fmt: skip
    ap.add_argument("--fractions", type=float, nargs="+", metavar="SHARE",
                    help=f"the label shares of FRACTIONS {cfg.FRACTIONS} that the call's "
                         "`model_study.py --fractions` scored")  # fmt: skip
    args = ap.parse_args()
    if args.partial and not args.ds2_only:
        raise SystemExit("--partial reads DS2 rows alone: add --ds2-only")
    if args.fractions and (unknown := only_fractions(args.fractions)):
        raise SystemExit(f"--fractions: {', '.join(map(str, unknown))} not in FRACTIONS "
                         f"{cfg.FRACTIONS}")  # fmt: skip
    if args.no_s_guard:
        cfg.S_NEEDS_TRANSFORMER = False
    if best_pair(args.select):
        raise SystemExit(f"{args.select}: the folds chose a voting pair, which this does not read")
    chosen = best_of_each_init(args.select)
    flags = {init: recipe_flags(name) for init, name in chosen.items()}
    call = json.loads(args.pretrain.read_text())
    if call.get("codebook_version") != CODEBOOK_VERSION:
        raise SystemExit(f"{args.pretrain}: codebook format {call.get('codebook_version')}")
    floors = json.loads(args.floors.read_text())
    commands = logged_commands(args.log.read_text())
    kept = kept_answers(args.answers)
    answers, fitted = _answers(kept), kept_floors(kept)
    rows, unscored = transformer_rows(answers, chosen, commands, args.ds2_only, args.partial)
    rows += floor_rows(floors, chosen, fitted)
    results = {
        **{k: call[k] for k in ("date", "machine", "versions", "codebook_version", "goals",
                                "pretrain", "pretrain_variants", "pretrain_corpus", "finetune")},
        "stage": "final",
        "command": call["command"],
        "assembled": shlex.join([Path(sys.executable).name, *sys.argv]),
        "seconds": None,
        "config": {f"{init}: {name}": flags[init] for init, name in chosen.items()},
        **choice_rule(),
        "beats": rows,
        "afib": [],
        "floors_from": args.floors.name,
        "floors_checked": len(fitted),
        "ds2_only": args.ds2_only,
        **({"unscored": unscored} if args.partial else {}),
        "commands": [{"command": c, "seconds": None} for c in commands],
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(results)
    atomic_write_text(args.out / "final.json", json.dumps(results, indent=1) + "\n")
    atomic_write_text(args.out / "final.md", table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
