"""All-reduce bus bandwidth of a process group, as NCCL's tests define it (run it under
torchrun, one process per GPU, or on CPU over gloo):

    torchrun --nproc-per-node 4 -m heartlm.scale.allreduce --out nvlink_n4.json

busbw = bytes / time x 2 (n - 1) / n, so that a ring all-reduce of `bytes` over n ranks
takes 2 (n - 1) / n x bytes / busbw (heartlm.report.commmodel.ring_s). Rank 0 writes the
JSON (sizes, median time of the timed iterations, algbw and busbw in bytes/s, and the
NCCL_* variables, which decide the path: NVLink, shared memory or a socket).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from heartlm.errors import HeartlmError
from heartlm.outdir import atomic_write_text
from heartlm.train.config import DDP_BUCKET_MB
from heartlm.train.distributed import DistEnv, init_distributed, shutdown

# DDP's own default bucket, the engine's, and about the fp32 gradients of the base preset.
DEFAULT_SIZES_MB = (25.0, DDP_BUCKET_MB, 350.0)


def measure(env: DistEnv, nbytes: int, iters: int, warmup: int) -> dict[str, float]:
    """Median seconds of one all-reduce of `nbytes` (fp32), and its algbw and busbw."""
    x = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=env.device)
    times = []
    for i in range(warmup + iters):
        dist.barrier()
        _sync(env)
        t0 = time.perf_counter()
        dist.all_reduce(x)
        _sync(env)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    n = env.world_size
    algbw = x.numel() * 4 / t
    return {"bytes": x.numel() * 4, "time_s": t, "algbw": algbw, "busbw": algbw * 2 * (n - 1) / n}


def _sync(env: DistEnv) -> None:
    if env.device.type == "cuda":
        torch.cuda.synchronize(env.device)


def run(out: Path, sizes_mb: list[float], iters: int, warmup: int, label: str) -> dict[str, Any]:
    env = init_distributed()
    try:
        if not env.distributed:
            raise HeartlmError("heartlm.scale.allreduce: run it under torchrun with 2+ processes")
        results = [measure(env, int(mb * 2**20), iters, warmup) for mb in sizes_mb]
        info = {
            "label": label,
            "world_size": env.world_size,
            "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", env.world_size)),
            "backend": env.backend,
            "device": torch.cuda.get_device_name(env.device) if env.backend == "nccl" else "cpu",
            "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
            "results": results,
        }
        if env.is_main:
            atomic_write_text(out, json.dumps(info, indent=2) + "\n")
        return info
    finally:
        shutdown(env)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m heartlm.scale.allreduce", description=__doc__)
    p.add_argument("--out", type=Path, required=True, help="JSON file rank 0 writes")
    sizes = ",".join(f"{v:g}" for v in DEFAULT_SIZES_MB)
    p.add_argument("--sizes-mb", default=sizes, help=f"tensor sizes in MiB ({sizes})")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--label", default="", help="what path this is, e.g. nvlink or socket")
    args = p.parse_args(argv)
    sizes = [float(v) for v in args.sizes_mb.split(",") if v.strip()]
    run(args.out, sizes, args.iters, args.warmup, args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
