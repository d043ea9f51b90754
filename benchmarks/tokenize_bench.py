"""Throughput of `heartlm tokenize`: beat store → codebook + token shards, in beats/s.

Give it a store made by `heartlm ingest` (`--store`), or let it write a synthetic store
of `--beats N` windows first (not timed: that is ingest's work). Writes a JSON result with
machine, versions, date and the exact command.

    python benchmarks/tokenize_bench.py --store S --device cpu \
        --out benchmarks/results/tokenize_cpu.json
    python benchmarks/tokenize_bench.py --beats 50000000 --device cuda --work /tmp/tokbench \
        --out benchmarks/results/tokenize_h100.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from heartlm.runinfo import cpu_model, versions
from heartlm.store import TABLE_DTYPE, RecordEntry, StoreWriter
from heartlm.tokens import TokenizeConfig, tokenize

BLOCK = 1 << 18  # synthetic beats generated at once, then reused with a per-block gain
BEATS_PER_RECORD = 2000  # about one 30-minute MIT-BIH record


def synthetic_store(folder: Path, n: int, window: int, fs: float, seed: int = 0) -> Path:
    """`n` beats of a dozen Gaussian-sum shapes with random gain, offset, width and noise."""
    rng = np.random.default_rng(seed)
    t = np.linspace(-1, 1, window)[None, :]
    n_shapes = 12
    centre = rng.uniform(-0.3, 0.3, (n_shapes, 3, 1))
    width = rng.uniform(0.03, 0.25, (n_shapes, 3, 1))
    height = rng.uniform(-1.5, 1.5, (n_shapes, 3, 1))
    shapes = (height * np.exp(-(((t - centre) / width) ** 2))).sum(axis=1)
    label = rng.integers(0, n_shapes, BLOCK)
    block = shapes[label] * rng.uniform(0.3, 2.5, (BLOCK, 1)) + rng.normal(0, 0.1, (BLOCK, 1))
    block = (block + rng.normal(0, 0.03, (BLOCK, window))).astype(np.float32)
    table = np.zeros(BLOCK, TABLE_DTYPE)
    rr = rng.normal(0.8, 0.05, BLOCK + 1).astype(np.float32)
    table["rr_prev"], table["rr_next"] = rr[:-1], rr[1:]
    table["aami"] = (label % 5).astype(np.int8)
    table["rhythm"] = 1
    pre = window // 2
    w = StoreWriter(folder, fs=fs, pre_samples=pre, post_samples=window - pre)
    done, r = 0, 0
    while done < n:
        gain = np.float32(rng.uniform(0.8, 1.2))
        offset = (r * BEATS_PER_RECORD) % BLOCK
        count = min(BEATS_PER_RECORD, n - done, BLOCK - offset)
        rows = slice(offset, offset + count)
        entry = RecordEntry(f"s{r:06d}", "synthetic", "bench", fs, "II", count * int(fs))
        w.append(entry, block[rows] * gain, table[rows])
        done, r = done + count, r + 1
    w.close()
    return folder


def machine() -> dict[str, object]:
    info: dict[str, object] = {
        "host": platform.node(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_1m_before": os.getloadavg()[0],
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", type=Path, help="a beat store from `heartlm ingest`")
    p.add_argument("--beats", type=int, default=1_000_000, help="synthetic store size")
    p.add_argument("--window", type=int, default=163, help="synthetic window (ingest: 0.65 s)")
    p.add_argument("--fs", type=float, default=250.0, help="synthetic store rate (ingest default)")
    p.add_argument("--device", default="auto")
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--sample", type=int, default=200_000)
    p.add_argument("--iters", type=int, default=25)
    p.add_argument("--batch", type=int, default=65536)
    p.add_argument("--codebook", type=Path, help="reuse a codebook: time assignment only")
    p.add_argument("--work", type=Path, help="scratch folder (default: a temporary one)")
    p.add_argument("--out", type=Path, required=True, help="result JSON")
    args = p.parse_args()

    host = machine()  # before the run, so the load average is other processes' load
    work = Path(tempfile.mkdtemp(prefix="tokbench-", dir=args.work))
    try:
        store, build_s = args.store, 0.0
        if store is None:
            t = time.perf_counter()
            store = synthetic_store(work / "store", args.beats, args.window, args.fs)
            build_s = time.perf_counter() - t
        config = TokenizeConfig(
            vocab=args.vocab,
            sample=args.sample,
            iters=args.iters,
            batch=args.batch,
            device=args.device,
            codebook=args.codebook,
        )
        cpu0 = time.process_time()
        summary = tokenize(store, work / "tokens", config)
        cpu_s = time.process_time() - cpu0
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n = summary["counts"]["beats"]
    timings = summary["timings_s"]
    result = {
        "benchmark": "tokenize: beat store -> codebook + token shards",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": host,
        "versions": versions(),
        "store": str(args.store) if args.store else f"synthetic, {args.beats} beats",
        "store_made_by": _store_command(args.store),
        "codebook": str(args.codebook) if args.codebook else "learnt in this run",
        "synthetic_store_build_s": build_s,
        "config": {
            k: v for k, v in vars(args).items() if k not in ("out", "work", "store", "codebook")
        },
        "device": str(config.device if config.device != "auto" else _auto()),
        "beats": n,
        "timings_s": timings,
        "process_cpu_s": cpu_s,
        "beats_per_s": n / timings["total"],
        "assign_beats_per_s": n / timings["assign"],
        "beats_per_s_per_core": n / timings["total"] / (os.cpu_count() or 1),
        "projected_50M_beats_s": timings["codebook"]
        + (timings["total"] - timings["codebook"]) * 50e6 / n,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(
        f"{n} beats in {timings['total']:.1f} s: {result['beats_per_s']:,.0f} beats/s"
        f" (assign {result['assign_beats_per_s']:,.0f} beats/s, codebook"
        f" {timings['codebook']:.1f} s) on {result['device']}"
    )
    return 0


def _store_command(store: Path | None) -> str | None:
    if store is None or not (store / "run.json").is_file():
        return None
    return " ".join(json.loads((store / "run.json").read_text()).get("command", []))


def _auto() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


if __name__ == "__main__":
    raise SystemExit(main())
