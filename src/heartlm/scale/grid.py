"""The grid: its config, its cells, and running them with resume (state lives in DIR)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heartlm.errors import HeartlmError
from heartlm.log import logger, progress
from heartlm.outdir import atomic_write_text, partial_dir
from heartlm.scale.cell import Cell, Launch, Workload, core_groups, run_launch, torchrun_argv
from heartlm.settings import comma_list, setting
from heartlm.train.config import FSDP_UNIT_PARAMS, ParallelConfig

TASKS = ("pretrain", "finetune")
SCALING = ("weak", "strong")
DATA_PATHS = ("gpu", "workers")
# zeroN: DeepSpeed ZeRO stage N (`--backend deepspeed --zero-stage N`).
BACKENDS = ("ddp", "fsdp", "zero1", "zero2", "zero3")
MIN_TIMED_STEPS = 50
INDUCTOR_CACHE = ".inductor-cache"


INTS, WORDS = comma_list(int), comma_list(str)
AXES = "grid axes (comma lists)"
WORKLOAD = "workload of every cell"


@dataclass
class ScaleConfig:
    """The grid axes and the fixed workload of every cell: `heartlm scale`'s flags,
    defaults and help (`heartlm.settings`), and grid.json's `config`."""

    gpus: list[int] = setting(factory=lambda: [1, 2, 4], parse=INTS, metavar="N,...", group=AXES)
    """GPU counts (processes on a machine without GPUs)"""
    cpus: list[int] = setting(factory=lambda: [1, 2, 4, 16], parse=INTS, metavar="N,...",
                              group=AXES)  # fmt: skip
    """CPU cores per GPU (per process)"""
    windows: list[int] = setting(factory=lambda: [128, 1024], flag="--window", parse=INTS,
                                 metavar="N,...", group=AXES)  # fmt: skip
    """window sizes in beats"""
    tasks: list[str] = setting(factory=lambda: list(TASKS), flag="--task", parse=WORDS,
                               metavar="NAME,...", group=AXES)  # fmt: skip
    """pretrain, finetune"""
    scaling: list[str] = setting(factory=lambda: list(SCALING), parse=WORDS, metavar="NAME,...",
                                 group=AXES)  # fmt: skip
    """weak (fixed per-GPU batch), strong (fixed global batch)"""
    backends: list[str] = setting(factory=lambda: ["ddp"], flag="--backend", parse=WORDS,
                                  metavar="NAME,...", group=AXES)  # fmt: skip
    """ddp, fsdp, zero1, zero2, zero3 (DeepSpeed ZeRO stage N)"""
    backend_cpus: int | None = setting(None, metavar="N", group=AXES)
    """the one CPU count where backends other than ddp run (default: the largest --cpus)"""
    data_paths: list[str] = setting(factory=lambda: ["gpu"], flag="--data-path", parse=WORDS,
                                    metavar="NAME,...", group=AXES)  # fmt: skip
    """gpu (device-resident windows) or workers (DataLoader, --workers = CPUs per GPU)"""
    preset: str = setting("base", group=WORKLOAD)
    """model preset"""
    repeats: int = setting(3, group=WORKLOAD)
    """repeats per cell, summarised by median, min, max"""
    steps: int | None = setting(None, group=WORKLOAD)
    """timed steps of a 1-GPU cell (default: the least multiple of 8 x lcm of --gpus from 50,
    64 for 1,2,4, so every weak cell's timed steps divide into metrics windows of 8)"""
    warmup: int = setting(16, group=WORKLOAD)
    """untimed steps first (compilation, allocator warm-up)"""
    batch: int | None = setting(None, group=WORKLOAD)
    """windows per GPU per step at 1 GPU (default: tokens_per_step / window)"""
    tokens_per_step: int = setting(32768, cli=False)
    """tokens per GPU per step at 1 GPU when --batch is not given"""
    timeout_s: float = setting(600.0, flag="--timeout", metavar="S", group=WORKLOAD)
    """seconds per launch"""
    seed: int = setting(0, group=WORKLOAD)
    """seed of every launch"""
    profile_steps: int = setting(8, group=WORKLOAD)
    """untimed steps profiled by the engine after the warm-up, for the time breakdown
    (breakdown.json; 0: none)"""
    engine_args: list[str] = setting(factory=list, parse=shlex.split, metavar="ARGS",
                                     group=WORKLOAD)  # fmt: skip
    """extra flags for every pretrain and finetune launch, e.g. --engine-args=--no-compile"""
    finetune_task: str = setting("beats", cli=False)
    """what finetune cells fine-tune (heartlm finetune --task)"""

    def __post_init__(self) -> None:
        for name, values in (
            ("--gpus", self.gpus),
            ("--cpus", self.cpus),
            ("--window", self.windows),
        ):
            if not values or any(v < 1 for v in values):
                raise ValueError(f"{name}: give positive integers, got {values}")
        for name, values, allowed in (
            ("--task", self.tasks, TASKS),
            ("--scaling", self.scaling, SCALING),
            ("--data-path", self.data_paths, DATA_PATHS),
            ("--backend", self.backends, BACKENDS),
        ):
            bad = [v for v in values if v not in allowed]
            if bad or not values:
                raise ValueError(f"{name}: {bad or 'nothing'} not in {', '.join(allowed)}")
        if self.repeats < 1:
            raise ValueError("--repeats must be at least 1")
        if self.warmup < 0 or self.profile_steps < 0:
            raise ValueError("--warmup and --profile-steps must be 0 or more")
        if self.timeout_s <= 0:
            raise ValueError("--timeout must be positive")
        if self.backend_cpus is None:
            self.backend_cpus = max(self.cpus)
        elif self.backend_cpus not in self.cpus:
            raise ValueError(f"--backend-cpus {self.backend_cpus} is not one of --cpus")
        if self.steps is None:
            unit = 8 * math.lcm(*self.gpus)
            self.steps = unit * math.ceil(MIN_TIMED_STEPS / unit)
        if "weak" in self.scaling and any(self.steps % n for n in self.gpus):
            raise ValueError(
                f"--steps {self.steps} must divide by every --gpus count (weak scaling)"
            )
        strong = self.batch is not None and "strong" in self.scaling
        if strong and any(self.batch % n for n in self.gpus):
            raise ValueError(f"--batch {self.batch} must divide by every --gpus count (strong)")

    def batch_for(self, window: int) -> int:
        if self.batch is not None:
            return self.batch
        per_gpu = max(1, self.tokens_per_step // window)
        # strong scaling splits the batch over N GPUs, so round it to a multiple of all N
        step = math.lcm(*self.gpus) if "strong" in self.scaling else 1
        return max(step, per_gpu // step * step)

    def workload(self, window: int, task: str = "pretrain") -> Workload:
        """Only pretrain cells are profiled (breakdown.json): finetune cells run their
        warm-up, then the timed steps, as they did before finetune shared the engine's
        --profile-steps, so their times stay comparable with studies measured then."""
        return Workload(
            batch=self.batch_for(window),
            steps=self.steps,
            warmup=self.warmup,
            profile=self.profile_steps if task == "pretrain" else 0,
        )

    def workload_key(self) -> dict[str, Any]:
        """What must not change between an interrupted grid and its resume: cells ran with
        the engine's parallelism defaults too (the DDP bucket size, the FSDP2 units), so a
        grid begun before one of them changed is not resumed with the new one."""
        keep = ("preset", "steps", "warmup", "batch", "tokens_per_step", "seed", "profile_steps")
        info = {k: getattr(self, k) for k in keep}
        defaults = {**dataclasses.asdict(ParallelConfig()), "fsdp_unit_params": FSDP_UNIT_PARAMS}
        return {**info, "engine_args": list(self.engine_args), "finetune_task": self.finetune_task,
                "engine_defaults": defaults}  # fmt: skip

    def cells(self) -> list[Cell]:
        """Every cell, the most CPUs per GPU first: a grid cut short by --max-time has the
        GPU-scaling cells (drawn at the largest CPU count) before the CPU sweep."""
        axes = itertools.product(
            sorted(set(self.cpus), reverse=True), self.tasks, self.windows, self.scaling,
            self.backends, self.data_paths, sorted(set(self.gpus)),
        )  # fmt: skip
        return [
            Cell(task=t, window=w, gpus=g, cpus=c, scaling=s, backend=b, data_path=d)
            for c, t, w, s, b, d, g in axes
            if b == "ddp" or c == self.backend_cpus
        ]

    def twin(self, cell: Cell) -> Cell | None:
        """On one GPU, strong and weak scaling are the same run, and so are the backends
        (FSDP and ZeRO with one process train the plain module, as DDP does): such a
        1-GPU cell reuses the weak ddp one's result when the grid has it."""
        if cell.gpus != 1:
            return None
        scaling = "weak" if "weak" in self.scaling else cell.scaling
        backend = "ddp" if "ddp" in self.backends else cell.backend
        same = dataclasses.replace(cell, scaling=scaling, backend=backend)
        return None if same == cell else same


def engine_command(
    cell: Cell, cfg: ScaleConfig, data: Path, run_dir: Path, init_run: Path | None
) -> list[str]:
    """The heartlm command line every rank of the cell runs.

    Checkpoints and validation happen only after the last step, outside the timed ones.
    """
    work = cfg.workload(cell.window, cell.task)
    total = work.total_steps(cell)
    # pretrain and finetune share the engine's settings (TrainConfig): the same flags
    # choose the backend and the data path of both.
    backend = ["--backend", cell.backend]
    if cell.backend.startswith("zero"):
        backend = ["--backend", "deepspeed", "--zero-stage", cell.backend[-1]]
    common = [
        "--out", str(run_dir),
        "--window", str(cell.window),
        "--batch", str(work.global_batch(cell)),
        "--steps", str(total),
        "--log-every", str(work.log_every(cell)),
        "--seed", str(cfg.seed),
        *backend,
        "--workers", str(cell.cpus if cell.data_path == "workers" else 0),
    ]  # fmt: skip
    if cell.task == "finetune":
        head = ["finetune", str(init_run), "--task", cfg.finetune_task, "--data", str(data)]
        return [*head, *common, "--val-every", str(total), *cfg.engine_args]
    cmd = [
        "pretrain", str(data), *common,
        "--preset", cfg.preset,
        "--ckpt-every", "0", "--keep", "1", "--val-every", "0", "--val-batches", "1",
        "--no-final-save",
    ]  # fmt: skip
    if work.profile:
        cmd += ["--profile-steps", str(work.profile)]
    return cmd + list(cfg.engine_args)


def visible_gpus() -> list[int]:
    """GPU indices a cell may use, in CUDA_VISIBLE_DEVICES order."""
    from heartlm.scale.environment import gpu_count

    n = gpu_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed:
        ids = [int(x) for x in listed.split(",") if x.strip().isdigit()]
        return ids[:n] if len(ids) >= n else list(range(n))
    return list(range(n))


Runner = Callable[[Launch, Cell, Workload], dict[str, Any]]


@dataclass
class Grid:
    """A grid bound to its folder; `run()` does every repeat that has no result yet."""

    cfg: ScaleConfig
    out: Path
    data: Path
    init_run: Path | None = None
    runner: Runner = run_launch
    retry_failed: bool = False

    def rep_dir(self, cell: Cell, rep: int) -> Path:
        return self.out / "cells" / cell.id / f"r{rep}"

    def load_result(self, cell: Cell, rep: int) -> dict[str, Any] | None:
        try:
            return json.loads((self.rep_dir(cell, rep) / "result.json").read_bytes())
        except (OSError, ValueError):  # ValueError: not JSON, or not UTF-8
            return None

    def results(self) -> dict[Cell, list[dict[str, Any]]]:
        """Every finished repeat of each cell, also those of an earlier run of the grid
        with more --repeats (a cell measured more often keeps all its repeats)."""
        found = {}
        for cell in self.cfg.cells():
            folder = self.out / "cells" / (self.cfg.twin(cell) or cell).id
            reps = sorted(int(p.name[1:]) for p in folder.glob("r*") if p.name[1:].isdigit())
            loaded = [self.load_result(self.cfg.twin(cell) or cell, r) for r in reps]
            found[cell] = [r for r in loaded if r is not None]
        return found

    def pending(self) -> list[tuple[Cell, int]]:
        """Repeat 0 of every cell first, then repeat 1, ...: a grid cut short by --max-time
        has measured every cell once before it measures any twice."""
        todo = []
        for rep in range(self.cfg.repeats):
            for cell in self.cfg.cells():
                if self.cfg.twin(cell):
                    continue
                done = self.load_result(cell, rep)
                if done is None or (self.retry_failed and done["status"] != "ok"):
                    todo.append((cell, rep))
        return todo

    def launch(self, cell: Cell, rep: int, gpu_ids: list[int]) -> Launch:
        folder = self.rep_dir(cell, rep)
        run_dir = folder / "run"
        command = engine_command(cell, self.cfg, self.data, run_dir, self.init_run)
        spec, binding = core_groups(cell.gpus, cell.cpus, sorted(os.sched_getaffinity(0)))
        # One inductor cache for the whole grid: a cell compiles only the graphs no cell
        # before it compiled (repeats and CPU counts reuse them).
        cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(self.out / INDUCTOR_CACHE)
        env = {
            "OMP_NUM_THREADS": str(cell.cpus),
            "HEARTLM_PROGRESS": "0",
            "TORCHINDUCTOR_CACHE_DIR": cache,
        }
        if gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpu_ids[: cell.gpus]))
        return Launch(
            argv=torchrun_argv(cell.gpus, spec, command),
            env=env,
            run_dir=run_dir,
            log=folder / "log.txt",
            timeout_s=self.cfg.timeout_s,
            gpu_indices=gpu_ids[: cell.gpus],
            binding=binding,
        )

    def run_one(self, cell: Cell, rep: int, gpu_ids: list[int]) -> dict[str, Any]:
        folder = self.rep_dir(cell, rep)
        shutil.rmtree(folder, ignore_errors=True)  # a repeat cut off earlier starts afresh
        folder.mkdir(parents=True)
        launch = self.launch(cell, rep, gpu_ids)
        if gpu_ids and cell.gpus > len(gpu_ids):
            why = f"needs {cell.gpus} GPUs, this machine has {len(gpu_ids)}"
            result = {"cell": cell.id, "status": "skipped", "error": why, "command": launch.argv}
        else:
            try:
                result = self.runner(launch, cell, self.cfg.workload(cell.window, cell.task))
            except Exception as exc:  # one broken cell must not end the study
                result = {"cell": cell.id, "status": "failed", "error": f"{exc!r}"}
        result["repeat"] = rep
        atomic_write_text(folder / "result.json", json.dumps(result, indent=2) + "\n")
        return result

    def run(
        self, on_result: Callable[[], None] | None = None, max_time_s: float | None = None
    ) -> dict[str, int]:
        """Run what is pending; with `max_time_s`, start no cell after that many seconds
        (the rest stays pending for the next, resuming, call)."""
        start = time.monotonic()
        todo = self.pending()
        gpu_ids = visible_gpus()
        logger.info(
            "scale: %d of %d cell repeats to run (%s)",
            len(todo),
            sum(not self.cfg.twin(c) for c in self.cfg.cells()) * self.cfg.repeats,
            f"{len(gpu_ids)} GPUs" if gpu_ids else "CPU processes, gloo",
        )
        counts: dict[str, int] = {}
        for cell, rep in progress(todo, total=len(todo), desc="scale", unit="cell"):
            if max_time_s is not None and time.monotonic() - start > max_time_s:
                logger.warning("scale: --max-time reached; rerun the command to resume")
                counts["pending"] = counts.get("pending", 0) + 1
                continue
            result = self.run_one(cell, rep, gpu_ids)
            counts[result["status"]] = counts.get(result["status"], 0) + 1
            msg = (
                f"{result.get('time_s', 0):.3f} s" if result["status"] == "ok" else result["error"]
            )
            logger.info("scale: %s r%d %s: %s", cell.id, rep, result["status"], msg)
            if on_result is not None:
                on_result()
        return counts


def grid_state(out: Path, cfg: ScaleConfig, overwrite: bool) -> Path:
    """Claim a folder for this grid and return it: `out` when it is new or holds this grid
    (which resumes). With `overwrite`, a folder holding anything else stays as it is and
    the grid runs in `.OUT.partial` (resumed there too) until it replaces `out` at the end.
    """
    if out.exists() and not out.is_dir():
        raise HeartlmError("exists and is not a folder", out)
    work = out
    if out.is_dir() and any(out.iterdir()) and not _holds_grid(out, cfg):
        if not overwrite:
            held = (out / "grid.json").is_file()
            why = "holds a grid with another workload" if held else "already holds files"
            raise HeartlmError(f"{why} (use --overwrite to replace it)", out)
        work = partial_dir(out)
        if not _holds_grid(work, cfg):
            shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    info = {"workload": cfg.workload_key(), "config": dataclasses.asdict(cfg)}
    atomic_write_text(work / "grid.json", json.dumps(info, indent=2) + "\n")
    return work


def _holds_grid(folder: Path, cfg: ScaleConfig) -> bool:
    try:
        return json.loads((folder / "grid.json").read_bytes()).get("workload") == cfg.workload_key()
    except (OSError, ValueError, AttributeError):
        return False
