"""Weak-scaling benchmark helpers: a synthetic token corpus, and the summary of the runs.

Used by benchmarks/run_gpu_scaling.sh (see there for the command). Metrics as the seed
paper defines them, with T_1 the 1-GPU time for the same work as the N-GPU cell:
speedup S = T_1 / T_N, efficiency E = S / N, overhead O = T_N - T_1 / N.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

from heartlm.runinfo import versions
from heartlm.shards import NUM_SPECIAL, SPECIAL_TOKENS, STREAMS, write_shard


def write_corpus(
    folder: Path, n_records: int, beats_per_record: int, vocab: int, seed: int
) -> None:
    """Random tokens in the token-folder format: throughput does not depend on their values."""
    rng = np.random.default_rng(seed)
    n = n_records * beats_per_record
    folder.mkdir(parents=True, exist_ok=True)
    streams = {
        "morph": rng.integers(NUM_SPECIAL, vocab, n, dtype=np.uint16),
        "rhythm": rng.integers(NUM_SPECIAL, NUM_SPECIAL + 8, n, dtype=np.uint16),
        "aami": rng.integers(0, 5, n, dtype=np.int8),
        "rhythm_label": rng.integers(0, 8, n, dtype=np.int8),
        "boundaries": np.arange(0, n + 1, beats_per_record, dtype=np.int64),
    }
    for name, array in streams.items():
        write_shard(folder / STREAMS[name], array)
    meta = {
        "format": "heartlm.tokens",
        "version": 1,
        "vocab_size": vocab,
        "rhythm_vocab_size": NUM_SPECIAL + 8,
        "special": SPECIAL_TOKENS,
        "fs": 360,
        "window_samples": 256,
        "n_beats": n,
        "records": [
            {
                "name": f"synthetic{r:04d}",
                "db": "synthetic",
                "start": r * beats_per_record,
                "n_beats": beats_per_record,
            }
            for r in range(n_records)
        ],
    }
    (folder / "tokens.json").write_text(json.dumps(meta, indent=1) + "\n")


def steady(metrics: Path, skip_frac: float = 0.3) -> dict[str, float]:
    """Median tokens/s and step time over the steps after warm-up (compilation, allocator)."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "tokens_per_s" in r and "step_time_s" in r]
    if not rows:
        raise SystemExit(f"{metrics}: no rows with tokens_per_s and step_time_s")
    kept = rows[int(len(rows) * skip_frac) :] or rows
    return {
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in kept),
        "step_time_s": statistics.median(r["step_time_s"] for r in kept),
        "steps": len(rows),
        "steps_measured": len(kept),
    }


def summarize(results: Path, out: Path, command: str) -> dict:
    cells = []
    for run in sorted(
        results.glob("w*_g*"), key=lambda p: tuple(int(x[1:]) for x in p.name.split("_"))
    ):
        window, gpus = (int(part[1:]) for part in run.name.split("_"))
        metrics = run / "metrics.jsonl"
        if not metrics.is_file():
            cells.append({"window": window, "gpus": gpus, "error": "no metrics.jsonl"})
            continue
        cell = {"window": window, "gpus": gpus, **steady(metrics)}
        run_json = run / "run.json"
        if run_json.is_file():
            config = json.loads(run_json.read_text()).get("config", {})
            cell["global_batch"] = config.get("train", {}).get("batch")
        cells.append(cell)
    for cell in cells:
        base = next((c for c in cells if c["window"] == cell["window"] and c["gpus"] == 1), None)
        if "tokens_per_s" not in cell or base is None or "tokens_per_s" not in base:
            continue
        # Weak scaling: the N-GPU step does N one-GPU steps' work, so over the measured
        # steps T_N = steps * t_N and T_1 = N * steps * t_1.
        n, steps = cell["gpus"], cell["steps_measured"]
        t_n, t_1 = steps * cell["step_time_s"], n * steps * base["step_time_s"]
        cell["speedup"] = t_1 / t_n
        cell["efficiency"] = cell["speedup"] / n
        cell["overhead_s"] = t_n - t_1 / n
        cell["throughput_ratio"] = cell["tokens_per_s"] / base["tokens_per_s"]
    info = {
        "benchmark": "weak scaling, heartlm pretrain --preset base",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "host": platform.node(),
        "gpus": _gpu_names(),
        "versions": versions(),
        "cells": cells,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_scaling.json").write_text(json.dumps(info, indent=2) + "\n")
    (out / "gpu_scaling.md").write_text(_markdown(info))
    return info


def _gpu_names() -> list[str]:
    try:
        found = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return []
    return [line.strip() for line in found.stdout.splitlines() if line.strip()]


def _markdown(info: dict) -> str:
    lines = [
        "# GPU weak scaling: heartlm pretrain, base preset",
        "",
        f"- date: {info['date']}",
        f"- host: {info['host']}; GPUs: {', '.join(info['gpus']) or 'none found'}",
        f"- versions: {', '.join(f'{k} {v}' for k, v in info['versions'].items())}",
        f"- command: `{info['command']}`",
        "- S = T_1/T_N, E = S/N, O = T_N - T_1/N (T_1: one GPU doing the N-GPU cell's work);",
        "  T from the median step time over the steps after the first 30 % (warm-up,",
        "  compilation), times the measured steps; tokens/s likewise a median.",
        "",
        "| window | GPUs | tokens/s | step s | speedup S | efficiency E | overhead O (s) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in info["cells"]:
        if "tokens_per_s" not in c:
            lines.append(f"| {c['window']} | {c['gpus']} | {c.get('error', '?')} | | | | |")
            continue
        s, e, o = c.get("speedup"), c.get("efficiency"), c.get("overhead_s")
        lines.append(
            f"| {c['window']} | {c['gpus']} | {c['tokens_per_s']:,.0f} | {c['step_time_s']:.4f} | "
            + " | ".join("" if v is None else f"{v:.3f}" for v in (s, e, o))
            + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    c = sub.add_parser("corpus", help="write a synthetic token folder")
    c.add_argument("folder", type=Path)
    c.add_argument("--records", type=int, default=200)
    c.add_argument("--beats-per-record", type=int, default=4096)
    c.add_argument("--vocab", type=int, default=1029)
    c.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("summarize", help="tokens/s, speedup, efficiency, overhead")
    s.add_argument("results", type=Path)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--command", default="benchmarks/run_gpu_scaling.sh")
    args = parser.parse_args(argv)
    if args.what == "corpus":
        write_corpus(args.folder, args.records, args.beats_per_record, args.vocab, args.seed)
    else:
        info = summarize(args.results, args.out, args.command)
        print((args.out / "gpu_scaling.md").read_text(), end="")
        return 0 if all("tokens_per_s" in c for c in info["cells"]) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
