"""`heartlm qrs`: detect beats in WFDB records and score them EC57-style where references exist."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from heartlm.ecg.wfdbio import find_records, read_annotations, read_header, read_record
from heartlm.errors import HeartlmError
from heartlm.log import logger, progress
from heartlm.qrs.detector import detect_qrs
from heartlm.qrs.scoring import EC57_TOLERANCE_S, Match, gross, match_beats, reference_beats

SCOPE_NOTE = (
    "whole record scored (the first 5 minutes included, stricter than EC57); "
    "ventricular flutter/fibrillation episodes not excluded"
)


@dataclass(frozen=True)
class QrsConfig:
    """What to detect in and how to score it (one per `heartlm qrs` run)."""

    lead: str = "0"
    """Lead to detect in: a name such as MLII or ii, or a 0-based index."""
    annotations: str = "atr"
    """Extension of the reference annotation file; records without it are only detected."""
    span: str = "record"
    """'record': score the whole record; 'annotated': only between the first and last
    reference beat (for databases such as LUDB whose edge beats are unannotated)."""
    positions: bool = False
    """Include the detected sample indices in the JSON output."""
    skip_bad: bool = False
    """Skip flat or all-NaN records with a warning instead of stopping."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="WFDB record or folder")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--lead", default="0", help="lead name (MLII, ii, ...) or index")
    parser.add_argument("--annotations", default="atr", metavar="EXT", help="reference file")
    parser.add_argument(
        "--span",
        choices=("record", "annotated"),
        default="record",
        help="score the whole record, or only between the first and last reference beat",
    )
    parser.add_argument("--positions", action="store_true", help="detected samples in JSON")
    parser.add_argument("--skip-bad", action="store_true", help="skip flat/NaN records")
    parser.add_argument("--workers", type=int, default=0, help="processes (0: all cores)")


def run(args: argparse.Namespace) -> int:
    if args.workers < 0:
        raise HeartlmError(f"--workers must be >= 0, got {args.workers}")
    config = QrsConfig(args.lead, args.annotations, args.span, args.positions, args.skip_bad)
    records = find_records(args.paths)
    workers = min(args.workers or os.cpu_count() or 1, len(records))
    started = time.perf_counter()
    results = list(progress(_map(config, records, workers), len(records), "qrs", "rec"))
    summary = summarize(results, config, time.perf_counter() - started)
    if args.json:
        json.dump(summary, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_table(summary))
    return 0


def _map(config: QrsConfig, records: list[Path], workers: int):
    if workers <= 1:
        yield from (process_record(r, config) for r in records)
        return
    with ProcessPoolExecutor(workers) as pool:
        yield from pool.map(process_record, records, [config] * len(records))


def process_record(path: Path, config: QrsConfig) -> dict[str, Any]:
    """Detect beats in one record and score them; a flat or NaN lead is an error or a skip."""
    header = read_header(path)
    lead = _lead_index(config.lead, list(header.sig_name or []), path)
    record = read_record(path, channels=[lead])
    x = record.signal[:, 0]
    out: dict[str, Any] = {
        "record": str(path),
        "fs": record.fs,
        "lead": record.sig_names[0],
        "n_samples": len(x),
    }
    problem = signal_problem(x)
    if problem:
        if not config.skip_bad:
            raise HeartlmError(f"lead {record.sig_names[0]}: {problem}", f"{path}.dat")
        logger.warning("skipping %s: %s", path, problem)
        return out | {"skipped": problem}
    t0 = time.perf_counter()
    det = detect_qrs(x, record.fs)
    out["detect_s"] = time.perf_counter() - t0
    ann = read_annotations(path, config.annotations)
    if ann is not None:
        ref = reference_beats(ann.sample, ann.symbol)
        scored_det = det
        if config.span == "annotated" and len(ref):
            tol = EC57_TOLERANCE_S * record.fs
            scored_det = det[(det >= ref[0] - tol) & (det <= ref[-1] + tol)]
        out |= {"n_reference": len(ref)} | match_beats(ref, scored_det, record.fs).as_dict()
    out["n_detected"] = len(det)
    if config.positions:
        out["positions"] = det.tolist()
    return out


def signal_problem(x: np.ndarray) -> str | None:
    """Why a lead cannot hold beats (all NaN, or flat), or None."""
    finite = x[np.isfinite(x)]
    if len(finite) == 0:
        return "signal is all NaN"
    if np.ptp(finite) < 1e-6:
        return "signal is flat"
    return None


def _lead_index(lead: str, names: list[str], path: Path) -> int:
    if lead.isdigit():
        if int(lead) >= len(names):
            raise HeartlmError(f"--lead {lead}: record has {len(names)} leads", f"{path}.hea")
        return int(lead)
    lowered = [n.lower() for n in names]
    if lead.lower() not in lowered:
        raise HeartlmError(f"--lead {lead}: no such lead (has {', '.join(names)})", f"{path}.hea")
    return lowered.index(lead.lower())


def summarize(results: list[dict[str, Any]], config: QrsConfig, wall_s: float) -> dict[str, Any]:
    scored = [r for r in results if "tp" in r]
    total = gross(Match(r["tp"], r["fp"], r["fn"]) for r in scored)
    detected = sum(r.get("n_detected", 0) for r in results)
    detect_s = sum(r.get("detect_s", 0.0) for r in results)
    return {
        "gross": total.as_dict() if scored else None,
        "records": results,
        "n_records": len(results),
        "n_scored": len(scored),
        "n_detected": detected,
        "skipped": [
            {"record": r["record"], "reason": r["skipped"]} for r in results if "skipped" in r
        ],
        "tolerance_s": EC57_TOLERANCE_S,
        "scored": "whole record" if config.span == "record" else "annotated span",
        "first_5_min_scored": config.span == "record",
        "vf_excluded": False,
        "note": SCOPE_NOTE,
        "config": config.__dict__,
        "detect_beats_per_s": detected / detect_s if detect_s else None,
        "wall_s": wall_s,
    }


def format_table(summary: dict[str, Any]) -> str:
    """Per-record and gross Se, +P, F1, TP, FP, FN as fixed-width text."""
    head = f"{'record':<12} {'Se':>7} {'+P':>7} {'F1':>7} {'TP':>7} {'FP':>6} {'FN':>6} {'det':>7}"
    lines = [head]
    for r in summary["records"]:
        name = Path(r["record"]).name
        if "skipped" in r:
            lines.append(f"{name:<12} skipped: {r['skipped']}")
        elif "tp" in r:
            lines.append(_row(name, r, r["n_detected"]))
        else:
            lines.append(f"{name:<12} {'-':>7} {'-':>7} {'-':>7} {'-':>7} {'-':>6} {'-':>6} "
                         f"{r['n_detected']:>7}")  # fmt: skip
    if summary["gross"] is not None:
        lines.append(_row("gross", summary["gross"], summary["n_detected"]))
        lines.append(f"tolerance {summary['tolerance_s'] * 1000:.0f} ms; {_scope(summary)}")
    return "\n".join(lines) + "\n"


def _row(name: str, m: dict[str, Any], detected: int) -> str:
    return (
        f"{name:<12} {m['se']:>7.4f} {m['ppv']:>7.4f} {m['f1']:>7.4f} "
        f"{m['tp']:>7} {m['fp']:>6} {m['fn']:>6} {detected:>7}"
    )


def _scope(summary: dict[str, Any]) -> str:
    if summary["scored"] == "whole record":
        return summary["note"]
    return "scored between the first and last reference beat; VF episodes not excluded"
