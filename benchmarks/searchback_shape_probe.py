"""Probe: drop the detector's search-back beats that do not look like the record's median beat.

NSTDB 118 at 18 dB keeps one false positive that xqrs does not make: in the pause after a
blocked P wave (annotation `x` at sample 299,687) the search-back takes the largest noise
peak at half threshold. This probe asks what a shape test on search-back beats would cost
elsewhere, without changing the detector: the search-back beats of a record are the beats
that `detect_qrs` reports and the same detector with search-back switched off
(`searchback_rr` infinite) does not (within a quarter refractory period); each is kept only if
its wide-band (1-30 Hz) QRS (+-60 ms) correlates with the record's median beat at least
`--min-likeness` (best within +-10 ms). The three tables of qrs_stress_bench.py (60-s pieces at
128 Hz, NSTDB 118 and 119, DS2 + noise), heartlm only, per threshold; "off" is the detector.

    .venv/bin/python benchmarks/searchback_shape_probe.py --min-likeness 0 0.3

Writes searchback_shape_probe.{json,md} in --out (benchmarks/results/cpu).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import qrs_stress_bench as stress

from heartlm.outdir import atomic_write_text
from heartlm.qrs import detect_qrs
from heartlm.qrs.detector import DEFAULT, _filtfilt, _likeness, _median_beat
from heartlm.runinfo import cpu_model, versions

NO_SEARCHBACK = dataclasses.replace(DEFAULT, searchback_rr=math.inf)
HALF_S = 0.06
JITTER_S = 0.01


def likeness(x: np.ndarray, fs: float, beats: np.ndarray, which: np.ndarray) -> np.ndarray:
    """Best correlation within +-JITTER_S of each beat in `which` with the record's median beat
    (+-HALF_S), both on the detector's wide band, by the detector's own shape test
    (`_median_beat`, `_likeness`); 1.0 where there is no median beat or no window fits."""
    wide = _filtfilt(DEFAULT.wide_band_hz, fs, x)
    jitter = max(1, round(JITTER_S * fs))
    template = _median_beat(wide, beats, round(HALF_S * fs))
    out = np.ones(len(which))
    norm = template @ template
    if not norm > 0:
        return out
    for k, b in enumerate(which):
        rho = max(_likeness(wide, template, norm, i)[0] for i in range(b - jitter, b + jitter + 1))
        if rho > -1.0:  # -1: the template does not fit there
            out[k] = rho
    return out


def shape_checked(min_likeness: float):
    def detector(x: np.ndarray, fs: float) -> np.ndarray:
        beats = detect_qrs(x, fs)
        plain = detect_qrs(x, fs, NO_SEARCHBACK)
        reach = DEFAULT.refractory_s * fs / 4
        if len(plain):
            i = np.clip(np.searchsorted(plain, beats), 1, len(plain) - 1)
            near = np.minimum(np.abs(plain[i] - beats), np.abs(plain[i - 1] - beats))
            searched = near > reach
        else:
            searched = np.ones(len(beats), bool)
        drop = np.zeros(len(beats), bool)
        drop[searched] = likeness(x, fs, beats, beats[searched]) < min_likeness
        return beats[~drop]

    return detector


def summary(res: dict) -> dict:
    return {
        "pieces": res["pieces"]["gross"],
        "nstdb": {snr: g["heartlm"] for snr, g in res["nstdb"]["gross"].items()},
        "ds2_stress": {snr: g["heartlm"] for snr, g in res["ds2_stress"]["gross"].items()},
    }


def markdown(out: dict) -> str:
    names = list(out["runs"])
    lines = [
        "# Probe: a shape test on the QRS detector's search-back beats",
        "",
        f"- date: {out['date']}; machine: {out['machine']}",
        f"- versions: {out['versions']}",
        f"- command: `{out['command']}`",
        "- off: the detector as it is; a number: search-back beats whose correlation with the "
        "record's median beat is below it are dropped (see the script's docstring)",
        "- scoring: EC57 matching within 150 ms (qrs_stress_bench.py), heartlm only",
        "",
        "| table | rows | " + " | ".join(f"{n}: Se / +P / FP / FN" for n in names) + " |",
        "| --- | --- |" + " --- |" * len(names),
    ]
    first = out["runs"][names[0]]
    tables = (("pieces", "60-s pieces"), ("nstdb", "NSTDB"), ("ds2_stress", "DS2+noise"))
    for table, label in tables:
        for key in first[table]:
            cells = []
            for n in names:
                g = out["runs"][n][table][key]
                cells.append(f"{g['se']:.4f} / {g['ppv']:.4f} / {g['fp']} / {g['fn']}")
            row = key if table == "pieces" else f"{key} dB"
            lines.append(f"| {label} | {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-likeness", type=float, nargs="+", default=[0.0, 0.3])
    ap.add_argument("--out", type=Path, default=stress.REPO / "benchmarks" / "results" / "cpu")
    args = ap.parse_args()
    out: dict = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count()},
        "versions": versions(),
        "runs": {},
    }
    for threshold in [None, *args.min_likeness]:
        stress.detect_qrs = detect_qrs if threshold is None else shape_checked(threshold)
        name = "off" if threshold is None else f"{threshold:g}"
        print(f"min likeness {name}", file=sys.stderr)
        res = {"pieces": stress.pieces(), "nstdb": stress.nstdb(False)}
        res["ds2_stress"] = stress.ds2_stress(False)
        out["runs"][name] = summary(res)
    args.out.mkdir(parents=True, exist_ok=True)
    text = markdown(out)
    atomic_write_text(args.out / "searchback_shape_probe.json", json.dumps(out, indent=1) + "\n")
    atomic_write_text(args.out / "searchback_shape_probe.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
