"""Where a training step's GPU time goes: top CUDA kernels and GPU busy share of one config.

    python benchmarks/profile_step.py --window 128 --batch 256 [--variant key=val,...]

Runs the real loop (like train_bench.py) under torch.profiler for all its steps and prints
the kernels by total CUDA time, plus GPU busy time over wall time of the profiled steps.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
import train_bench


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--variant", default="")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    opts = dict(kv.split("=", 1) for kv in filter(None, args.variant.split(",")))
    bench = argparse.Namespace(
        preset="base", warmup=15, timed=10, log_every=5, records=64, beats_per_record=8192
    )
    device = torch.device("cuda:0")
    train_bench.run_one(bench, args.window, args.batch, "warm", opts, device)  # compile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        row = train_bench.run_one(bench, args.window, args.batch, "prof", opts, device)
    print(row)
    events = prof.key_averages()
    total = sum(e.device_time_total for e in events if e.device_type.name == "CUDA")
    print(f"total CUDA kernel time {total / 1e3:.1f} ms over {bench.warmup + bench.timed} steps")
    print(events.table(sort_by="device_time_total", row_limit=args.top, max_name_column_width=70))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
