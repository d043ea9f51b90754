"""Benchmark `heartlm.qrs.detect_qrs` against `wfdb.processing.xqrs_detect`: accuracy and speed.

Writes benchmarks/results/qrs.json and benchmarks/results/qrs.md. Example:

    .venv/bin/python benchmarks/qrs_bench.py --xqrs-records 100,105,108,119,203,207

Our detector runs on every record of every database in ../shared/ecg (lead 0 of mitdb and
nstdb, lead ii of ludb scored between its first and last annotated QRS), on mitdb resampled
to 128, 250 and 1000 Hz, and on a synthetic corpus. xqrs is about 100x slower, so it runs on
the records named by --xqrs-records (optionally only their first --xqrs-minutes), and ours is
reported on exactly the same samples next to it. Speeds are beats per CPU-second of one
process (time.process_time around the detector call only, not reading), so that a busy
machine does not inflate them; reading and resampling are not timed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import wfdb.processing
from scipy import signal as sps

from heartlm.ecg.labels import MITDB_DS1, MITDB_DS2
from heartlm.ecg.wfdbio import find_records, read_annotations, read_record
from heartlm.qrs import Match, detect_qrs, gross, match_beats, reference_beats
from heartlm.runinfo import versions

REPO = Path(__file__).resolve().parents[1]
ECG = Path(os.environ.get("HEARTLM_ECG_DIR", REPO.parent / "shared" / "ecg"))


def load(path: Path, lead: int = 0, ext: str = "atr") -> tuple[np.ndarray, float, np.ndarray]:
    rec = read_record(path, channels=[lead])
    ann = read_annotations(path, ext)
    return rec.signal[:, 0], rec.fs, reference_beats(ann.sample, ann.symbol)


def timed_detect(x: np.ndarray, fs: float) -> tuple[np.ndarray, float]:
    t0 = time.process_time()
    det = detect_qrs(x, fs)
    return det, time.process_time() - t0


def summary(rows: list[dict], seconds: float, beats: int) -> dict:
    g = gross(Match(r["tp"], r["fp"], r["fn"]) for r in rows)
    return g.as_dict() | {"records": len(rows), "beats_per_s": beats / seconds, "seconds": seconds}


def score_set(items, span_annotated: bool = False) -> dict:
    """items: iterable of (name, x, fs, ref). Returns gross + per-record rows."""
    rows, seconds, beats = [], 0.0, 0
    for name, x, fs, ref in items:
        det, s = timed_detect(x, fs)
        seconds += s
        beats += len(det)
        scored = det
        if span_annotated and len(ref):
            tol = 0.15 * fs
            scored = det[(det >= ref[0] - tol) & (det <= ref[-1] + tol)]
        rows.append({"record": name} | match_beats(ref, scored, fs).as_dict() | {"s": s})
    return {"gross": summary(rows, seconds, beats), "per_record": rows}


def mitdb_items(fs_new: float | None = None):
    for path in find_records([ECG / "mitdb"]):
        x, fs, ref = load(path)
        if fs_new is not None:
            # Zero padding (resample_poly's default) would pull the first and last samples
            # towards 0 mV: a step that a device sampling at fs_new never records.
            x = sps.resample_poly(x, int(fs_new), int(fs), padtype="line")
            ref = np.round(ref * fs_new / fs).astype(np.int64)
            fs = fs_new
        yield path.name, x, fs, ref


def synth_items(n: int, minutes: float, fs: float):
    from heartlm.synth import synth_record

    for i in range(n):
        rec = synth_record(minutes, fs, (12345, i), afib=i % 3 == 1, paced=i == n - 1)
        sample, symbol = rec.beats()
        yield f"synth{i:02d}", rec.signal[:, 0], fs, reference_beats(sample, list(symbol))


def xqrs_compare(paths: list[Path], minutes: float | None) -> dict:
    rows_ours, rows_x, t_ours, t_x, n_ours, n_x = [], [], 0.0, 0.0, 0, 0
    for path in paths:
        name = path.name
        x, fs, ref = load(path)
        if minutes:
            n = int(minutes * 60 * fs)
            x, ref = x[:n], ref[ref < n]
        det, s = timed_detect(x, fs)
        t_ours += s
        n_ours += len(det)
        rows_ours.append({"record": name} | match_beats(ref, det, fs).as_dict() | {"s": s})
        t0 = time.process_time()
        xd = wfdb.processing.xqrs_detect(x, fs, verbose=False)
        xd = wfdb.processing.correct_peaks(x, xd, int(0.1 * fs), int(0.15 * fs), "compare")
        s = time.process_time() - t0
        t_x += s
        n_x += len(xd)
        rows_x.append({"record": name} | match_beats(ref, np.asarray(xd), fs).as_dict() | {"s": s})
    return {
        "records": [p.name for p in paths],
        "minutes_per_record": minutes or "whole",
        "heartlm": {"gross": summary(rows_ours, t_ours, n_ours), "per_record": rows_ours},
        "xqrs": {"gross": summary(rows_x, t_x, n_x), "per_record": rows_x},
        "speedup": (n_ours / t_ours) / (n_x / t_x),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--xqrs-records", default="100,105,108,119,203,207", help="or 'all'")
    ap.add_argument("--xqrs-nstdb", action="store_true", help="also run xqrs on nstdb")
    ap.add_argument("--xqrs-minutes", type=float, default=0.0, help="0: whole records")
    ap.add_argument("--synth-records", type=int, default=8)
    ap.add_argument("--synth-minutes", type=float, default=5.0)
    args = ap.parse_args()
    detect_qrs(np.sin(np.linspace(0, 60, 3600)), 360.0)  # compile / load the numba cache first

    res: dict = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "host": platform.node(), "python": platform.python_version()},
        "versions": versions() | {"wfdb": wfdb.__version__ if hasattr(wfdb, "__version__") else ""},
        "tolerance_s": 0.15,
        "scored": "whole record (first 5 minutes included); VF episodes not excluded",
    }  # fmt: skip
    mitdb = score_set(mitdb_items())
    res["mitdb"] = mitdb
    for split, names in (("mitdb_ds1", MITDB_DS1), ("mitdb_ds2", MITDB_DS2)):
        rows = [r for r in mitdb["per_record"] if r["record"] in names]
        res[split] = {"gross": summary(rows, sum(r["s"] for r in rows), 1) | {"beats_per_s": None}}
    for fs_new in (128, 250, 1000):
        res[f"mitdb_{fs_new}hz"] = score_set(mitdb_items(fs_new))
    res["nstdb"] = score_set(
        (p.name, *load(p)) for p in find_records([ECG / "nstdb"]) if (Path(f"{p}.atr")).is_file()
    )
    res["ludb_ii"] = score_set(
        ((p.name, *load(p, 1, "ii")) for p in find_records([ECG / "ludb"])), span_annotated=True
    )
    if args.synth_records:
        for fs in (128.0, 360.0, 1000.0):
            res[f"synth_{fs:g}hz"] = score_set(
                synth_items(args.synth_records, args.synth_minutes, fs)
            )
    if args.xqrs_records:
        names = find_records([ECG / "mitdb"]) if args.xqrs_records == "all" else [
            ECG / "mitdb" / n for n in args.xqrs_records.split(",")
        ]  # fmt: skip
        res["xqrs_compare"] = xqrs_compare(names, args.xqrs_minutes)
    if args.xqrs_nstdb:
        res["xqrs_compare_nstdb"] = xqrs_compare(find_records([ECG / "nstdb"]), None)

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "qrs.json").write_text(json.dumps(res, indent=1) + "\n")
    (args.out / "qrs.md").write_text(markdown(res))
    print(markdown(res))
    return 0


def markdown(res: dict) -> str:
    lines = [
        "# QRS detector benchmark",
        "",
        f"- date: {res['date']}; machine: {res['machine']}",
        f"- versions: {res['versions']}",
        f"- command: `{res['command']}`",
        f"- scoring: EC57 matching within {res['tolerance_s'] * 1000:.0f} ms; {res['scored']}",
        "",
        "| data | detector | records | Se | +P | F1 | TP | FP | FN | beats per CPU-s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, val in res.items():
        if isinstance(val, dict) and "gross" in val:
            lines.append(_md_row(key, "heartlm", val["gross"]))
    notes = []
    for key in ("xqrs_compare", "xqrs_compare_nstdb"):
        if key not in res:
            continue
        c = res[key]
        db = "mitdb" if key == "xqrs_compare" else "nstdb"
        names = ",".join(c["records"]) if len(c["records"]) < 10 else f"all {len(c['records'])}"
        span = c["minutes_per_record"]
        label = f"{db} {names} ({'whole records' if span == 'whole' else f'first {span} min'})"
        lines.append(_md_row(label, "heartlm", c["heartlm"]["gross"]))
        lines.append(_md_row(label, "xqrs + correct_peaks", c["xqrs"]["gross"]))
        notes.append(f"Speed-up over xqrs on {label}: {c['speedup']:.0f}x")
    lines += ["", *notes]
    return "\n".join(lines) + "\n"


def _md_row(label: str, det: str, g: dict) -> str:
    bps = f"{g['beats_per_s']:,.0f}" if g.get("beats_per_s") else "-"
    return (
        f"| {label} | {det} | {g['records']} | {g['se']:.4f} | {g['ppv']:.4f} | {g['f1']:.4f} "
        f"| {g['tp']} | {g['fp']} | {g['fn']} | {bps} |"
    )


if __name__ == "__main__":
    raise SystemExit(main())
