"""`heartlm quickstart`: the whole pipeline on a small synthetic corpus, ending in a report.

synth -> ingest -> tokenize -> pretrain -> finetune -> a small scale grid -> report, each
stage through its own CLI in a subprocess (exactly what a user would type), everything
under one folder. Sized for minutes on a 2-core laptop; GPUs are used where present.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from heartlm.log import logger, progress
from heartlm.outdir import absolute, staged_dir
from heartlm.scale.corpus import heartlm_cli
from heartlm.scale.environment import gpu_count


@dataclass
class QuickstartConfig:
    """Sizes of the demo; the defaults finish in a few minutes on 2 CPU cores."""

    records: int = 6
    minutes: float = 3.0
    vocab: int = 256
    preset: str = "tiny"
    window: int = 32
    batch: int = 16
    pretrain_steps: int = 60
    finetune_steps: int = 30
    scale_steps: int = 10
    seed: int = 0


def scale_gpus() -> list[int]:
    """GPU counts for the demo grid: what the machine has (CPU processes without GPUs)."""
    n = gpu_count()
    if n == 0:
        return [1, 2] if len(os.sched_getaffinity(0)) >= 2 else [1]
    return [g for g in (1, 2, 4, 8) if g <= n]


def stages(out: Path, cfg: QuickstartConfig, gpus: list[int]) -> list[tuple[str, list[str]]]:
    """(name, heartlm argv) of every stage; each reads only the previous stages' folders."""
    wfdb, store, tokens = out / "wfdb", out / "store", out / "tokens"
    pretrain, finetune, scale = out / "pretrain", out / "finetune", out / "scale"
    train = ["--window", str(cfg.window), "--batch", str(cfg.batch), "--seed", str(cfg.seed)]
    return [
        ("synth", ["synth", str(wfdb), "--records", str(cfg.records), "--minutes",
                   str(cfg.minutes), "--seed", str(cfg.seed)]),
        ("ingest", ["ingest", str(wfdb), "--out", str(store)]),
        ("tokenize", ["tokenize", str(store), "--out", str(tokens), "--vocab", str(cfg.vocab)]),
        ("pretrain", ["pretrain", str(tokens), "--out", str(pretrain), "--preset", cfg.preset,
                      *train, "--steps", str(cfg.pretrain_steps), "--no-compile"]),
        ("finetune", ["finetune", str(pretrain), "--task", "beats", "--data", str(tokens),
                      "--out", str(finetune), *train, "--steps", str(cfg.finetune_steps),
                      "--no-compile"]),
        ("scale", ["scale", "--gpus", ",".join(map(str, gpus)), "--cpus", "1", "--window",
                   str(cfg.window), "--task", "pretrain", "--scaling", "weak", "--preset",
                   cfg.preset, "--steps", str(cfg.scale_steps), "--batch", "4", "--data",
                   str(tokens), "--out", str(scale), "--engine-args=--no-compile"]),
        ("report", ["report", str(scale)]),
    ]  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("heartlm-quickstart"),
        help="folder for every stage's output (heartlm-quickstart)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it holds files")


def run(args: argparse.Namespace) -> int:
    # Built in a staging folder with paths relative to it, so that it still holds together
    # once it replaces OUT (and OUT's old contents stay until then).
    with staged_dir(args.out, args.overwrite) as stage:
        plan = stages(Path(), QuickstartConfig(), scale_gpus())
        for i, (name, argv) in enumerate(progress(plan, total=len(plan), desc="quickstart"), 1):
            logger.info("quickstart [%d/%d] %s", i, len(plan), name)
            heartlm_cli(argv, f"quickstart {name}", cwd=stage)
    report = absolute(args.out) / "scale" / "report.md"
    logger.info("quickstart: done; the scaling report is %s", report)
    print(report)
    return 0
