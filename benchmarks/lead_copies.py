"""Every lead of a record that `heartlm ingest` leaves out, as a single-lead WFDB record.

`heartlm ingest` keeps one lead per record (MLII on MIT-BIH, `ii` on LUDB), so pretraining
on the real records outside DS2 reads one of MIT-BIH's two leads and one of LUDB's twelve.
The other leads are more real, unlabelled ECG from the same patients and hospitals: this
writes each as a record of its own, in a folder per database and lead (`mitdb_V1/101`), with
the record's beat annotations (`.atr`) where it has them, so that one `heartlm ingest` reads
them beside the originals. Digital samples are copied unchanged (format 16, the record's
own gain and baseline). Copies go to a work folder, never into the repository.

    python benchmarks/lead_copies.py ../shared/ecg/mitdb/101 ../shared/ecg/ludb --out /tmp/leads
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import wfdb

from heartlm.ecg.wfdbio import find_records
from heartlm.errors import HeartlmError
from heartlm.ingest.leads import STANDARD_LEADS, lead_key, pick_lead


def other_leads(record: Path, out: Path) -> list[Path]:
    """Write every lead of `record` but the one `heartlm ingest` keeps; the records written.

    A record without beat annotations is copied without them (ingest then detects its
    beats); signals that are not ECG leads (a name without a lead, such as `noise1`) are
    skipped."""
    signal = wfdb.rdrecord(str(record), physical=False)
    kept = pick_lead(signal.sig_name)
    annotated = record.with_suffix(".atr").is_file()
    ann = wfdb.rdann(str(record), "atr") if annotated else None
    written = []
    for index, name in enumerate(signal.sig_name):
        if index == kept or not _is_lead(name):
            continue
        folder = out / f"{record.parent.name}_{lead_key(name)}"
        folder.mkdir(parents=True, exist_ok=True)
        digital = np.asarray(signal.d_signal[:, index : index + 1], dtype=np.int64)
        wfdb.wrsamp(
            record.name,
            fs=signal.fs,
            units=[signal.units[index]],
            sig_name=[name],
            d_signal=np.clip(digital, -32767, 32767).astype(np.int16),
            fmt=["16"],
            adc_gain=[signal.adc_gain[index]],
            baseline=[signal.baseline[index]],
            write_dir=str(folder),
        )
        if ann is not None:
            wfdb.wrann(record.name, "atr", ann.sample, list(ann.symbol),
                       aux_note=list(ann.aux_note), fs=signal.fs,
                       write_dir=str(folder))  # fmt: skip
        written.append(folder / record.name)
    return written


def _is_lead(name: str) -> bool:
    """Whether a signal name is an ECG lead that `recorded_in` reads back from the folder
    name, so that a copy and its record are always one recording."""
    return lead_key(name) in STANDARD_LEADS


def write_all(sources: list[Path], out: Path) -> list[Path]:
    """`other_leads` of every record in `sources` (records or folders); the folders written."""
    folders: set[Path] = set()
    for record in find_records(sources):
        folders.update(path.parent for path in other_leads(Path(record), out))
    return sorted(folders)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sources", nargs="+", type=Path, help="WFDB records or folders of them")
    ap.add_argument("--out", type=Path, required=True, help="folder for the copies")
    args = ap.parse_args()
    try:
        folders = write_all(args.sources, args.out)
    except HeartlmError as exc:
        print(f"lead_copies: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:  # wfdb on a damaged record
        print(f"lead_copies: cannot copy ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    for folder in folders:
        print(folder, len(list(folder.glob("*.hea"))), "records")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
