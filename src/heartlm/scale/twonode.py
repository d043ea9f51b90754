"""An emulated second node: two torchrun agents on this machine, NCCL kept off NVLink and
shared memory, so every gradient crosses a socket as between nodes on plain Ethernet.

    python -m heartlm.scale.twonode STUDY --procs 1,2 --window 128

For each P in --procs, two agents (`--nnodes 2 --nproc-per-node P`, c10d rendezvous on
127.0.0.1, agent k on GPUs k*P .. k*P+P-1) run, with NCCL_P2P_DISABLE=1,
NCCL_SHM_DISABLE=1, NCCL_NVLS_ENABLE=0 (and NCCL_IB_DISABLE=1):

1. `heartlm.scale.allreduce`: the bus bandwidth of that path -> STUDY/comm/socket_n{2P}.json;
2. the study's weak pretrain cell for 2P GPUs (grid.json's workload, same command as
   `heartlm scale` runs), and its step time from metrics.jsonl -> STUDY/comm/socket/<cell>/.

STUDY/comm/socket_runs.json lists the runs; `heartlm report STUDY` sets the model's
prediction (fitted on the NVLink cells, with the measured socket bandwidth) beside them.
On a machine without GPUs the same runs go over gloo (a test of the code path).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from heartlm import lifeline
from heartlm.errors import HeartlmError
from heartlm.log import logger
from heartlm.outdir import atomic_write_text
from heartlm.scale import metrics
from heartlm.scale.allreduce import DEFAULT_SIZES_MB
from heartlm.scale.cell import Cell, Workload, read_breakdown, read_step_records, stop_group
from heartlm.scale.grid import INDUCTOR_CACHE, ScaleConfig, engine_command, visible_gpus
from heartlm.train.launch import LAUNCH_ENV, free_port, torchrun_log_dir

SOCKET_ENV = {
    "NCCL_P2P_DISABLE": "1",
    "NCCL_SHM_DISABLE": "1",
    "NCCL_NVLS_ENABLE": "0",
    "NCCL_IB_DISABLE": "1",
}


def agents(module: str, args: list[str], procs: int, env: dict[str, str], log: Path,
           gpus: list[int], timeout_s: float) -> int | None:  # fmt: skip
    """Run `python -m module args` as 2 agents x `procs` processes; the exit code of the
    first agent that failed (0 when both ended well), None on timeout."""
    endpoint, rdzv = f"127.0.0.1:{free_port()}", uuid.uuid4().hex[:12]
    argv = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
        f"--nproc-per-node={procs}", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={rdzv}", "--rdzv-conf=join_timeout=120", "-m", module, *args,
    ]  # fmt: skip
    running = []
    with torchrun_log_dir({**os.environ, **LAUNCH_ENV, **env}) as base, open(log, "w") as out:
        for k in range(2):
            agent_env = dict(base)
            if gpus:
                agent_env["CUDA_VISIBLE_DEVICES"] = ",".join(
                    map(str, gpus[k * procs : (k + 1) * procs])
                )
            running.append(subprocess.Popen(
                lifeline.wrap(argv), stdout=out, stderr=subprocess.STDOUT, env=agent_env,
                start_new_session=True,
            ))  # fmt: skip
        codes: list[int | None] = []
        try:
            for proc in running:
                codes.append(proc.wait(timeout=timeout_s))
        except subprocess.TimeoutExpired:
            codes.append(None)
        finally:
            for proc in running:
                stop_group(proc)
    if None in codes:
        return None
    return next((c for c in codes if c), 0)


def run_pair(study: Path, cfg: ScaleConfig, data: Path, procs: int, window: int,
             timeout_s: float, sizes_mb: str) -> dict[str, Any]:  # fmt: skip
    """The all-reduce benchmark and the weak pretrain cell on 2 x `procs` ranks."""
    world = 2 * procs
    gpus = visible_gpus()
    if gpus and len(gpus) < world:
        raise HeartlmError(f"--procs {procs}: 2 agents need {world} GPUs, this machine has "
                           f"{len(gpus)}")  # fmt: skip
    comm = study / "comm"
    cell = Cell("pretrain", window, world, cfg.backend_cpus or 1, "weak", "ddp", "gpu")
    folder = comm / "socket" / cell.id
    folder.mkdir(parents=True, exist_ok=True)
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(study / INDUCTOR_CACHE)
    env = {**SOCKET_ENV, "OMP_NUM_THREADS": str(cell.cpus), "HEARTLM_PROGRESS": "0",
           "TORCHINDUCTOR_CACHE_DIR": cache}  # fmt: skip
    bench = comm / f"socket_n{world}.json"
    row: dict[str, Any] = {"cell": cell.id, "nodes": 2, "gpus_per_node": procs,
                           "world": world, "task": cell.task, "window": window,
                           "scaling": cell.scaling, "status": "ok", "error": ""}  # fmt: skip
    bench_args = ["--out", str(bench), "--label", "socket", "--sizes-mb", sizes_mb]
    code = agents("heartlm.scale.allreduce", bench_args, procs, env, folder / "allreduce.log",
                  gpus, timeout_s)  # fmt: skip
    if code != 0:
        return {**row, "status": "failed", "error": f"all-reduce benchmark: exit {code}"}
    row["allreduce"] = bench.name
    run_dir = folder / "run"
    command = engine_command(cell, cfg, data, run_dir, None)
    code = agents("heartlm", command, procs, env, folder / "log.txt", gpus, timeout_s)
    if code != 0:
        return {**row, "status": "failed", "error": f"pretrain: exit {code}"}
    return {**row, **measure(run_dir, cfg.workload(window, "pretrain"), cell)}


def measure(run_dir: Path, work: Workload, cell: Cell) -> dict[str, Any]:
    """The run's time over the cell's timed steps (after warm-up and profiling), as the
    grid measures its own cells, and the engine's breakdown."""
    breakdown, profiled = read_breakdown(run_dir)
    steps = work.timed_steps(cell)
    try:
        time_s, _ = metrics.workload_time(read_step_records(run_dir), work.untimed, steps, profiled)
    except ValueError as exc:
        return {"status": "failed", "error": f"metrics.jsonl: {exc}"}
    return {"time_s": time_s, "steps": steps, "step_s": time_s / steps,
            "tokens_per_s": work.tokens(cell) / time_s, **breakdown}  # fmt: skip


def load_study(study: Path) -> tuple[ScaleConfig, Path]:
    """The grid's config and token folder, so the runs repeat its weak cells exactly."""
    try:
        grid = json.loads((study / "grid.json").read_bytes())
        config = ScaleConfig(**grid["config"])
        data = Path(json.loads((study / "run.json").read_bytes())["data"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise HeartlmError(f"not a finished heartlm scale folder ({exc})", study) from None
    return config, data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m heartlm.scale.twonode", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("study", type=Path, help="a folder written by heartlm scale")
    p.add_argument("--procs", default="1,2", help="processes per agent (1,2)")
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per launch")
    sizes = ",".join(f"{v:g}" for v in DEFAULT_SIZES_MB)
    p.add_argument("--sizes-mb", default=sizes, help=f"all-reduce sizes, MiB ({sizes})")
    args = p.parse_args(argv)
    study = args.study.resolve()
    cfg, data = load_study(study)
    path = study / "comm" / "socket_runs.json"
    rows = {r["cell"]: r for r in read_runs(path)}  # earlier runs stay unless redone
    ok = True
    for procs in [int(v) for v in args.procs.split(",") if v.strip()]:
        row = run_pair(study, cfg, data, procs, args.window, args.timeout, args.sizes_mb)
        logger.info("twonode: 2 x %d: %s %s", procs, row["status"],
                    row.get("step_s", row["error"]))  # fmt: skip
        rows[row["cell"]] = row
        ok = ok and row["status"] == "ok"
        atomic_write_text(path, json.dumps({"runs": list(rows.values())}, indent=2) + "\n")
    print(path)
    return 0 if ok else 1


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The runs of socket_runs.json; none when it is missing or damaged."""
    try:
        runs = json.loads(path.read_bytes()).get("runs", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [r for r in runs if isinstance(r, dict) and "cell" in r]


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except HeartlmError as exc:
        print(f"heartlm: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
