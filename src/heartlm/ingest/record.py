"""One WFDB record to its beat windows and table rows (runs inside a worker process)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from heartlm.ecg.wfdbio import read_annotations, read_header, read_record
from heartlm.errors import HeartlmError
from heartlm.ingest import beats as beatlib
from heartlm.ingest.annfile import read_mit_annotations
from heartlm.ingest.config import IngestConfig
from heartlm.ingest.filters import bandpass_resample, map_positions
from heartlm.ingest.leads import pick_lead
from heartlm.ingest.windows import cut_windows, rr_intervals, snap_to_peaks, window_fits
from heartlm.store import TABLE_DTYPE, RecordEntry


@dataclass
class RecordResult:
    entry: RecordEntry
    beats: np.ndarray  # (n, W) float32
    table: np.ndarray  # TABLE_DTYPE
    n_reference: int  # beats found (annotated or detected) before dropping
    n_dropped: int  # beats whose window falls off the record
    unknown_symbols: Counter = field(default_factory=Counter)
    lead_fallback: bool = False
    seconds: dict[str, float] = field(default_factory=dict)


def ingest_record(path: Path, config: IngestConfig) -> RecordResult:
    """Read, filter, resample and cut one record; raises HeartlmError naming the bad file."""
    t0 = time.perf_counter()
    header = read_header(path)
    if not header.sig_name:
        raise HeartlmError("header lists no signals", f"{path}.hea")
    if config.band[1] >= header.fs / 2:
        raise HeartlmError(
            f"sampling rate {header.fs:g} Hz is too low for --band up to {config.band[1]:g} Hz",
            f"{path}.hea",
        )
    lead = pick_lead(header.sig_name, config.lead)
    rec = read_record(path, channels=[lead], float32=True, header=header)
    x = rec.signal[:, 0]
    lead_name = rec.sig_names[0]
    _check_signal(x, lead_name, path, header)
    pre, post = config.pre_samples, config.post_samples
    if len(x) * config.fs / rec.fs < pre + post:
        raise HeartlmError(
            f"record is shorter than one beat window ({len(x) / rec.fs:.3g} s < "
            f"{config.pre + config.post:g} s)",
            f"{path}.hea",
        )
    t1 = time.perf_counter()

    y = bandpass_resample(x, rec.fs, config.fs, config.band)
    t2 = time.perf_counter()

    found, source, ann_file = _find_beats(path, x, rec.fs, rec.comments, config)
    position = map_positions(found.sample, rec.fs, config.fs)
    position = snap_to_peaks(y, position, config.align_samples)
    rr_prev, rr_next = rr_intervals(position, config.fs)
    keep = window_fits(position, len(y), pre, post)
    table = np.zeros(int(keep.sum()), TABLE_DTYPE)
    table["sample"] = position[keep]
    table["rr_prev"] = rr_prev[keep]
    table["rr_next"] = rr_next[keep]
    table["aami"] = found.aami[keep]
    table["rhythm"] = found.rhythm[keep]
    table["symbol"] = found.symbol[keep]
    windows = cut_windows(y, position[keep], pre, post)
    t3 = time.perf_counter()

    entry = RecordEntry(
        name=path.name,
        db=path.parent.name,
        source=str(path),
        fs_source=rec.fs,
        lead=lead_name,
        n_samples=len(y),
        beat_source=source,
        has_rhythm=found.has_rhythm,
        extra={"dropped_beats": int((~keep).sum()), "annotation_file": ann_file},
    )
    wanted = config.lead.upper() if config.lead else None
    return RecordResult(
        entry=entry,
        beats=windows,
        table=table,
        n_reference=len(found.sample),
        n_dropped=int((~keep).sum()),
        unknown_symbols=found.unknown_symbols,
        lead_fallback=wanted is not None and lead_name.strip().upper() != wanted,
        seconds={"read": t1 - t0, "filter": t2 - t1, "beats": t3 - t2},
    )


def _check_signal(x: np.ndarray, lead: str, path: Path, header) -> None:
    dat = path.parent / header.file_name[0] if header.file_name else Path(f"{path}.dat")
    n_nan = int(np.isnan(x).sum())
    if n_nan:
        raise HeartlmError(f"lead {lead} has {n_nan} of {len(x)} samples missing (NaN)", dat)
    if float(x.max()) - float(x.min()) < 1e-6:
        raise HeartlmError(f"lead {lead} is flat (constant signal)", dat)


def _find_beats(
    path: Path, x: np.ndarray, fs: float, comments: list[str], config: IngestConfig
) -> tuple[beatlib.Beats, str, str | None]:
    """The record's beats, where they came from, and the annotation file used (if any)."""
    ann, ann_file = None, None
    if config.beats != "detect":
        for ext in config.annotation_exts:
            ann = read_mit_annotations(path, ext) or read_annotations(path, ext)
            if ann is not None:
                ann_file = f"{path}.{ext}"
                break
        if ann is None and config.beats == "annotations":
            raise HeartlmError(
                f"no {' or '.join('.' + e for e in config.annotation_exts)} annotation file"
                " (try --beats detect or --annotations EXT)",
                f"{path}.hea",
            )
    if ann is not None:
        found, source = beatlib.from_annotations(ann), "annotations"
    else:
        found, source = beatlib.from_detections(_detect(x, fs, path)), "detect"
    if not found.has_rhythm:
        code = beatlib.rhythm_from_comments(comments)
        if code is not None:
            found.rhythm[:] = code
    return found, source, ann_file


def _detect(x: np.ndarray, fs: float, path: Path) -> np.ndarray:
    try:
        from heartlm.qrs import detect_qrs  # imported only when a record needs detection
    except ImportError as exc:
        raise HeartlmError(f"QRS detector unavailable ({exc})", f"{path}.hea") from None
    return np.sort(np.asarray(detect_qrs(x.astype(np.float64), fs), dtype=np.int64))
