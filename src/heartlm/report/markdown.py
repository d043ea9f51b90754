"""DIR/report.md: tables copied verbatim from results.csv, the environment, the model."""

from __future__ import annotations

import json
from pathlib import Path

from heartlm.report.study import Study

MAIN = ["task", "window", "scaling", "backend", "gpus", "cpus", "time_s", "speedup",
        "efficiency", "overhead_s", "tokens_per_s", "mfu", "max_mem_gib", "status"]  # fmt: skip
BREAKDOWN = ["task", "window", "scaling", "backend", "gpus", "cpus", "step_s", "compute_s",
             "comm_exposed_s", "data_wait_s", "other_s", "comm_overlapped_s",
             "data_wait_pct"]  # fmt: skip
REPEATS = ["task", "window", "scaling", "backend", "gpus", "cpus", "repeats_ok", "repeats",
           "time_s", "time_min_s", "time_max_s", "wall_s", "energy_per_pass_j",
           "energy_per_token_j", "binding"]  # fmt: skip
ENV_KEYS = ["host", "gpu_model", "gpu_count", "driver", "cuda", "nccl", "torch", "cpu_model",
            "cpu_count", "cpus_usable", "os"]  # fmt: skip


def table(rows: list[dict[str, str]], columns: list[str]) -> str:
    """A markdown table of the given results.csv columns, strings unchanged."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(str(r.get(c, "")).replace("|", "/") for c in columns) + " |")
    return "\n".join(lines)


def _shown(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """Measured rows, less the 1-GPU reference rows of backends with no multi-GPU result yet
    (results.csv repeats the one 1-GPU cell for every backend it is compared with)."""

    def group(r: dict[str, str]) -> tuple[str, ...]:
        return (r["task"], r["window"], r["scaling"], r["backend"], r["cpus"])

    scaled = {group(r) for r in rows if r["gpus"] != "1"}
    first = {r["backend"] for r in rows[:1]}
    return [r for r in rows if r["gpus"] != "1" or group(r) in scaled or r["backend"] in first]


def _pending(rows: list[dict[str, str]]) -> str:
    """One line for the cells of the grid that have not run yet (a later call resumes them)."""
    if not rows:
        return ""
    kinds = sorted({f"{r['task']} w{r['window']} {r['backend']} {r['cpus']} CPUs" for r in rows})
    return f"\n\n{len(rows)} cells of the grid have not run yet: {'; '.join(kinds)}."


def _workload(study: Study) -> str:
    w = study.grid.get("workload", {})
    if not w:
        return "(grid.json missing: workload unknown)"
    return (
        f"Every cell processes the same number of windows: `steps` x `batch` at 1 GPU "
        f"(steps {w.get('steps')}, preset `{w.get('preset')}`, seed {w.get('seed')}). "
        "Weak scaling keeps the per-GPU batch and runs steps / N steps; strong scaling keeps "
        "the global batch (split over N GPUs) and runs all steps. "
        f"{w.get('warmup')} warm-up steps run first and are not timed. "
        "`time_s` (T) is the sum of the engine's step times (metrics.jsonl `step_time_s`) "
        "over the timed steps, median over repeats; `wall_s` is the whole launch "
        "(startup, compilation, export). S = T1/TN, E = S/N, O = TN - T1/N, with T1 the "
        "1-GPU cell of the same task, window, CPUs, scaling, backend and data path. "
        "`mfu` is per GPU: model FLOP/s of all GPUs / (GPUs x one GPU's bf16 peak); "
        "`max_mem_gib` is the peak memory allocated on rank 0's GPU. "
        "Breakdown columns are seconds per step from the engine's breakdown.json, measured on "
        "the profiler trace's timeline: compute, exposed communication, data wait and other "
        "are exclusive and sum to `step_s`; `comm_overlapped_s` is communication hidden "
        "behind compute or data work, not part of that sum."
    )


PROFILED_TOLERANCE = 0.10
"""A cell's profiled step (`step_s`) further than this from its timed step (`time_s` /
`steps`) is named under the breakdown: the profiler slowed that window (2 x H100, 2 GPUs,
window 128: 73 ms profiled against 48 ms timed in one cell, benchmarks/README.md)."""


def _profiled_vs_timed(rows: list[dict[str, str]]) -> str:
    """Which cells' breakdown describes a window slower or faster than their timed steps."""
    apart = []
    for r in rows:
        if not (r.get("step_s") and r.get("time_s") and r.get("steps")):
            continue
        timed = float(r["time_s"]) / float(r["steps"])
        if abs(float(r["step_s"]) / timed - 1) > PROFILED_TOLERANCE:
            apart.append(f"{r['task']} w{r['window']} {r['scaling']} {r['backend']} "
                         f"{r['gpus']} GPUs {r['cpus']} CPUs ({1e3 * float(r['step_s']):.1f} "
                         f"ms profiled, {1e3 * timed:.1f} ms timed)")  # fmt: skip
    if not apart:
        return (f"Every profiled step is within {100 * PROFILED_TOLERANCE:.0f} % of its cell's "
                "timed step (`time_s` / `steps`).")  # fmt: skip
    return (f"The profiled window is more than {100 * PROFILED_TOLERANCE:.0f} % away from the "
            f"timed step (`time_s` / `steps`) in: {'; '.join(apart)}. There the breakdown "
            "describes the profiler's steps; compare those cells on `time_s`.")  # fmt: skip


def _goals(study: Study) -> str:
    """The study's two goals: 1 CPU per GPU within 3 % of the most CPUs; data wait <= 1 %."""
    ref = study.reference_cpus()
    lines = [f"| task | window | scaling | gpus | time_s at 1 CPU | time_s at {ref} CPUs | "
             "1 CPU slower by | within 3 % |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    done = [r for r in study.rows if r["time_s"]]
    for r in done:
        if r["cpus"] != ref:
            continue
        one = next((o for o in done if o["cpus"] == "1" and all(
            o[k] == r[k] for k in ("task", "window", "scaling", "gpus", "backend", "data_path")
        )), None)  # fmt: skip
        if one is None or ref == "1":
            continue
        slower = float(one["time_s"]) / float(r["time_s"]) - 1
        lines.append(f"| {r['task']} | {r['window']} | {r['scaling']} | {r['gpus']} | "
                     f"{one['time_s']} | {r['time_s']} | {100 * slower:.2f} % | "
                     f"{'yes' if slower <= 0.03 else 'no'} |")  # fmt: skip
    waits = [float(r["data_wait_pct"]) for r in done if r["data_wait_pct"]]
    wait = (f"Largest data wait: {max(waits):.3g} % of step time (goal <= 1 %)."
            if waits else "No cell reported its data wait.")  # fmt: skip
    cpu = "\n".join(lines) if len(lines) > 2 else "No cell pair with 1 CPU and more CPUs."
    return f"{cpu}\n\n{wait}"


def _environment(study: Study) -> str:
    env = study.environment
    if not env:
        return "(environment.json missing)"
    lines = ["| key | value |", "|---|---|"]
    lines += [f"| {k} | {env.get(k)} |" for k in ENV_KEYS if k in env]
    versions = env.get("versions", {})
    if versions:
        lines.append(f"| versions | {', '.join(f'{k} {v}' for k, v in versions.items())} |")
    text = "\n".join(lines)
    if env.get("topology"):
        text += f"\n\n`nvidia-smi topo -m`:\n\n```\n{env['topology']}\n```"
    return text


def _model(curves: dict[str, dict], assumptions: dict[str, str]) -> str:
    if not curves:
        return "No DDP configuration has a successful 1-GPU cell and its weight size: no model."
    out = ["**This section is a MODEL, not a measurement** (see `heartlm.report.commmodel`).", ""]
    out += [f"- {k}: {v}" for k, v in assumptions.items()]
    out += ["", "| configuration | fitted overhead ms (GPUs) | network Gb/s | nodes | GPUs | "
            "predicted time_s | predicted speedup | predicted efficiency |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for label, c in curves.items():
        fit = c["fit"]
        over = ", ".join(f"{1e3 * v:.3g} ({n})" for n, v in sorted(fit.overhead_s.items()))
        for gbps, m in c["model"].items():
            for nodes, n, t, s in zip(m["nodes"], m["gpus"], m["time"], m["speedup"],
                                      strict=True):  # fmt: skip
                out.append(f"| {label} | {over or '-'} | {gbps:g} | {nodes} | {n} | {t:.4g} | "
                           f"{s:.4g} | {s / n:.3g} |")  # fmt: skip
    return "\n".join(out)


def _socket(curves: dict[str, dict]) -> str:
    """The emulated second node: measured step beside the model's (goal: within 15 %)."""
    lines = ["| configuration | agents x GPUs | socket bus bandwidth GB/s | measured step_s | "
             "predicted step_s | error | within 15 % | speedup |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for label, c in curves.items():
        for r in c["socket"]:
            lines.append(
                f"| {label} | 2 x {r['gpus_per_node']} | {r['busbw'] / 1e9:.3g} | "
                f"{r['step_s']:.4g} | {r['predicted_step_s']:.4g} | {100 * r['error']:+.1f} % | "
                f"{'yes' if abs(r['error']) <= 0.15 else 'no'} | {r['speedup']:.3g} |"
            )
    if len(lines) == 2:
        return "No socket run (python -m heartlm.scale.twonode DIR) with its bandwidth."
    return (
        "Two torchrun agents on one machine with NCCL kept off NVLink and shared memory "
        "(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1): every rank all-reduces over a socket. "
        "Predicted: the model fitted on the one-node cells, with the measured socket bus "
        "bandwidth for all ranks (DIR/comm).\n\n" + "\n".join(lines)
    )


def write_report(
    study: Study, figures: list[Path], curves: dict[str, dict], assumptions: dict[str, str]
) -> str:
    measured = ("ok", "partial")  # partial: some repeats failed, the others are timed
    rows = _shown([r for r in study.rows if r["status"] in measured])
    pending = [r for r in study.rows if r["status"] == "pending"]
    failed = [r for r in study.rows if r["status"] not in (*measured, "pending")]
    pngs = [p for p in figures if p.suffix == ".png"]
    parts = [
        "# heartlm scaling study",
        "",
        f"Study folder `{study.folder.name}`; every number in the tables below is copied "
        "from `results.csv` unchanged.",
        "",
        "## Workload",
        "",
        _workload(study),
        "",
        "## Results",
        "",
        table(rows, MAIN) + _pending(pending),
        "",
        "## Goals (derived from the tables above)",
        "",
        _goals(study),
        "",
        "## Step time breakdown",
        "",
        table(rows, BREAKDOWN),
        "",
        _profiled_vs_timed(rows),
        "",
        "## Repeats, wall time, energy and CPU binding",
        "",
        table(rows, REPEATS),
        "",
        "## Cells that did not finish",
        "",
        table(failed, ["task", "window", "scaling", "gpus", "cpus", "status", "error"])
        if failed
        else "None.",
        "",
        "## Figures",
        "",
        *[f"![{p.stem}](figures/{p.name})" for p in pngs],
        "",
        "## Emulated second node",
        "",
        _socket(curves),
        "",
        "## Multi-node prediction",
        "",
        _model(curves, assumptions),
        "",
        "## Environment",
        "",
        _environment(study),
        "",
        "## Grid",
        "",
        f"```json\n{json.dumps(study.grid.get('config', {}), indent=1)}\n```",
        "",
    ]
    return "\n".join(parts)
