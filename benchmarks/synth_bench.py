"""Benchmark `heartlm synth`: beats per second with 1 and more worker processes, files included.

    .venv/bin/python benchmarks/synth_bench.py [--records 16] [--minutes 30] [--fs 360]
        [--workers 1 2] [--out benchmarks/results/synth.json]

Writes JSON (and a markdown table beside it) with the machine, versions, date, command, the
measured rates and the extrapolated time for a 50 M-beat corpus on 16 cores.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from heartlm.runinfo import cpu_model, versions
from heartlm.synth import write_corpus

TARGET_BEATS = 50_000_000
TARGET_CORES = 16


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (the worker processes)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _max_rss_mb(who: int) -> float:
    return round(resource.getrusage(who).ru_maxrss / 1024, 1)  # Linux reports KiB


def measure(records: int, minutes: float, fs: float, workers: int, repeats: int) -> dict:
    best = None
    for _ in range(repeats):
        folder = Path(tempfile.mkdtemp(prefix="synth-bench-")) / "corpus"
        try:
            cpu_before = _cpu_seconds()
            started = time.perf_counter()
            info = write_corpus(folder, records, minutes, fs, seed=0, workers=workers)
            elapsed = time.perf_counter() - started
            cpu = _cpu_seconds() - cpu_before
            size = sum(p.stat().st_size for p in folder.iterdir())
        finally:
            shutil.rmtree(folder.parent, ignore_errors=True)
        beats = info["counts"]["beats"]
        run = {
            "workers": workers,
            "records": records,
            "beats": beats,
            "seconds": round(elapsed, 3),
            "beats_per_s": round(beats / elapsed),
            "beats_per_s_per_worker": round(beats / elapsed / workers),
            "cpu_seconds": round(cpu, 3),
            "beats_per_cpu_s": round(beats / cpu),
            "bytes_written": size,
        }
        if best is None or run["beats_per_s"] > best["beats_per_s"]:
            best = run
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=16)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--fs", type=float, default=360.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2, help="best of this many runs")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/synth.json"))
    args = parser.parse_args()

    load_before = os.getloadavg()
    runs = [measure(args.records, args.minutes, args.fs, w, args.repeats) for w in args.workers]
    result = {
        "benchmark": "synth",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {
            "host": platform.node(),
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        },
        "versions": versions(),
        "corpus": {"records": args.records, "minutes": args.minutes, "fs": args.fs},
        "runs": runs,
        # Peak resident memory of one process: bounded by one record per process, not corpus size.
        "max_rss_mb": {
            "main_process": _max_rss_mb(resource.RUSAGE_SELF),
            "largest_worker": _max_rss_mb(resource.RUSAGE_CHILDREN),
        },
    }
    single = [r for r in runs if r["workers"] == 1]
    if single:
        # On a shared machine the wall-clock rate depends on the neighbours; the CPU-time rate
        # is what one dedicated core would do. Both are given.
        wall, cpu = single[0]["beats_per_s"], single[0]["beats_per_cpu_s"]
        result["extrapolation"] = {
            "beats": TARGET_BEATS,
            "cores": TARGET_CORES,
            "assumes": "linear scaling of the 1-worker rate (records are independent processes)",
            "minutes_at_wall_rate": round(TARGET_BEATS / (wall * TARGET_CORES) / 60, 1),
            "minutes_at_cpu_rate": round(TARGET_BEATS / (cpu * TARGET_CORES) / 60, 1),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(_markdown(result))
    print(json.dumps(result, indent=2))
    return 0


def _markdown(result: dict) -> str:
    m = result["machine"]
    lines = [
        f"# synth benchmark ({result['date']})",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, load {m['loadavg_before']} before the run. "
        f"Command: `{result['command']}`. Corpus: {result['corpus']}.",
        "",
        "| workers | beats | seconds | beats/s | beats/s per worker | beats per CPU-second |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["runs"]:
        lines.append(
            f"| {r['workers']} | {r['beats']} | {r['seconds']} | {r['beats_per_s']} "
            f"| {r['beats_per_s_per_worker']} | {r['beats_per_cpu_s']} |"
        )
    if "extrapolation" in result:
        e = result["extrapolation"]
        lines += [
            "",
            f"50 M beats on {e['cores']} cores: {e['minutes_at_cpu_rate']} minutes at the"
            f" CPU-time rate, {e['minutes_at_wall_rate']} at the wall-clock rate"
            f" ({e['assumes']}).",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
