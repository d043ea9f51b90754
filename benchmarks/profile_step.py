"""Where a training step's GPU time goes: top CUDA kernels, and their time by kind.

    python benchmarks/profile_step.py --window 128 --batch 256 [--variant key=val,...]

Runs the real loop (like train_bench.py) under torch.profiler for all its steps and prints
the kernels by total CUDA time, then the same time per step by kind of kernel (matmuls,
attention, fused elementwise and norms, optimizer, copies, communication, other), with the
TFLOP/s that the matmuls and the attention reach and the MFU the step would have if only
they took time.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
import train_bench

from heartlm.model.config import model_config
from heartlm.train.flops import attention_flops_per_token, peak_flops

KINDS = (  # first match wins: attention kernels also say "gemm", NCCL's "Reduce", casts "copy"
    ("communication", re.compile(r"nccl", re.I)),
    ("attention", re.compile(r"sdpa|flash|fmha|attention", re.I)),
    ("matmul", re.compile(r"nvjet|gemm|cutlass|xmma|wgmma|sm90_|splitKreduce|^triton_tem", re.I)),
    ("optimizer", re.compile(r"multi_tensor|adam|foreach", re.I)),
    ("copies", re.compile(r"memcpy|memset|copy_kernel", re.I)),
    ("elementwise and norms", re.compile(r"^triton_|elementwise|reduce|norm", re.I)),
)


def kernel_kind(name: str) -> str:
    return next((kind for kind, pattern in KINDS if pattern.search(name)), "other")


def time_by_kind(kernels: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Summed time of (kernel name, time) pairs by `kernel_kind`, largest first."""
    total: dict[str, float] = {}
    for name, t in kernels:
        kind = kernel_kind(name)
        total[kind] = total.get(kind, 0.0) + t
    return dict(sorted(total.items(), key=lambda kv: -kv[1]))


def kind_table(
    by_kind_us: dict[str, float], steps: int, flops: dict[str, float], peak: float
) -> str:
    """Markdown rows: each kind's GPU time per step and share, and for the kinds with
    `flops` (per step) the TFLOP/s they reach; then the MFU if only those kinds took time."""
    total = sum(by_kind_us.values())
    rows = ["| kernels | ms per step | share | TFLOP/s |", "| --- | --- | --- | --- |"]
    for kind, us in by_kind_us.items():
        ms = us / 1e3 / steps
        rate = f"{flops[kind] / (ms / 1e3) / 1e12:.0f}" if kind in flops and ms > 0 else "–"
        rows.append(f"| {kind} | {ms:.2f} | {us / total:.1%} | {rate} |")
    busy = sum(by_kind_us.get(kind, 0.0) for kind in flops) / 1e6 / steps
    if busy > 0 and peak > 0:
        rows.append(
            f"\nMFU if only {' and '.join(flops)} took time: "
            f"{sum(flops.values()) / busy / peak:.3f}; with every kernel: "
            f"{sum(flops.values()) / (total / 1e6 / steps) / peak:.3f}"
        )
    return "\n".join(rows)


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
    torch.cuda.init()  # train_bench.run_one resets the peak-memory counter, which needs it
    train_bench.run_one(bench, args.window, args.batch, "warm", opts, device)  # compile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        row = train_bench.run_one(bench, args.window, args.batch, "prof", opts, device)
    print(row)
    events = prof.key_averages()
    total = sum(e.device_time_total for e in events if e.device_type.name == "CUDA")
    print(f"total CUDA kernel time {total / 1e3:.1f} ms over {bench.warmup + bench.timed} steps")
    print(events.table(sort_by="device_time_total", row_limit=args.top, max_name_column_width=70))
    kernels = [(e.key, e.self_device_time_total) for e in events if e.device_type.name == "CUDA"]
    steps = bench.warmup + bench.timed
    tokens = args.window * args.batch
    mcfg = model_config(bench.preset, vocab_size=train_bench.VOCAB, max_len=args.window)
    attention = attention_flops_per_token(mcfg, args.window) * tokens
    flops = {"matmul": row["flops_per_token"] * tokens - attention, "attention": attention}
    print(kind_table(time_by_kind(kernels), steps, flops, peak_flops(device)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
