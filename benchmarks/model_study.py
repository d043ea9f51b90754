"""Model quality: choose on MIT-BIH DS1, score on DS2 once, three seeds, the tree floor beside.

    python benchmarks/model_study.py prepare  --ecg ../shared/ecg --work W
    python benchmarks/model_study.py pretrain --work W
    python benchmarks/model_study.py select   --work W      # beats: DS1, two record-wise folds
    python benchmarks/model_study.py final    --work W      # beats: DS2, 3 seeds, FRACTIONS
    python benchmarks/model_study.py select_afib final_afib --work W   # the same for AFIB
    python benchmarks/model_study.py crossfit_afib --work W   # AFIB: how to call DS2 (round 34)
    python benchmarks/model_study.py offset_probe --work W    # DS1: offsets against training size

Every step is a `heartlm` command (logged with its wall time into the results). `prepare`
builds the token folders: the codebook and feature space are learnt on the unlabelled
pretraining corpus (MIT-BIH outside DS2, NSTDB, LUDB, a synthetic corpus); MIT-BIH and the
AFIB training set are tokenized with it. `select` compares fine-tuning configurations on
two record-wise folds of DS1 (train on one, score the other, confusion matrices summed)
at SELECT_FRACTION of the labels over SELECT_SEEDS; DS2 is not read. `final` trains the
pretrained and the scratch model, each with its own chosen configuration (and the two
members of a VOTING_PAIRS row that scored above each of them alone on the folds), on DS1 and
scores DS2 with seeds 0, 1, 2 at each of FRACTIONS of the labels, with the LightGBM floor
of `tree_floor.py` on the same inputs and labels. `select_afib` and `final_afib` do the same
for AFIB windows: chosen on two folds of the real records outside DS2, scored on DS2.
Results: W/<stage>.json and .md, copied to benchmarks/results/model_<stage>.{json,md}.

This file is the command line; the settings and each round's record of what it tried are in
model_configs.py, the DS2 ledger in model_ledger.py, the recipe names in model_recipes.py,
`prepare` and `pretrain` in model_runner.py, the beat stages in model_beats.py, the AFIB
stages in model_afib.py, `crossfit_afib` in afib_crossfit.py and `offset_probe` in
model_offset_probe.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import model_configs as cfg
import model_ledger
from afib_crossfit import crossfit_afib
from model_afib import final_afib, select_afib
from model_beats import final, select
from model_offset_probe import offset_probe
from model_recipes import adopt_selection, config_of
from model_runner import (
    Runner,
    missing_pretraining,
    prepare,
    pretrain,
    stale_codebook,
    visible_gpus,
)

from heartlm.runinfo import versions
from heartlm.tokens.codebook import VERSION as CODEBOOK_VERSION

REPO = Path(__file__).resolve().parents[1]


def quick() -> None:
    """--quick: a pipeline check on the CPU (tiny model, a few steps); its numbers mean nothing."""
    model_ledger.DS2_LEDGER = None  # a quick check never reads DS2
    cfg.PRETRAIN[cfg.PRETRAIN.index("small")] = "tiny"
    cfg.PRETRAIN[cfg.PRETRAIN.index("--steps") + 1] = "20"
    for flags in cfg.PRETRAIN_VARIANTS.values():
        if "--steps" in flags:
            flags[flags.index("--steps") + 1] = "10"
    for flags in (cfg.BEATS, cfg.AFIB):
        flags[flags.index("--epochs")] = "--steps"
        flags[flags.index("--steps") + 1] = "6"
    cfg.BEATS[cfg.BEATS.index("--window") + 1] = cfg.AFIB[cfg.AFIB.index("--window") + 1] = "16"
    cfg.SCALE["records"], cfg.SCALE["minutes"] = 4, 2
    cfg.SEEDS, cfg.FRACTIONS, cfg.SELECT_SEEDS = (0,), (0.1,), (0,)
    cfg.TRAIN, cfg.TEST = cfg.FOLDS
    for flags in [*cfg.CONFIGS.values(), *cfg.AFIB_CONFIGS.values()]:  # --steps for every --epochs
        if "--epochs" in flags:
            flags[flags.index("--epochs") : flags.index("--epochs") + 2] = ["--steps", "6"]


def machine() -> dict[str, Any]:
    import torch

    info = {"host": platform.node(), "cpus": os.cpu_count(), "platform": platform.platform()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpus"] = torch.cuda.device_count()  # those this process sees
    return info


def only_configs(names: list[str]) -> list[str]:
    """Keep only `names` of CONFIGS (and their shares); the names CONFIGS lacks, changing
    nothing then."""
    if unknown := [n for n in names if n not in cfg.CONFIGS]:
        return unknown
    cfg.CONFIGS = {n: f for n, f in cfg.CONFIGS.items() if n in names}
    cfg.BEAT_MLP_SHARES = {n: v for n, v in cfg.BEAT_MLP_SHARES.items() if n in names}
    return []


def only_fractions(shares: list[float]) -> list[float]:
    """Keep only `shares` of FRACTIONS, in its order; the shares FRACTIONS lacks, changing
    nothing then."""
    if unknown := sorted(set(shares) - set(cfg.FRACTIONS)):
        return unknown
    cfg.FRACTIONS = tuple(f for f in cfg.FRACTIONS if f in shares)
    return []


SELECTIONS = {"final": ("select", "select.json"), "final_afib": ("select_afib", "select_afib.json"),
              "crossfit_afib": ("select_afib", "select_afib.json")}  # fmt: skip
"""The stages that score what a selection stage chose, and the stage and file they read."""


def missing_selections(stages: list[str], work: Path) -> list[str]:
    """The selection files that `stages` read and that neither `work` holds nor an earlier
    stage among them writes (`final` with a fixed cfg.FINAL reads none)."""
    missing = []
    for i, stage in enumerate(stages):
        if stage not in SELECTIONS or (stage == "final" and cfg.FINAL != "auto"):
            continue
        selecting, name = SELECTIONS[stage]
        if selecting not in stages[:i] and not (work / name).is_file() and name not in missing:
            missing.append(name)
    return missing


STAGES = {"prepare": None, "pretrain": None, "select": select, "final": final,
          "select_afib": select_afib, "final_afib": final_afib,
          "crossfit_afib": crossfit_afib, "offset_probe": offset_probe}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stages", nargs="+", choices=list(STAGES))
    ap.add_argument("--ecg", type=Path, default=REPO.parent / "shared" / "ecg")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument(
        "--jobs", type=int, default=4,
        help="commands at once, spread over the visible GPUs (each command on the least busy one)",
    )  # fmt: skip
    ap.add_argument("--synth-records", type=int, default=100)
    ap.add_argument(
        "--quick", action="store_true", help="tiny pipeline check, no results; DS2 is not read"
    )
    ap.add_argument(
        "--replicate", action="store_true",
        help="final stages: score a recipe that DS2_LEDGER says DS2 has scored already",
    )  # fmt: skip
    ap.add_argument(
        "--configs", nargs="+", metavar="NAME",
        help="beats: train and score only these of CONFIGS (a round whose other recipes' fold "
             "rows an earlier call measured, when device time is short)",
    )  # fmt: skip
    ap.add_argument(
        "--fractions", type=float, nargs="+", metavar="SHARE",
        help=f"final stages: score only these of FRACTIONS {cfg.FRACTIONS} (a round whose other "
             "shares an earlier call scored, when device time is short)",
    )  # fmt: skip
    ap.add_argument(
        "--select-fraction", type=float, metavar="SHARE",
        help=f"select: the share of the training fold's labels (SELECT_FRACTION, "
             f"{cfg.SELECT_FRACTION}); a smaller one asks the folds whether pretraining pays "
             "where labels are scarce",
    )  # fmt: skip
    ap.add_argument(
        "--final", metavar="RECIPE",
        help="final: score this recipe of CONFIGS for both initialisations (FINAL; default: "
             "each one's choice in W/select.json), e.g. a pretrained twin against its own "
             "flags from scratch, which then takes its architecture from the twin's encoder",
    )  # fmt: skip
    ap.add_argument(
        "--keep-synthetic-labels", action="store_true",
        help="beats, below a label share of 1: the synthetic patients keep every label and the "
             "share is drawn from DS1's alone (KEEP_SYNTHETIC_LABELS), runs and floors alike",
    )  # fmt: skip
    args = ap.parse_args()
    if args.quick:
        quick()
    cfg.KEEP_SYNTHETIC_LABELS = cfg.KEEP_SYNTHETIC_LABELS or args.keep_synthetic_labels
    for flag, value, stage in (("--final", args.final, "final"),
                               ("--select-fraction", args.select_fraction, "select")):  # fmt: skip
        if value is not None and stage not in args.stages:
            print(f"model_study: {flag} is for the {stage} stage, which these stages leave out",
                  file=sys.stderr)  # fmt: skip
            return 2
    if args.final is not None:
        try:
            config_of(args.final)
        except SystemExit as exc:
            print(f"model_study: --final: {exc}", file=sys.stderr)
            return 2
        cfg.FINAL = args.final
    if args.select_fraction is not None:
        if not 0 < args.select_fraction <= 1:
            print(f"model_study: --select-fraction: {args.select_fraction} is not a share in "
                  "(0, 1]", file=sys.stderr)  # fmt: skip
            return 2
        cfg.SELECT_FRACTION = args.select_fraction
    if args.fractions and (unknown := only_fractions(args.fractions)):
        print(f"model_study: --fractions: {', '.join(map(str, unknown))} not in FRACTIONS "
              f"{cfg.FRACTIONS}", file=sys.stderr)  # fmt: skip
        return 2
    if args.configs:
        if scoring := sorted(set(args.stages) - {"prepare", "pretrain", "select"}):
            print(f"model_study: --configs is for prepare, pretrain and select, not "
                  f"{scoring[0]}: a selection among some recipes would choose among those alone",
                  file=sys.stderr)  # fmt: skip
            return 2
        if unknown := only_configs(args.configs):
            print(f"model_study: --configs: {', '.join(unknown)} not in CONFIGS "
                  f"({', '.join(cfg.CONFIGS)})", file=sys.stderr)  # fmt: skip
            return 2
    args.work.mkdir(parents=True, exist_ok=True)
    if stale := stale_codebook(args.work):
        print(f"model_study: {stale}", file=sys.stderr)
        return 2
    if missing := missing_selections(args.stages, args.work):
        print(f"model_study: {args.work}: no {', '.join(missing)}; put the stage that writes it "
              "first, or carry an earlier call's (model_study_call.sh: SELECT, SELECT_AFIB)",
              file=sys.stderr)  # fmt: skip
        return 2
    if adopted := adopt_selection(args.stages, args.work / "select.json"):
        print(f"model_study: {args.work / 'select.json'} measured {len(adopted)} configuration(s) "
              "that CONFIGS no longer holds; `final` trains them with the flags it recorded",
              file=sys.stderr)  # fmt: skip
    # Before any fine-tuning starts, so that a device call does not spend minutes on the
    # stages' other runs before the first one that needs a missing encoder fails.
    if missing := missing_pretraining(args.stages, args.work.resolve(), args.replicate):
        print(f"model_study: {args.work}: no pretraining run {', '.join(missing)}; "
              "add the `pretrain` stage", file=sys.stderr)  # fmt: skip
        return 2
    work, ecg = args.work.resolve(), args.ecg.resolve()
    r = Runner(work, args.device, args.jobs, ecg, args.replicate, visible_gpus(args.device))
    for stage in args.stages:
        t0 = time.perf_counter()
        if stage == "prepare":
            prepare(r, args.ecg.resolve(), args.synth_records)
            continue
        found = pretrain(r, args.stages) if stage == "pretrain" else STAGES[stage](r)
        results = {
            "stage": stage,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": shlex.join([Path(sys.executable).name, *sys.argv]),
            "machine": machine(),
            "versions": versions(),
            "codebook_version": CODEBOOK_VERSION,
            "goals": cfg.GOALS,
            "pretrain": cfg.PRETRAIN,
            "pretrain_variants": cfg.PRETRAIN_VARIANTS,
            "pretrain_corpus": {**cfg.PRETRAIN_CORPUS, "scale": cfg.SCALE},
            "finetune": {"beats": cfg.BEATS, "afib": cfg.AFIB},
            "keep_synthetic_labels": cfg.KEEP_SYNTHETIC_LABELS,
            "seconds": round(time.perf_counter() - t0, 1),
            **found,
            "commands": r.commands,
        }
        from model_tables import markdown

        text = json.dumps(results, indent=1) + "\n"
        (args.work / f"{stage}.json").write_text(text)
        (args.work / f"{stage}.md").write_text(markdown(results))
        print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
