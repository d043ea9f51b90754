"""Measure the cells of a `heartlm scale` study again from their own run folders.

    PYTHONPATH=src python benchmarks/scale_remeasure.py STUDY > cells.json

Each cell's metrics.jsonl and breakdown.json are read through the same code the grid uses
(`heartlm.scale.cell._measure`), so a fix in how a cell is timed can be applied to runs that
already happened, without a GPU. Energy is not re-read (it was sampled live).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

from heartlm.scale.cell import Cell, Workload, _measure


def remeasure(study: Path) -> list[dict]:
    w = json.loads((study / "grid.json").read_text())["workload"]
    rows = []
    for run in sorted(study.glob("cells/*/r*/run")):
        cell_id = run.parent.parent.name
        task, window, gpus, cpus, scaling, backend, path = cell_id.split("-")
        cell = Cell(task, int(window[1:]), int(gpus[1:]), int(cpus[1:]), scaling, backend, path)
        work = Workload(batch=w["tokens_per_step"] // cell.window, steps=w["steps"],
                        warmup=w["warmup"], profile=w["profile_steps"])  # fmt: skip
        found = _measure({"cell": cell_id, "repeat": run.parent.name}, SimpleNamespace(run_dir=run),
                         cell, work, SimpleNamespace(mean_power=lambda a, b: None))  # fmt: skip
        rows.append(found)
    return rows


if __name__ == "__main__":
    print(json.dumps(remeasure(Path(sys.argv[1])), indent=1))
