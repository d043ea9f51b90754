"""`heartlm report DIR`: figures (PNG + SVG) and DIR/report.md from a scaling study."""

from __future__ import annotations

import argparse
from pathlib import Path

from heartlm.errors import HeartlmError
from heartlm.log import logger
from heartlm.outdir import atomic_write_text, staged_dir
from heartlm.report import commmodel
from heartlm.report.figures import all_figures
from heartlm.report.markdown import write_report
from heartlm.report.study import Study, load_study, num


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, help="a folder written by heartlm scale")
    parser.add_argument(
        "--inter-node-gbps",
        default="200,400",
        help="network bandwidths per node to predict, Gb/s (200,400: 1 or 2 x 200 Gb/s "
        "InfiniBand), taken as the bus bandwidth of the all-reduce over the nodes",
    )
    parser.add_argument(
        "--inter-node-latency-us",
        type=float,
        default=10.0,
        help="per-hop inter-node latency, microseconds (10)",
    )
    parser.add_argument(
        "--intra-node-gbps",
        type=float,
        default=2840.0,
        help="all-reduce bus bandwidth among a node's GPUs, Gb/s, where DIR/comm has no "
        "NVLink measurement (2840: 355 GB/s, 4 x H100 NVLink, 1 GiB)",
    )
    parser.add_argument(
        "--gpus-per-node", type=int, default=4, help="GPUs per node in the prediction (4)"
    )
    parser.add_argument("--nodes", default="2,4,16,64", help="node counts to predict")
    parser.add_argument(
        "--overlap",
        type=float,
        default=commmodel.BACKWARD_SHARE,
        help="share of the compute that hides the all-reduce (2/3: backward)",
    )


def _numbers(text: str, flag: str, kind: type = int) -> list:
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise HeartlmError(f"{flag}: comma-separated numbers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise HeartlmError(f"{flag}: give positive numbers, got {text!r}")
    return values


def model_curves(study: Study, args: argparse.Namespace) -> dict[str, dict]:
    """Fit the model per DDP configuration (reference CPU count) and predict M nodes."""
    nodes = _numbers(args.nodes, "--nodes")
    networks = _numbers(args.inter_node_gbps, "--inter-node-gbps", float)
    if args.intra_node_gbps <= 0 or args.gpus_per_node < 1 or not 0 <= args.overlap <= 1:
        raise HeartlmError(
            "--intra-node-gbps and --gpus-per-node must be positive, --overlap in [0, 1]"
        )
    intra = study.busbw.get("nvlink") or {2: commmodel.gbps_to_bytes(args.intra_node_gbps)}
    cpus = study.reference_cpus()
    curves: dict[str, dict] = {}
    for config in study.configs():
        rows = [r for r in study.ok(config, cpus) if r["grad_bytes"]]
        base = next((r for r in rows if r["gpus"] == "1"), None)
        if base is None or config[3] != "ddp":
            continue
        g_node = args.gpus_per_node
        fit = commmodel.fit(
            [int(r["gpus"]) for r in rows],
            [num(r, "time_s") / num(r, "steps") for r in rows],
            num(base, "grad_bytes"),
            config[2],
            intra,
            args.overlap / study.micro_batches(int(config[1])),
        )
        t1, steps1 = num(base, "time_s"), int(base["steps"])
        model = {}
        for gbps in networks:
            net = commmodel.gbps_to_bytes(gbps)
            lat = args.inter_node_latency_us * 1e-6
            times = [
                commmodel.steps_at(fit, steps1, m * g_node)
                * commmodel.predict_step_s(fit, m, g_node, net, lat)
                for m in nodes
            ]
            model[gbps] = {"nodes": nodes, "gpus": [m * g_node for m in nodes],
                           "time": times, "speedup": [t1 / t for t in times]}  # fmt: skip
        curves[study.label(config)] = {
            "config": config,
            "fit": fit,
            "t1": t1,
            "measured_gpus": [int(r["gpus"]) for r in rows if r["speedup"]],
            "measured_speedup": [num(r, "speedup") for r in rows if r["speedup"]],
            "model": model,
            "socket": socket_checks(study, config, fit, t1),
        }
    return curves


def socket_checks(
    study: Study, config: tuple[str, ...], fit: commmodel.CommFit, t1: float
) -> list[dict]:
    """The emulated second node's runs of this configuration, each beside the model's
    step time for every rank all-reducing over the measured socket bandwidth."""
    task, window, scaling, _, _ = config
    out = []
    for run in study.socket_runs:
        same = (run.get("task"), str(run.get("window")), run.get("scaling")) == (
            task, window, scaling,
        )  # fmt: skip
        busbw = study.busbw.get("socket", {}).get(run.get("world"))
        if not same or busbw is None or not run.get("step_s"):
            continue
        predicted = commmodel.predict_flat_step_s(fit, run["world"], busbw)
        out.append({**run, "busbw": busbw, "predicted_step_s": predicted,
                    "error": predicted / run["step_s"] - 1,
                    "speedup": t1 / run["time_s"]})  # fmt: skip
    return out


def _micro_batch_note(study: Study) -> str:
    """Where ranks accumulate micro-batches, only the last one's backward hides the
    all-reduce: say so, per window."""
    counts = {w: study.micro_batches(int(w)) for w in sorted({c[1] for c in study.configs()})}
    several = {w: k for w, k in counts.items() if k > 1}
    if not several:
        return ""
    each = ", ".join(f"{k} at window {w}" for w, k in several.items())
    return f" of the last micro-batch ({each} per step)"


def run(args: argparse.Namespace) -> int:
    folder = args.dir.resolve()
    study = load_study(folder)
    curves = model_curves(study, args)
    assumptions = {
        "network": f"{args.inter_node_gbps} Gb/s per node as all-reduce bus bandwidth, "
        f"{args.inter_node_latency_us:g} us per hop, hierarchical all-reduce",
        "intra-node": "bus bandwidth measured by heartlm.scale.allreduce (DIR/comm)"
        if study.busbw.get("nvlink")
        else f"{args.intra_node_gbps:g} Gb/s bus bandwidth assumed (no DIR/comm/nvlink_n*.json)",
        "overlap": f"the all-reduce hides behind {args.overlap:.3g} of the compute (backward)"
        + _micro_batch_note(study)
        + "; the rest of the parallel cost is fitted per GPU count on the measured node",
        "gradient bytes": "size of the fp32 weights (results.csv grad_bytes)",
        "CPU cores per GPU": str(study.reference_cpus()),
    }
    with staged_dir(folder / "figures", overwrite=True) as stage:
        figures = all_figures(study, stage, curves)
    figures = [folder / "figures" / p.name for p in figures]
    atomic_write_text(folder / "report.md", write_report(study, figures, curves, assumptions))
    logger.info("report: %d figures in %s", len(figures), folder / "figures")
    print(folder / "report.md")
    return 0
