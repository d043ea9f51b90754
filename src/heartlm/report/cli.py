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
        type=float,
        default=400.0,
        help="network bandwidth per node, Gb/s (2 x 200 Gb/s InfiniBand: 400)",
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
        default=3600.0,
        help="intra-node bandwidth assumed when no multi-GPU cell was measured "
        "(NVLink 4: 3600 Gb/s)",
    )
    parser.add_argument(
        "--gpus-per-node", type=int, help="GPUs per node in the prediction (default: most measured)"
    )
    parser.add_argument("--nodes", default="1,2,4,8,16", help="node counts to predict")


def model_curves(study: Study, args: argparse.Namespace) -> dict[str, dict]:
    """Fit the comm model per configuration (reference CPU count) and predict M nodes."""
    try:
        nodes = [int(v) for v in args.nodes.split(",") if v.strip()]
    except ValueError:
        raise HeartlmError(f"--nodes: comma-separated integers, got {args.nodes!r}") from None
    if not nodes or min(nodes) < 1 or args.inter_node_gbps <= 0 or args.intra_node_gbps <= 0:
        raise HeartlmError("--nodes, --inter-node-gbps, --intra-node-gbps must be positive")
    cpus = study.reference_cpus()
    curves: dict[str, dict] = {}
    for config in study.configs():
        rows = [r for r in study.ok(config, cpus) if r["grad_bytes"]]
        base = next((r for r in rows if r["gpus"] == "1"), None)
        if base is None:
            continue
        g_node = args.gpus_per_node or max(int(r["gpus"]) for r in rows)
        fit = commmodel.fit_intra(
            [int(r["gpus"]) for r in rows],
            [num(r, "time_s") / num(r, "steps") for r in rows],
            num(base, "grad_bytes"),
            config[2],
            commmodel.gbps_to_bytes(args.intra_node_gbps),
        )
        t1 = num(base, "time_s")
        node_bw = commmodel.gbps_to_bytes(args.inter_node_gbps)
        lat = args.inter_node_latency_us * 1e-6
        times = [
            commmodel.predict_time_s(fit, int(base["steps"]), m, g_node, node_bw, lat)
            for m in nodes
        ]
        curves[study.label(config)] = {
            "fit": fit,
            "measured_gpus": [int(r["gpus"]) for r in rows if r["speedup"]],
            "measured_speedup": [num(r, "speedup") for r in rows if r["speedup"]],
            "model_nodes": nodes,
            "model_gpus": [m * g_node for m in nodes],
            "model_time": times,
            "model_speedup": [t1 / t for t in times],
        }
    return curves


def run(args: argparse.Namespace) -> int:
    folder = args.dir.resolve()
    study = load_study(folder)
    curves = model_curves(study, args)
    assumptions = {
        "inter-node network": f"{args.inter_node_gbps:g} Gb/s per node "
        f"(default 2 x 200 Gb/s InfiniBand), {args.inter_node_latency_us:g} us per hop, "
        "hierarchical all-reduce, nothing hidden behind compute",
        "intra-node": "effective bandwidth and latency fitted to the measured 1-node steps "
        f"(where fewer than one multi-GPU point exists: {args.intra_node_gbps:g} Gb/s assumed)",
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
