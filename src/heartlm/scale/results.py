"""DIR/results.csv: one row per cell, repeats summarised, with S, E and O against T_1."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from heartlm.outdir import atomic_write_text
from heartlm.scale import metrics
from heartlm.scale.cell import Cell, Workload

COLUMNS = [
    "task", "window", "gpus", "cpus", "scaling", "backend", "data_path", "preset",
    "batch_per_gpu", "global_batch", "steps", "warmup_steps", "tokens", "repeats", "repeats_ok",
    "time_s", "time_min_s", "time_max_s", "wall_s",
    "speedup", "efficiency", "overhead_s", "tokens_per_s", "mfu", "max_mem_gib",
    "step_s", "compute_s", "comm_exposed_s", "data_wait_s", "other_s", "comm_overlapped_s",
    "data_wait_pct", "energy_per_pass_j", "energy_per_token_j", "grad_bytes", "binding",
    "status", "error",
]  # fmt: skip


MEDIAN_OF_REPEATS = (
    "wall_s", "mfu", "max_mem_gib", "step_s", "compute_s", "comm_exposed_s", "data_wait_s",
    "other_s", "comm_overlapped_s", "data_wait_pct", "energy_per_pass_j", "energy_per_token_j",
    "grad_bytes",
)  # fmt: skip


def fmt(value: Any) -> str:
    """How a number is written to results.csv (and so, verbatim, into report.md)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _median_of(reps: list[dict[str, Any]], key: str) -> float | None:
    vals = [float(r[key]) for r in reps if isinstance(r.get(key), int | float)]
    return metrics.summarise(vals)[0] if vals else None


def cell_row(cell: Cell, work: Workload, preset: str, reps: list[dict[str, Any]]) -> dict:
    ok = [r for r in reps if r.get("status") == "ok"]
    row: dict[str, Any] = {
        "task": cell.task, "window": cell.window, "gpus": cell.gpus, "cpus": cell.cpus,
        "scaling": cell.scaling, "backend": cell.backend, "data_path": cell.data_path,
        "preset": preset, "batch_per_gpu": work.global_batch(cell) // cell.gpus,
        "global_batch": work.global_batch(cell), "steps": work.timed_steps(cell),
        "warmup_steps": work.warmup, "tokens": work.tokens(cell),
        "repeats": len(reps), "repeats_ok": len(ok),
    }  # fmt: skip
    if ok:
        t_med, t_min, t_max = metrics.summarise([r["time_s"] for r in ok])
        row.update(time_s=t_med, time_min_s=t_min, time_max_s=t_max)
        row["tokens_per_s"] = work.tokens(cell) / t_med
        for key in MEDIAN_OF_REPEATS:
            row[key] = _median_of(ok, key)
        row["status"] = "ok" if len(ok) == len(reps) else "partial"
    else:
        row["status"] = reps[-1]["status"] if reps else "pending"
    failed = [r for r in reps if r.get("status") != "ok"]
    row["error"] = failed[-1].get("error", "") if failed else ""
    row["binding"] = reps[-1].get("binding", "") if reps else ""
    return row


def add_scaling(rows: list[dict[str, Any]]) -> None:
    """Fill speedup, efficiency and overhead from the 1-GPU row of the same cell."""
    base = {_key(r): r["time_s"] for r in rows if r["gpus"] == 1 and r.get("time_s") is not None}
    for r in rows:
        t1, tn = base.get(_key(r)), r.get("time_s")
        if t1 is None or tn is None:
            continue
        r["speedup"] = metrics.speedup(t1, tn)
        r["efficiency"] = metrics.efficiency(t1, tn, r["gpus"])
        r["overhead_s"] = metrics.overhead(t1, tn, r["gpus"])


def _key(row: dict[str, Any]) -> tuple:
    return tuple(row[k] for k in ("task", "window", "cpus", "scaling", "backend", "data_path"))


def write_results(path: Path, rows: list[dict[str, Any]]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({c: fmt(r.get(c)) for c in COLUMNS})
    atomic_write_text(path, buf.getvalue())


def read_results(path: Path) -> list[dict[str, str]]:
    """results.csv as strings, exactly as written."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
