"""`heartlm scale`: run the scaling-study grid into DIR (results.csv, cell logs, environment)."""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path

from heartlm.errors import HeartlmError
from heartlm.log import logger
from heartlm.outdir import absolute, atomic_write_text, check_separate, claimed, swap_in
from heartlm.runinfo import write_run_json
from heartlm.scale import environment
from heartlm.scale.corpus import heartlm_cli, make_tokens, minutes_for
from heartlm.scale.grid import Grid, ScaleConfig, grid_state
from heartlm.scale.results import add_scaling, cell_row, write_results


def _ints(flag: str):
    def parse(text: str) -> list[int]:
        try:
            return [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag}: comma-separated integers, got {text!r}"
            ) from None

    return parse


def _words(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = ScaleConfig.__dataclass_fields__
    parser.add_argument(
        "--out", required=True, type=Path, help="study folder (resumed if it holds this grid)"
    )
    parser.add_argument(
        "--data", type=Path, help="token folder; default: a synthetic corpus made in OUT/data"
    )
    parser.add_argument(
        "--gpus",
        type=_ints("--gpus"),
        default=[1, 2, 4],
        help="GPU counts; processes on a CPU machine (1,2,4)",
    )
    parser.add_argument(
        "--cpus", type=_ints("--cpus"), default=[1, 2, 4, 16], help="CPU cores per GPU (1,2,4,16)"
    )
    parser.add_argument(
        "--window", type=_ints("--window"), default=[128, 1024], help="windows in beats (128,1024)"
    )
    parser.add_argument(
        "--task", type=_words, default=["pretrain", "finetune"], help="pretrain,finetune"
    )
    parser.add_argument(
        "--scaling",
        type=_words,
        default=["weak", "strong"],
        help="weak (fixed per-GPU batch), strong (fixed global batch)",
    )
    parser.add_argument(
        "--backend",
        type=_words,
        default=["ddp"],
        help="ddp, fsdp, zero1, zero2, zero3 (DeepSpeed ZeRO stage N); comma list",
    )
    parser.add_argument(
        "--backend-cpus",
        type=int,
        help="the CPU count where backends other than ddp run (default: the largest --cpus)",
    )
    parser.add_argument(
        "--data-path",
        type=_words,
        default=["gpu"],
        help="gpu (device-resident) or workers (DataLoader, --workers = cpus)",
    )
    parser.add_argument("--preset", default=d["preset"].default, help="model preset (base)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=d["repeats"].default,
        help="repeats per cell, summarised by median, min, max (3)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        help="timed steps of a 1-GPU cell (default: the least multiple of 8 x lcm of --gpus "
        "from 50; 64 for 1,2,4)",
    )
    parser.add_argument(
        "--warmup", type=int, default=d["warmup"].default, help="untimed steps before them (16)"
    )
    parser.add_argument(
        "--batch",
        type=int,
        help="windows per GPU per step at 1 GPU (default 32768 tokens / window)",
    )
    parser.add_argument(
        "--timeout", type=float, default=d["timeout_s"].default, help="seconds per launch (600)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--profile-steps",
        type=int,
        default=d["profile_steps"].default,
        help="untimed steps profiled for the time breakdown after warm-up (8; 0: none)",
    )
    parser.add_argument(
        "--engine-args", default="", help="extra flags for every launch, e.g. '--no-compile'"
    )
    parser.add_argument(
        "--max-time", type=float, help="start no cell after this many seconds (resume later)"
    )
    parser.add_argument("--retry-failed", action="store_true", help="rerun failed cells on resume")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace OUT if it holds something else"
    )


def config_from_args(args: argparse.Namespace) -> ScaleConfig:
    try:
        return ScaleConfig(
            gpus=args.gpus, cpus=args.cpus, windows=args.window, tasks=args.task,
            scaling=args.scaling, backends=args.backend, backend_cpus=args.backend_cpus,
            data_paths=args.data_path,
            preset=args.preset, repeats=args.repeats, steps=args.steps, warmup=args.warmup,
            batch=args.batch, timeout_s=args.timeout, seed=args.seed,
            profile_steps=args.profile_steps, engine_args=shlex.split(args.engine_args),
        )  # fmt: skip
    except ValueError as exc:
        raise HeartlmError(str(exc)) from None


def check_data(data: Path | None) -> Path | None:
    if data is not None and not (data / "tokens.json").is_file():
        raise HeartlmError("not a token folder (no tokens.json); run heartlm tokenize", data)
    return None if data is None else data.resolve()


def prepare_data(cfg: ScaleConfig, out: Path, data: Path | None) -> Path:
    if data is not None:
        return data
    return make_tokens(
        out / "data", records=8, minutes=minutes_for(max(cfg.windows)), seed=cfg.seed
    )


def prepare_init_run(cfg: ScaleConfig, out: Path, data: Path) -> Path | None:
    """The pretrained run every finetune cell starts from (a short, untimed pretrain)."""
    if "finetune" not in cfg.tasks:
        return None
    init = out / "init"
    if not (init / "model.safetensors").is_file():
        heartlm_cli(
            ["pretrain", str(data), "--out", str(init), "--preset", cfg.preset,
             "--window", str(max(cfg.windows)), "--batch", "2", "--steps", "1",
             "--val-batches", "1", "--overwrite", *cfg.engine_args],
            "init run for finetune cells",
        )  # fmt: skip
    return init


def write_csv(grid: Grid) -> list[dict]:
    rows = [
        cell_row(cell, grid.cfg.workload(cell.window, cell.task), grid.cfg.preset, reps)
        for cell, reps in grid.results().items()
    ]
    add_scaling(rows)
    write_results(grid.out / "results.csv", rows)
    return rows


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    data = check_data(args.data)
    out = absolute(args.out)
    check_separate(out, [data])
    with claimed(out):
        work = grid_state(out, cfg, args.overwrite)
        counts, rows = _run_grid(cfg, work, data, args)
        if work != out and not counts.get("pending"):
            swap_in(work, out)
            work = out
    if work != out:
        logger.warning("scale: %s stays as it was until the new grid in %s is done", out, work)
    logger.info("scale: %d cells, results in %s", len(rows), work / "results.csv")
    print(work / "results.csv")
    return 0


def _run_grid(
    cfg: ScaleConfig, work: Path, data: Path | None, args: argparse.Namespace
) -> tuple[dict[str, int], list[dict]]:
    env = json.dumps(environment.capture(), indent=2) + "\n"
    atomic_write_text(work / "environment.json", env)
    start = time.monotonic()
    data = prepare_data(cfg, work, data)
    grid = Grid(cfg, work, data, prepare_init_run(cfg, work, data), retry_failed=args.retry_failed)
    counts = grid.run(on_result=lambda: write_csv(grid), max_time_s=args.max_time)
    rows = write_csv(grid)
    write_run_json(
        work, "scale", cfg,
        counts={"cells": len(rows), "ok": sum(r["status"] == "ok" for r in rows),
                "launched": counts},
        timings={"total": time.monotonic() - start}, extra={"data": str(data)},
    )  # fmt: skip
    return counts, rows
