"""The seed paper's scaling metrics (speedup, efficiency, overhead) and repeat summaries."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence


def speedup(t1: float, tn: float) -> float:
    """S = T_1 / T_N (seed paper, eq. 1)."""
    return t1 / tn


def efficiency(t1: float, tn: float, n: int) -> float:
    """E = S / N (seed paper, eq. 2)."""
    return speedup(t1, tn) / n


def overhead(t1: float, tn: float, n: int) -> float:
    """O = T_N - T_1 / N (seed paper, eq. 3), in the unit of the times."""
    return tn - t1 / n


def summarise(values: Sequence[float]) -> tuple[float, float, float]:
    """Median, min and max of the repeats of one cell."""
    if not values:
        raise ValueError("no values to summarise")
    return statistics.median(values), min(values), max(values)


def workload_time(
    records: Sequence[dict], warmup: int, timed_steps: int, skip: Iterable[int] = ()
) -> tuple[float, int]:
    """T of one run from its metrics.jsonl records: the step times after warm-up.

    The engine logs the mean step time of each window of `log_every` steps (records of
    one window share `elapsed_s`). Windows that hold a warm-up step (step <= `warmup`)
    or a step in `skip` (profiled steps) are left out whole. T is the sum of the rest,
    scaled to `timed_steps` when windows did not line up (then fewer steps remain).
    Returns T and the number of steps measured.
    """
    skip = set(skip)
    windows: dict[object, list[dict]] = {}
    for rec in records:
        windows.setdefault(rec.get("elapsed_s", rec["step"]), []).append(rec)
    kept = [
        r
        for window in windows.values()
        if all(r["step"] > warmup and r["step"] not in skip for r in window)
        for r in window
    ]
    if not kept:
        raise ValueError(f"no timed steps among {len(records)} logged (warm-up {warmup})")
    if len(kept) > timed_steps:
        raise ValueError(f"{len(kept)} timed steps logged, expected {timed_steps}")
    total = float(sum(r["step_time_s"] for r in kept))
    return total * timed_steps / len(kept), len(kept)
