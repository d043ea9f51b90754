"""`heartlm scale`: run the scaling-study grid into DIR (results.csv, cell logs, environment)."""

from __future__ import annotations

import contextlib
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path

from heartlm.errors import HeartlmError
from heartlm.log import logger
from heartlm.outdir import absolute, atomic_write_text, check_separate, claimed, swap_in
from heartlm.runinfo import write_run_json
from heartlm.scale import environment
from heartlm.scale.corpus import heartlm_cli, make_tokens, minutes_for
from heartlm.scale.grid import Grid, ScaleConfig, grid_state
from heartlm.scale.results import add_scaling, cell_row, write_results
from heartlm.settings import setting, to_dict


@dataclass
class ScaleCommand:
    """`heartlm scale`'s settings: the study folder, its tokens, the grid (ScaleConfig),
    and how this call runs it."""

    out: Path | None = setting(required=True)
    """study folder (resumed if it holds this grid)"""
    data: Path | None = None
    """token folder; default: a synthetic corpus made in OUT/data"""
    grid: ScaleConfig = setting(factory=ScaleConfig)
    max_time: float | None = None
    """start no cell after this many seconds (resume later)"""
    retry_failed: bool = False
    """rerun failed and skipped cells on resume"""
    overwrite: bool = False
    """replace OUT if it holds something else"""


Config = ScaleCommand


def check_data(data: Path | None) -> Path | None:
    if data is not None and not (data / "tokens.json").is_file():
        raise HeartlmError("not a token folder (no tokens.json); run heartlm tokenize", data)
    return None if data is None else data.resolve()


def check_engine_args(cfg: ScaleConfig) -> None:
    """--engine-args that a cell's command would refuse (an unknown flag, a bad value, a flag
    that clashes with one the grid sets) fail here, once, instead of in every cell: the
    command of one cell per task is parsed and its settings validated as the cell would."""
    if not cfg.engine_args:
        return
    from heartlm import settings
    from heartlm.cli import build_parser
    from heartlm.scale.grid import Cell, engine_command

    firsts: dict[str, Cell] = {}
    for cell in cfg.cells():
        firsts.setdefault(cell.task, cell)
    for task, cell in sorted(firsts.items(), key=lambda kv: kv[0] != "pretrain"):
        place = Path("engine-args-check")  # never read: the paths only fill the command
        argv = engine_command(cell, cfg, place / "tokens", place / "run", place / "init")
        parser, module = build_parser(argv)
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                settings.resolve(module.Config, parser.parse_args(argv), task).validate()
        except SystemExit:  # argparse's error(): unknown flag, bad value, clashing flags
            reason = (said.getvalue().strip().splitlines() or ["not accepted"])[-1]
            reason = reason.split("error: ")[-1]
            raise HeartlmError(f"--engine-args: heartlm {task}: {reason}") from None
        except ValueError as exc:
            raise HeartlmError(f"--engine-args: heartlm {task}: {exc}") from None


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


def run(command: ScaleCommand) -> int:
    check_engine_args(command.grid)
    data = check_data(command.data)
    out = absolute(command.out)
    check_separate(out, [data])
    with claimed(out):
        work = grid_state(out, command.grid, command.overwrite)
        counts, rows = _run_grid(command, work, data)
        if work != out and not counts.get("pending"):
            swap_in(work, out)
            work = out
    if work != out:
        logger.warning("scale: %s stays as it was until the new grid in %s is done", out, work)
    logger.info("scale: %d cells, results in %s", len(rows), work / "results.csv")
    print(work / "results.csv")
    return 0


def _run_grid(
    command: ScaleCommand, work: Path, data: Path | None
) -> tuple[dict[str, int], list[dict]]:
    cfg = command.grid
    env = json.dumps(environment.capture(), indent=2) + "\n"
    atomic_write_text(work / "environment.json", env)
    start = time.monotonic()
    data = prepare_data(cfg, work, data)
    init_run = prepare_init_run(cfg, work, data)
    grid = Grid(cfg, work, data, init_run, retry_failed=command.retry_failed)
    counts = grid.run(on_result=lambda: write_csv(grid), max_time_s=command.max_time)
    rows = write_csv(grid)
    # The whole command's settings, so `heartlm scale --config DIR/run.json` reruns it.
    write_run_json(
        work, "scale", to_dict(command),
        counts={"cells": len(rows), "ok": sum(r["status"] == "ok" for r in rows),
                "launched": counts},
        timings={"total": time.monotonic() - start}, extra={"data": str(data)},
    )  # fmt: skip
    return counts, rows
