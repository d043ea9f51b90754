"""The seed paper's figures, a stacked time breakdown and the multi-node model (PNG + SVG)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from heartlm.report.study import Study, num

BREAKDOWN = (("compute_s", "compute"), ("comm_exposed_s", "exposed communication"),
             ("data_wait_s", "data wait"), ("other_s", "other"))  # fmt: skip


def _save(fig: plt.Figure, out: Path, name: str) -> list[Path]:
    paths = [out / f"{name}.png", out / f"{name}.svg"]
    fig.tight_layout()
    for p in paths:
        fig.savefig(p, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return paths


def _empty(ax: plt.Axes) -> None:
    ax.text(0.5, 0.5, "no finished cells", ha="center", va="center", transform=ax.transAxes)


def _panels(n: int, width: float = 4.0, height: float = 3.2):
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def time_vs_cpus(study: Study, out: Path) -> list[Path]:
    configs = study.configs()
    fig, axes = _panels(len(configs))
    for ax, config in zip(axes, configs, strict=True):
        rows = study.ok(config)
        ax.set_title(study.label(config))
        if not rows:
            _empty(ax)
            continue
        for g in sorted({r["gpus"] for r in rows}, key=int):
            pts = [(int(r["cpus"]), num(r, "time_s")) for r in rows if r["gpus"] == g]
            ax.plot(*zip(*pts, strict=True), marker="o", label=f"{g} GPU")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("CPU cores per GPU")
        ax.set_ylabel("time of the workload (s)")
        ax.legend(fontsize=8)
    fig.suptitle("Training time vs CPUs, per GPU count")
    return _save(fig, out, "time_vs_cpus")


def time_speedup_vs_gpus(study: Study, out: Path) -> list[Path]:
    configs = study.configs()
    cpus = study.reference_cpus()
    fig, axes = _panels(len(configs), width=5.0)
    for ax, config in zip(axes, configs, strict=True):
        rows = study.ok(config, cpus)
        ax.set_title(f"{study.label(config)}, {cpus} CPU/GPU")
        if not rows:
            _empty(ax)
            continue
        gpus = [int(r["gpus"]) for r in rows]
        ax.bar([str(g) for g in gpus], [num(r, "time_s") for r in rows], color="#9ecae1")
        ax.set_xlabel("GPUs")
        ax.set_ylabel("time (s)")
        twin = ax.twinx()
        sp = [(str(int(r["gpus"])), num(r, "speedup")) for r in rows if r["speedup"]]
        if sp:
            twin.plot(*zip(*sp, strict=True), marker="o", color="C3", label="speedup")
        twin.plot([str(g) for g in gpus], gpus, ls="--", color="gray", label="ideal")
        twin.set_ylabel("speedup")
        twin.legend(fontsize=8, loc="upper left")
    fig.suptitle("Training time, speedup and ideal speedup vs GPUs")
    return _save(fig, out, "time_speedup_vs_gpus")


def _metric_vs_gpus(study: Study, out: Path, key: str, ylabel: str, name: str) -> list[Path]:
    cpus = study.reference_cpus()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    curves = [
        (config, [(int(r["gpus"]), num(r, key)) for r in study.ok(config, cpus) if r[key]])
        for config in study.configs()
    ]
    curves = [(config, pts) for config, pts in curves if pts]
    for config, pts in curves:
        ax.plot(*zip(*pts, strict=True), marker="o", label=study.label(config))
    if not curves:
        _empty(ax)
    elif key == "efficiency":
        ax.axhline(1.0, ls="--", color="gray", label="ideal")
    ax.set_xlabel("GPUs")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{ylabel} vs GPUs ({cpus} CPU cores per GPU)")
    if curves:
        ax.legend(fontsize=7)
    return _save(fig, out, name)


def efficiency_vs_gpus(study: Study, out: Path) -> list[Path]:
    return _metric_vs_gpus(study, out, "efficiency", "efficiency", "efficiency_vs_gpus")


def overhead_vs_gpus(study: Study, out: Path) -> list[Path]:
    return _metric_vs_gpus(study, out, "overhead_s", "overhead (s)", "overhead_vs_gpus")


def breakdown(study: Study, out: Path) -> list[Path]:
    """Per-step time split into its exclusive parts (stacked, summing to the step), with
    the communication hidden behind them as a hatched bar beside each stack (ms)."""
    cpus = study.reference_cpus()
    bars = [
        (f"{study.label(c)}\n{r['gpus']} GPU", r)
        for c in study.configs()
        for r in study.ok(c, cpus)
        if r["step_s"]
    ]
    if not bars:
        return []
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(bars)), 4.5))
    bottom = [0.0] * len(bars)
    x = list(range(len(bars)))
    for key, name in BREAKDOWN:
        values = [1e3 * (num(r, key) or 0.0) for _, r in bars]
        ax.bar(x, values, width=0.6, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    hidden = [1e3 * (num(r, "comm_overlapped_s") or 0.0) for _, r in bars]
    ax.bar([i + 0.4 for i in x], hidden, width=0.2, fill=False, hatch="///",
           label="overlapped communication (not in the step sum)")  # fmt: skip
    ax.set_xticks(range(len(bars)), [label for label, _ in bars], rotation=90, fontsize=7)
    ax.set_ylabel("ms per step")
    ax.set_title(f"Step time breakdown ({cpus} CPU cores per GPU)")
    ax.legend(fontsize=8)
    return _save(fig, out, "breakdown")


def multinode(study: Study, out: Path, curves: dict[str, dict]) -> list[Path]:
    """Measured speedups (markers: one node; crosses: the emulated second node over a
    socket) beside the model's curves per network bandwidth (dashed), clearly labelled."""
    if not curves:
        return []
    fig, ax = plt.subplots(figsize=(8.0, 5.0))
    top = 1
    styles = ["--", ":", "-.", (0, (5, 1))]
    for i, (label, c) in enumerate(curves.items()):
        ax.plot(c["measured_gpus"], c["measured_speedup"], "o", color=f"C{i}",
                label=f"{label} (measured, one node)")  # fmt: skip
        sock = c["socket"]
        if sock:
            ax.plot([r["world"] for r in sock], [r["speedup"] for r in sock], "x", ms=9,
                    color=f"C{i}", label=f"{label} (measured, 2 agents over a socket)")  # fmt: skip
        for j, (gbps, m) in enumerate(c["model"].items()):
            ax.plot(m["gpus"], m["speedup"], ls=styles[j % len(styles)], color=f"C{i}",
                    label=f"{label}, {gbps:g} Gb/s per node (MODEL)")  # fmt: skip
            top = max(top, *m["gpus"])
    ax.plot([1, top], [1, top], color="gray", lw=0.8, label="ideal")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("GPUs (nodes x GPUs per node)")
    ax.set_ylabel("speedup")
    ax.set_title("Multi-node speedup: lines are a communication MODEL, markers are measured")
    ax.legend(fontsize=6)
    return _save(fig, out, "multinode_model")


def all_figures(study: Study, out: Path, curves: dict[str, dict]) -> list[Path]:
    paths: list[Path] = []
    for draw in (time_vs_cpus, time_speedup_vs_gpus, efficiency_vs_gpus, overhead_vs_gpus,
                 breakdown):  # fmt: skip
        paths += draw(study, out)
    return paths + multinode(study, out, curves)
