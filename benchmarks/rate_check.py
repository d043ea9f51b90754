"""Do heartlm's beat inputs survive another sampling rate? MIT-BIH DS2 at 128 and 250 Hz.

Databases from other hospitals come at 128–250 Hz. This writes MIT-BIH's DS2 records
resampled to each rate (lead MLII, 16-bit WFDB, annotations moved to the new rate), ingests
and tokenizes them with the codebook and feature space of a 360-Hz token folder, and scores
the LightGBM floor (`tree_floor.py`: the model's own inputs) trained on DS1 at 360 Hz on
every DS2 beat at each rate. Nothing is tuned: a drop from 360 Hz shows an input that
depends on the rate.

    python benchmarks/rate_check.py --tokens W/tok_mitdb --ecg ../shared/ecg --work R \\
        --out benchmarks/results/cpu/rate_check.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import scipy.signal as sps
import wfdb

from heartlm.ecg.labels import MITDB_DS1, MITDB_DS2
from heartlm.labelled import metrics
from heartlm.runinfo import versions
from heartlm.train.data import TokenData, load_tokens

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tree_floor import beat_inputs, fit_tree, record_beats, record_indices

RATES = (128, 250)


def resample_record(src: Path, dest: Path, fs_new: int) -> None:
    """Lead MLII of `src` at `fs_new` Hz as a 16-bit WFDB record with its beat annotations."""
    record = wfdb.rdrecord(str(src), channel_names=["MLII"])
    ann = wfdb.rdann(str(src), "atr")
    ratio = Fraction(fs_new, int(record.fs))
    x = sps.resample_poly(record.p_signal[:, 0], ratio.numerator, ratio.denominator,
                          padtype="line")  # fmt: skip
    samples = np.round(ann.sample * fs_new / record.fs).astype(np.int64)
    keep = samples < len(x)
    wfdb.wrsamp(dest.name, fs=fs_new, units=["mV"], sig_name=["MLII"],
                p_signal=x[:, None], fmt=["16"], adc_gain=[200.0], baseline=[0],
                write_dir=str(dest.parent))  # fmt: skip
    wfdb.wrann(dest.name, "atr", samples[keep], np.asarray(ann.symbol)[keep].tolist(),
               aux_note=np.asarray(ann.aux_note)[keep].tolist(), fs=fs_new,
               write_dir=str(dest.parent))  # fmt: skip


def heartlm(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "heartlm", *args], check=True)


def tokens_at(rate: int, ecg: Path, codebook: Path, work: Path) -> TokenData:
    folder = work / f"mitdb_{rate}"
    if not (work / f"tok_{rate}" / "tokens.json").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        for name in MITDB_DS2:
            resample_record(ecg / "mitdb" / name, folder / name, rate)
        heartlm("ingest", str(folder), "--out", str(work / f"store_{rate}"), "--overwrite")
        heartlm("tokenize", str(work / f"store_{rate}"), "--out", str(work / f"tok_{rate}"),
                "--codebook", str(codebook), "--overwrite")  # fmt: skip
    return load_tokens(work / f"tok_{rate}")


def labelled(data: TokenData, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    x, aami = beat_inputs(data), np.asarray(data.aami).astype(np.int64)
    idx = record_beats(data, record_indices(data, names))
    idx = idx[aami[idx] >= 0]
    return x[idx], aami[idx]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=Path, required=True, help="360-Hz MIT-BIH token folder")
    ap.add_argument("--ecg", type=Path, default=Path(__file__).resolve().parents[2] / "shared/ecg")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    base = load_tokens(args.tokens)
    x_tr, y_tr = labelled(base, list(MITDB_DS1))
    tests = {360: base, **{r: tokens_at(r, args.ecg, args.tokens, args.work) for r in RATES}}
    rows = []
    for seed in args.seeds:
        model = fit_tree(x_tr, y_tr, 5, seed, args.threads)
        for rate, data in tests.items():
            x_te, y_te = labelled(data, list(MITDB_DS2))
            predicted = model.predict(x_te).reshape(len(y_te), -1).argmax(axis=1)
            rows.append({"rate": rate, "seed": seed, **metrics.beat_report(y_te, predicted)})
            c = rows[-1]["per_class"]
            print(f"{rate} Hz seed {seed}: accuracy {rows[-1]['accuracy']:.3f} "
                  f"S F1 {c['S']['f1']:.3f} V F1 {c['V']['f1']:.3f} n {len(y_te)}")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python benchmarks/rate_check.py " + " ".join(sys.argv[1:]),
        "versions": versions(), "rows": rows}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
