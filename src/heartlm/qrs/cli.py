"""`heartlm qrs`: detect beats in WFDB records and score them EC57-style where references exist."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from heartlm.ecg.gaps import fill_gaps
from heartlm.ecg.references import DEFAULT_REFERENCE, check_references
from heartlm.ecg.signals import open_record, read_lead
from heartlm.ecg.wfdbio import (
    annotation_path,
    annotation_samples,
    database_of,
    find_records,
    read_annotations,
)
from heartlm.ecg.workers import (
    common_folder,
    read_here,
    record_pool,
    unique_records,
    worker_died,
)
from heartlm.errors import HeartlmError
from heartlm.ingest.leads import lead_key
from heartlm.log import logger, progress
from heartlm.qrs.scoring import EC57_TOLERANCE_S, Match, gross, match_beats, reference_beats
from heartlm.qrs.spans import detect_in_spans

MIN_FS = 50  # the detector's lower limit (heartlm.qrs.detector)
ANNOTATOR = "qrs"
"""Extension of the annotation files `--out` writes (as WFDB's own detectors name theirs)."""

SCOPE_NOTE = (
    "whole record scored (the first 5 minutes included, stricter than EC57); "
    "ventricular flutter/fibrillation episodes not excluded"
)


@dataclass(frozen=True)
class QrsConfig:
    """What to detect in and how to score it (one per `heartlm qrs` run)."""

    lead: str = "0"
    """Lead to detect in: a name such as MLII or ii, or a 0-based index."""
    annotations: str = DEFAULT_REFERENCE
    """Extension of the reference annotation file; records without it are only detected."""
    span: str = "record"
    """'record': score the whole record; 'annotated': only between the first and last
    reference beat (for databases such as LUDB whose edge beats are unannotated)."""
    positions: bool = False
    """Include the detected sample indices in the JSON output."""
    skip_bad: bool = False
    """Skip a record that cannot be read or scored with a warning instead of stopping."""
    annotate: bool = False
    """Keep each record's detections at its own sample numbering, for `--out`."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="WFDB record or folder")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--lead", default="0", help="lead name (MLII, ii, ...) or index")
    parser.add_argument(
        "--annotations",
        metavar="EXT",
        help="reference annotation file extension (default: atr, where a record has one); "
        "an EXT that no record has is refused",
    )
    parser.add_argument(
        "--span",
        choices=("record", "annotated"),
        default="record",
        help="score the whole record, or only between the first and last reference beat",
    )
    parser.add_argument("--positions", action="store_true", help="detected samples in JSON")
    parser.add_argument(
        "--skip-bad", action="store_true", help="skip unreadable records, with the reason"
    )
    parser.add_argument("--workers", type=int, default=0, help="processes (0: all cores)")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="also write the detections as WFDB annotation files, DIR/NAME.qrs (every beat "
        "'N', at the record's sample numbers; DB/NAME.qrs where two folders share a NAME)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")


def run(args: argparse.Namespace) -> int:
    if args.workers < 0:
        raise HeartlmError(f"--workers must be >= 0, got {args.workers}")
    named = args.annotations is not None
    annotations = args.annotations if named else QrsConfig.annotations
    config = QrsConfig(args.lead, annotations, args.span, args.positions, args.skip_bad,
                       annotate=args.out is not None)  # fmt: skip
    records = unique_records(find_records(args.paths), "qrs", "scored")
    if args.out is not None:
        from heartlm.outdir import check_separate, check_writable

        check_writable(args.out, args.overwrite)
        check_separate(args.out, args.paths)
    if named:  # without it, records lacking `.atr` show unscored in the table, as documented
        check_references(records, [annotations], named, "qrs", "they are detected, not scored")
    workers = min(args.workers or os.cpu_count() or 1, len(records))
    started = time.perf_counter()
    with closing(_map(config, records, workers)) as mapped:  # leaves the pool, even on Ctrl-C
        results = list(progress(mapped, len(records), "qrs", "rec"))
    calls = [r.pop("annotation", None) for r in results]
    summary = summarize(results, config, time.perf_counter() - started)
    if summary["n_skipped"] == len(records):
        raise HeartlmError(
            f"all {len(records)} records were skipped (see above)", common_folder(records)
        )
    if args.out is not None:
        _write_annotations(Path(args.out), args.overwrite, records, calls)
    if args.json:
        json.dump(summary, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_table(summary))
    return 0


def _map(config: QrsConfig, records: list[Path], workers: int):
    if workers <= 1:
        yield from read_here(_process_or_skip, records, config)
        return
    with record_pool(workers) as pool:
        futures = [pool.submit(_process_or_skip, r, config) for r in records]
        for i, future in enumerate(futures):
            try:
                yield future.result()
            except BrokenProcessPool:
                unfinished = [r for r, f in zip(records[i:], futures[i:], strict=True)
                              if not f.done() or f.exception() is not None]  # fmt: skip
                raise worker_died(unfinished) from None


def _process_or_skip(path: Path, config: QrsConfig) -> dict[str, Any]:
    """`process_record`, or under --skip-bad a row saying why the record was skipped."""
    try:
        return process_record(path, config)
    except HeartlmError as exc:
        if not config.skip_bad:
            raise
        logger.warning("skipping %s", exc)
        return {"record": str(path), "skipped": exc.message, "file": exc.path}


def process_record(path: Path, config: QrsConfig) -> dict[str, Any]:
    """Detect beats in one record and score them; bad input raises HeartlmError."""
    info = open_record(path)
    index = _lead_index(config.lead, info.sig_names, info.file)
    if info.sig_fs[index] < MIN_FS:
        raise HeartlmError(
            f"lead {info.sig_names[index]} is sampled at {info.sig_fs[index]:g} Hz, below the "
            f"{MIN_FS} Hz that QRS detection needs",
            info.file,
        )
    lead = read_lead(info, index)
    out: dict[str, Any] = {
        "record": str(path),
        "fs": lead.fs,
        "lead": lead.name,
        "n_samples": len(lead.signal),
    }
    problem = signal_problem(lead.signal)
    if problem:
        raise HeartlmError(f"lead {lead.name}: {problem}", path)
    filled = fill_gaps(lead.signal, lead.fs)
    t0 = time.perf_counter()
    det = detect_in_spans(filled.signal, lead.fs, filled.spans())
    out["detect_s"] = time.perf_counter() - t0
    out["gaps"] = len(filled.gaps)
    ann = read_annotations(info.path, config.annotations)
    if ann is not None:
        ann_file = annotation_path(info.path, config.annotations)
        at = annotation_samples(ann, info.frame_fs, lead.fs, len(lead.signal), ann_file)
        ref = reference_beats(np.rint(at).astype(np.int64), ann.symbol)
        out |= _score(ref, det, lead.fs, config)
    out["n_detected"] = len(det)
    if config.positions:
        out["positions"] = det.tolist()
    if config.annotate:  # at the rate annotation files count in (the lead's, for EDF)
        frame_fs = info.frame_fs or lead.fs
        out["annotation"] = (np.rint(det * frame_fs / lead.fs).astype(np.int64), frame_fs)
    return out


def _write_annotations(
    out: Path, overwrite: bool, records: list[Path], calls: list[tuple[np.ndarray, float] | None]
) -> None:
    """OUT/NAME.qrs (`heartlm.ecg.annwrite.file_paths`) for every record read with a beat (a
    WFDB annotation file holds at least one annotation: a record without is named)."""
    from heartlm.ecg.annwrite import AnnotationFile, file_paths, write_files
    from heartlm.outdir import staged_dir

    read = [(r, c) for r, c in zip(records, calls, strict=True) if c is not None]  # not skipped
    paths = file_paths([r.name for r, _ in read], [database_of(r) for r, _ in read])
    files = [AnnotationFile(str(r), p, c[0], ["N"] * len(c[0]), [""] * len(c[0]), c[1])
             for p, (r, c) in zip(paths, read, strict=True)]  # fmt: skip
    empty = [Path(f.path).name for f in files if not len(f.sample)]
    with staged_dir(out, overwrite) as stage:
        write_files(stage, files, ANNOTATOR)
    logger.info(f"{out}: the detections of {len(files) - len(empty)} records as WFDB annotation "
                f"files (.{ANNOTATOR})")  # fmt: skip
    if empty:
        logger.warning(f"{out}: no file for {len(empty)} record(s) without a detected beat: "
                       f"{', '.join(empty[:10])}{', ...' if len(empty) > 10 else ''}")  # fmt: skip


def _score(ref: np.ndarray, det: np.ndarray, fs: float, config: QrsConfig) -> dict[str, Any]:
    """EC57 counts and figures. A reference without beats has no Se; scored whole, its
    record's detections are false positives that count in the gross +P (as bxb counts
    them), and with none or only an annotated span to score it is left out."""
    if len(ref) == 0:
        if config.span == "record" and len(det):
            return {"n_reference": 0} | Match(0, len(det), 0).as_dict() | {
                "se": None,
                "note": "the reference annotations hold no beats: every detection is false",
            }  # fmt: skip
        return {
            "n_reference": 0,
            "se": None,
            "ppv": None,
            "f1": None,
            "unscored": "the reference annotations hold no beats",
        }
    if config.span == "annotated":
        tol = EC57_TOLERANCE_S * fs
        det = det[(det >= ref[0] - tol) & (det <= ref[-1] + tol)]
    return {"n_reference": len(ref)} | match_beats(ref, det, fs).as_dict()


def signal_problem(x: np.ndarray) -> str | None:
    """Why a lead cannot hold beats (all NaN, or flat), or None."""
    finite = x[np.isfinite(x)]
    if len(finite) == 0:
        return "signal is all NaN"
    if np.ptp(finite) < 1e-6:
        return "signal is flat"
    return None


def _lead_index(lead: str, names: list[str], where: Path) -> int:
    if lead.isdigit():
        if int(lead) >= len(names):
            raise HeartlmError(f"--lead {lead}: record has {len(names)} leads", where)
        return int(lead)
    keys = [lead_key(n) for n in names]
    if lead_key(lead) not in keys:
        raise HeartlmError(f"--lead {lead}: no such lead (has {', '.join(names)})", where)
    return keys.index(lead_key(lead))


def summarize(results: list[dict[str, Any]], config: QrsConfig, wall_s: float) -> dict[str, Any]:
    scored = [r for r in results if "tp" in r]
    total = gross(Match(r["tp"], r["fp"], r["fn"]) for r in scored)
    figures = total.as_dict() | ({"se": None} if total.tp + total.fn == 0 else {})
    detected = sum(r.get("n_detected", 0) for r in results)
    detect_s = sum(r.get("detect_s", 0.0) for r in results)
    return {
        "gross": figures if scored else None,
        "records": results,
        "n_records": len(results),
        "n_scored": len(scored),
        "n_skipped": sum("skipped" in r for r in results),
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
    if summary["n_skipped"]:
        lines.append(f"{summary['n_skipped']} of {summary['n_records']} records skipped")
    return "\n".join(lines) + "\n"


def _row(name: str, m: dict[str, Any], detected: int) -> str:
    se, ppv, f1 = ("-" if m[k] is None else f"{m[k]:.4f}" for k in ("se", "ppv", "f1"))
    return (
        f"{name:<12} {se:>7} {ppv:>7} {f1:>7} {m['tp']:>7} {m['fp']:>6} {m['fn']:>6} {detected:>7}"
    )


def _scope(summary: dict[str, Any]) -> str:
    if summary["scored"] == "whole record":
        return summary["note"]
    return "scored between the first and last reference beat; VF episodes not excluded"
