"""One cell repeat: a torchrun launch with a timeout and CPU binding, and what it measured."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heartlm import lifeline
from heartlm.scale import metrics
from heartlm.scale.energy import EnergySampler
from heartlm.train.launch import torchrun_log_dir
from heartlm.train.profile import PARTS, PROFILE_AFTER


@dataclass(frozen=True)
class Cell:
    """One point of the grid; `gpus` counts CPU processes on a machine without GPUs."""

    task: str
    window: int
    gpus: int
    cpus: int
    scaling: str
    backend: str
    data_path: str

    @property
    def id(self) -> str:
        return (
            f"{self.task}-w{self.window}-g{self.gpus}-c{self.cpus}-{self.scaling}"
            f"-{self.backend}-{self.data_path}"
        )

    @property
    def baseline_key(self) -> tuple:
        """Everything but the GPU count: cells with one key share T_1."""
        return (self.task, self.window, self.cpus, self.scaling, self.backend, self.data_path)


@dataclass(frozen=True)
class Workload:
    """The fixed work of a cell: `batch x steps` windows of `window` beats, the same for every N.

    weak: every GPU takes `batch` windows per step for `steps / N` steps;
    strong: the N GPUs share a global batch of `batch` windows for `steps` steps.
    `warmup` untimed steps run first, and `profile` profiled (untimed) steps after them.
    """

    batch: int
    steps: int
    warmup: int
    profile: int = 0

    def global_batch(self, cell: Cell) -> int:
        return self.batch * cell.gpus if cell.scaling == "weak" else self.batch

    def timed_steps(self, cell: Cell) -> int:
        return self.steps // cell.gpus if cell.scaling == "weak" else self.steps

    @property
    def warm(self) -> int:
        """Warm-up steps before the profiled ones: the engine opens its profiler window after
        PROFILE_AFTER steps, so a profiled cell warms up at least that long."""
        return max(self.warmup, PROFILE_AFTER) if self.profile else self.warmup

    @property
    def untimed(self) -> int:
        """Steps before the timed ones: the warm-up, then the profiled ones."""
        return self.warm + self.profile

    def total_steps(self, cell: Cell) -> int:
        return self.untimed + self.timed_steps(cell)

    def log_every(self, cell: Cell) -> int:
        """Metrics windows that end where warm-up and profiling end, so none is mixed."""
        return math.gcd(self.warm, self.profile, self.timed_steps(cell)) or 1

    def tokens(self, cell: Cell) -> int:
        return self.global_batch(cell) * self.timed_steps(cell) * cell.window


@dataclass(frozen=True)
class Launch:
    """How a cell repeat is started; built by the grid, run by `run_launch`."""

    argv: list[str]
    env: dict[str, str]
    run_dir: Path
    log: Path
    timeout_s: float
    gpu_indices: list[int]
    binding: str


def core_groups(n_procs: int, cpus: int, usable: list[int]) -> tuple[str, str]:
    """Disjoint cores per rank where the machine has enough, else no pinning.

    Returns the `heartlm.scale.bind` spec and a word for results.csv.
    """
    if n_procs * cpus > len(usable):
        return "", f"shared ({len(usable)} cores for {n_procs}x{cpus})"
    groups = [usable[r * cpus : (r + 1) * cpus] for r in range(n_procs)]
    return "/".join(",".join(map(str, g)) for g in groups), "disjoint"


def torchrun_argv(n_procs: int, core_spec: str, command: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={n_procs}",
        "-m",
        "heartlm.scale.bind",
        "--cores",
        core_spec,
        "--",
        *command,
    ]


def read_step_records(run_dir: Path) -> list[dict[str, Any]]:
    """The per-step lines of RUN/metrics.jsonl (last one wins for a repeated step)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    by_step: dict[int, dict[str, Any]] = {}
    for line in path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written when the launch was cut off
        if isinstance(rec, dict) and "step" in rec and "step_time_s" in rec:
            by_step[int(rec["step"])] = rec
    return [by_step[s] for s in sorted(by_step)]


def _count_steps(run_dir: Path) -> int:
    try:
        return sum(1 for line in open(run_dir / "metrics.jsonl", "rb") if b'"step_time_s"' in line)
    except OSError:
        return 0


def _last_error(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    for line in reversed(lines):
        if line.startswith("heartlm: error"):
            return line
    for line in reversed(lines):
        if "Error" in line or "error" in line:
            return line[:300]
    return lines[-1][:300] if lines else ""


def stop_group(proc: subprocess.Popen) -> None:
    """End the launch and every rank it started (they share its process group)."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_launch(launch: Launch, cell: Cell, work: Workload) -> dict[str, Any]:
    """Run one repeat; never raises for a failing cell, returns its status and error."""
    result: dict[str, Any] = {
        "cell": cell.id,
        "command": launch.argv,
        "binding": launch.binding,
        "status": "ok",
        "error": "",
    }
    start = time.monotonic()
    with (
        torchrun_log_dir({**os.environ, **launch.env}) as env,
        open(launch.log, "w") as log,
        EnergySampler(launch.gpu_indices, lambda: _count_steps(launch.run_dir)) as energy,
    ):
        # Its own session, so a timeout can end the whole group; and it ends with us.
        proc = subprocess.Popen(
            lifeline.wrap(launch.argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=launch.timeout_s)
        except subprocess.TimeoutExpired:
            stop_group(proc)
            code = None
        except BaseException:
            stop_group(proc)  # Ctrl-C: leave no rank behind; the repeat is rerun on resume
            raise
    result["wall_s"] = time.monotonic() - start
    result["energy_source"] = energy.source
    if code is None:
        return {**result, "status": "timeout", "error": f"timed out after {launch.timeout_s:g} s"}
    if code != 0:
        error = _last_error(launch.log)
        return {**result, "status": "failed", "error": f"exit {code}: {error}".strip()}
    return _measure(result, launch, cell, work, energy)


def _measure(
    result: dict[str, Any], launch: Launch, cell: Cell, work: Workload, energy: EnergySampler
) -> dict[str, Any]:
    records = read_step_records(launch.run_dir)
    steps = work.timed_steps(cell)
    breakdown, profiled = read_breakdown(launch.run_dir)
    try:
        time_s, measured = metrics.workload_time(records, work.untimed, steps, profiled)
    except ValueError as exc:
        return {**result, "status": "failed", "error": f"metrics.jsonl: {exc}"}
    timed = [r for r in records if r["step"] > work.untimed and r["step"] not in profiled]
    tokens = work.tokens(cell)
    result.update(
        time_s=time_s,
        steps=steps,
        steps_measured=measured,
        tokens=tokens,
        tokens_per_s=tokens / time_s,
        mfu=_median([r.get("mfu") for r in timed]),
        max_mem_gib=max((r["max_mem_gib"] for r in timed if "max_mem_gib" in r), default=None),
        data_wait_pct=_median([r.get("data_wait_pct") for r in timed]),
    )
    result.update(breakdown)
    result["grad_bytes"] = _weight_bytes(launch.run_dir)
    _drop_heavy(launch.run_dir)
    watts = energy.mean_power(work.untimed, work.total_steps(cell))
    if watts is not None:
        result["energy_per_pass_j"] = watts * time_s
        result["energy_per_token_j"] = watts * time_s / tokens
    return result


def _weight_bytes(run_dir: Path) -> int | None:
    """Bytes of the fp32 weights, which DDP all-reduces each step: the exported file, or
    4 x the parameters run.json counts (a run without its final save)."""
    weights = run_dir / "model.safetensors"
    if weights.is_file():
        return weights.stat().st_size
    try:
        return 4 * int(json.loads((run_dir / "run.json").read_bytes())["counts"]["parameters"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _drop_heavy(run_dir: Path) -> None:
    """A grid of base-preset cells would fill the disk with weights and checkpoints that
    nobody reads again; the metrics, breakdown, config and log stay."""
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    (run_dir / "model.safetensors").unlink(missing_ok=True)


def _median(values: list[Any]) -> float | None:
    nums = [float(v) for v in values if isinstance(v, int | float)]
    return metrics.summarise(nums)[0] if nums else None


def read_breakdown(run_dir: Path) -> tuple[dict[str, float], range]:
    """Per-step seconds in compute, exposed communication, data wait and other (which sum
    to the step) and overlapped communication (breakdown.json), and the steps (1-based)
    that were profiled, which are not timed."""
    try:
        raw = json.loads((run_dir / "breakdown.json").read_bytes())
    except (OSError, ValueError):  # ValueError: not JSON, or not UTF-8
        return {}, range(0)
    keys = ("step_s", *PARTS, "comm_overlapped_s")
    found = {k: float(raw[k]) for k in keys if isinstance(raw.get(k), int | float)}
    first, count = raw.get("first_step"), raw.get("profiled_steps")
    if isinstance(first, int) and isinstance(count, int):
        return found, range(first, first + count)
    return found, range(0)
