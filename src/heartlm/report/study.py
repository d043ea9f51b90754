"""A scaling-study folder as the report sees it: results.csv rows, grouped into configurations."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from heartlm.errors import HeartlmError
from heartlm.scale.results import COLUMNS, read_results
from heartlm.train.config import DDP_BUCKET_MB

CONFIG_KEYS = ("task", "window", "scaling", "backend", "data_path")


def num(row: dict[str, str], key: str) -> float | None:
    value = row.get(key, "")
    return float(value) if value not in ("", None) else None


# DDP all-reduces gradients in buckets of this size (the engine's default): the bandwidth
# that matters is the one measured at about this size.
BUCKET_BYTES = int(DDP_BUCKET_MB * 2**20)


@dataclass
class Study:
    folder: Path
    rows: list[dict[str, str]]
    environment: dict[str, Any]
    grid: dict[str, Any]
    busbw: dict[str, dict[int, float]] = field(default_factory=dict)
    """measured all-reduce bus bandwidth (bytes/s) per path (nvlink, socket) and ranks"""
    socket_runs: list[dict[str, Any]] = field(default_factory=list)

    def configs(self) -> list[tuple[str, ...]]:
        """Distinct (task, window, scaling, backend, data_path) in results.csv order."""
        return list(dict.fromkeys(tuple(r[k] for k in CONFIG_KEYS) for r in self.rows))

    def label(self, config: tuple[str, ...]) -> str:
        """Short name of a configuration; backend and data path only where they vary."""
        task, window, scaling, backend, data_path = config
        parts = [task, f"w{window}", scaling]
        if len({r["backend"] for r in self.rows}) > 1:
            parts.append(backend)
        if len({r["data_path"] for r in self.rows}) > 1:
            parts.append(data_path)
        return " ".join(parts)

    def micro_batches(self, window: int) -> int:
        """Micro-batches per optimizer step of a weak cell's rank at `window`
        (`--micro-batch` among the grid's engine_args): DDP reduces only during the last
        one's backward."""
        import argparse

        from heartlm.scale.grid import ScaleConfig

        config = self.grid.get("config", {})
        engine = argparse.ArgumentParser(add_help=False, exit_on_error=False)
        engine.add_argument("--micro-batch", type=int)  # `--micro-batch N` or `=N`
        try:
            known, _ = engine.parse_known_args([str(a) for a in config.get("engine_args", [])])
            batch = ScaleConfig(**config).batch_for(window)
            return max(1, -(-batch // known.micro_batch)) if known.micro_batch else 1
        except (argparse.ArgumentError, TypeError, ValueError, ZeroDivisionError):
            return 1

    def ok(self, config: tuple[str, ...], cpus: str | None = None) -> list[dict[str, str]]:
        rows = [
            r
            for r in self.rows
            if tuple(r[k] for k in CONFIG_KEYS) == config
            and r["time_s"]
            and (cpus is None or r["cpus"] == cpus)
        ]
        return sorted(rows, key=lambda r: (int(r["cpus"]), int(r["gpus"])))

    def reference_cpus(self) -> str | None:
        """The CPU count the GPU-scaling figures use: the largest one with results."""
        cpus = {r["cpus"] for r in self.rows if r["time_s"]}
        return max(cpus, key=int) if cpus else None


def _json(path: Path) -> dict[str, Any]:
    """The object in `path`; {} where it is missing, damaged or not an object."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):  # ValueError: not JSON, or not UTF-8
        return {}
    return value if isinstance(value, dict) else {}


def _grid(path: Path) -> dict[str, Any]:
    """grid.json as `heartlm scale` writes it ({"config": {...}, "workload": {...}}); {} (read
    as missing) where it is damaged, or either part is not an object."""
    grid = _json(path)
    parts = [grid.get(k, {}) for k in ("config", "workload")]
    return grid if all(isinstance(p, dict) for p in parts) else {}


POSITIVE_COLUMNS = frozenset(
    {"window", "gpus", "cpus", "batch_per_gpu", "global_batch", "steps", "tokens", "time_s"}
)
"""Columns that a cell of `heartlm scale` fills with a count or a duration above 0: a report
drawn from a 0 or a negative there predicts negative throughput."""


def load_study(folder: Path) -> Study:
    path = folder / "results.csv"
    if not path.is_file():
        raise HeartlmError("no results.csv: not a heartlm scale folder", folder)
    try:
        rows = read_results(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise HeartlmError(f"cannot read ({exc})", path) from None
    if not rows:
        raise HeartlmError("holds no cells, only a header: nothing to report yet", path)
    missing = [
        c
        for c in ("task", "window", "gpus", "cpus", "scaling", "time_s")
        if rows and c not in rows[0]
    ]
    if missing:
        raise HeartlmError(f"missing columns {', '.join(missing)}", path)
    text_columns = {
        "task",
        "scaling",
        "backend",
        "data_path",
        "preset",
        "binding",
        "status",
        "error",
    }
    for line, r in enumerate(rows, start=2):
        if None in r or None in r.values():  # csv.DictReader's marks of a short or long row
            raise HeartlmError(f"line {line}: not as many fields as the header (cut short?)", path)
        for c in COLUMNS:
            r.setdefault(c, "")
            if c not in text_columns and r[c]:
                try:
                    value = float(r[c])
                except ValueError:
                    raise HeartlmError(
                        f"line {line}: {c} is not a number: {r[c]!r}", path
                    ) from None
                if not math.isfinite(value) or (c in POSITIVE_COLUMNS and value <= 0):
                    kind = "a positive number" if c in POSITIVE_COLUMNS else "a finite number"
                    raise HeartlmError(f"line {line}: {c} is not {kind}: {r[c]!r}", path)
    study = Study(folder, rows, _json(folder / "environment.json"), _grid(folder / "grid.json"))
    _load_comm(study, folder / "comm")
    return study


def _load_comm(study: Study, comm: Path) -> None:
    """All-reduce benchmarks (heartlm.scale.allreduce) and socket runs (heartlm.scale.twonode)
    where the GPU study wrote them; a damaged file is left out, as a missing one."""
    for path in sorted(comm.glob("*_n*.json")):
        info = _json(path)
        results = [r for r in info.get("results", []) if isinstance(r, dict) and r.get("busbw")]
        if not results or not isinstance(info.get("world_size"), int):
            continue
        near = min(results, key=lambda r: abs(float(r["bytes"]) - BUCKET_BYTES))
        label = info.get("label") or path.name.split("_n")[0]
        study.busbw.setdefault(label, {})[info["world_size"]] = float(near["busbw"])
    runs = _json(comm / "socket_runs.json").get("runs", [])
    study.socket_runs = [r for r in runs if isinstance(r, dict) and r.get("status") == "ok"]
