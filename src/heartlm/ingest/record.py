"""One record to its beat windows and table rows (runs inside a worker process)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from heartlm.ecg.annfile import Annotations
from heartlm.ecg.gaps import Filled, fill_gaps, rescale_gaps
from heartlm.ecg.signals import Lead, RecordInfo, open_record, read_lead
from heartlm.ecg.wfdbio import (
    annotation_path,
    annotation_samples,
    database_of,
    read_annotations,
)
from heartlm.errors import HeartlmError
from heartlm.ingest import beats as beatlib
from heartlm.ingest.config import IngestConfig
from heartlm.ingest.filters import bandpass_resample, map_positions
from heartlm.ingest.leads import lead_key, pick_lead
from heartlm.ingest.windows import (
    break_at_gaps,
    clear_of_gaps,
    cut_windows,
    rr_intervals,
    snap_to_peaks,
    window_fits,
)
from heartlm.store import TABLE_DTYPE, RecordEntry


@dataclass
class RecordResult:
    entry: RecordEntry
    beats: np.ndarray  # (n, W) float32
    table: np.ndarray  # TABLE_DTYPE
    n_reference: int  # beats found (annotated or detected) before dropping
    n_dropped: int  # beats whose window falls off the record or into a gap
    unknown_symbols: Counter = field(default_factory=Counter)
    lead_fallback: bool = False
    seconds: dict[str, float] = field(default_factory=dict)


def ingest_record(path: Path, config: IngestConfig) -> RecordResult:
    """Read, filter, resample and cut one record; raises HeartlmError naming the bad file."""
    t0 = time.perf_counter()
    info = open_record(path)
    index = pick_lead(info.sig_names, config.lead, info.file)
    if config.band[1] >= info.sig_fs[index] / 2:
        raise HeartlmError(
            f"sampling rate {info.sig_fs[index]:g} Hz of lead {info.sig_names[index]} is too "
            f"low for --band up to {config.band[1]:g} Hz",
            info.file,
        )
    lead = read_lead(info, index, float32=True)
    filled = _usable(lead, info, config.pre + config.post)
    pre, post = config.pre_samples, config.post_samples
    t1 = time.perf_counter()

    y = bandpass_resample(filled.signal, lead.fs, config.fs, config.band)
    gaps = rescale_gaps(filled.gaps, lead.fs, config.fs)
    t2 = time.perf_counter()

    found, source, ann_file = _find_beats(info, lead, filled, len(y), config)
    position = snap_to_peaks(y, found.sample, config.align_samples)
    rr_prev, rr_next = rr_intervals(position, config.fs)
    break_at_gaps(position, gaps, rr_prev, rr_next)
    keep = window_fits(position, len(y), pre, post) & clear_of_gaps(position, gaps, pre, post)
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
        db=database_of(path),
        source=str(path),
        fs_source=lead.fs,
        lead=lead.name,
        n_samples=len(y),
        beat_source=source,
        has_rhythm=found.has_rhythm,
        extra={
            "dropped_beats": int((~keep).sum()),
            "annotation_file": ann_file,
            "gaps": [list(gap) for gap in gaps],
            "bridged_s": filled.n_bridged / lead.fs,
        },
    )
    return RecordResult(
        entry=entry,
        beats=windows,
        table=table,
        n_reference=len(found.sample),
        n_dropped=int((~keep).sum()),
        unknown_symbols=found.unknown_symbols,
        lead_fallback=bool(config.lead) and lead_key(lead.name) != lead_key(config.lead_names[0]),
        seconds={"read": t1 - t0, "filter": t2 - t1, "beats": t3 - t2},
    )


def _usable(lead: Lead, info: RecordInfo, window_s: float) -> Filled:
    """The lead with its missing samples filled; refused if it cannot hold a beat."""
    finite = np.isfinite(lead.signal)
    if not finite.any():
        raise HeartlmError(f"lead {lead.name} has no samples (all missing)", info.path)
    if float(np.ptp(lead.signal[finite])) < 1e-6:
        raise HeartlmError(f"lead {lead.name} is flat (constant signal)", info.path)
    seconds = len(lead.signal) / lead.fs
    if seconds < window_s:
        raise HeartlmError(
            f"record is shorter than one beat window ({seconds:.3g} s < {window_s:g} s)",
            info.file,
        )
    filled = fill_gaps(lead.signal, lead.fs)
    if max(b - a for a, b in filled.spans()) / lead.fs < window_s:
        raise HeartlmError(
            f"lead {lead.name} has no stretch without a gap as long as one beat window "
            f"({window_s:g} s)",
            info.path,
        )
    return filled


def _find_beats(
    info: RecordInfo, lead: Lead, filled: Filled, n_out: int, config: IngestConfig
) -> tuple[beatlib.Beats, str, str | None]:
    """The record's beats at the store's rate, where they came from, and the annotation
    file used (if any)."""
    ann, ann_file = None, None
    if config.beats != "detect":
        for ext in config.annotation_exts:
            ann = read_annotations(info.path, ext)
            if ann is not None:
                ann_file = str(annotation_path(info.path, ext))
                break
        if ann is None and config.beats == "annotations":
            raise HeartlmError(
                f"no {' or '.join('.' + e for e in config.annotation_exts)} annotation file"
                " (try --beats detect or --annotations EXT)",
                info.file,
            )
    if ann is not None:
        at = annotation_samples(ann, info.frame_fs, config.fs, n_out, ann_file)
        ann = Annotations(np.rint(at).astype(np.int64), ann.symbol, ann.aux_note, config.fs)
        found, source = beatlib.from_annotations(ann), "annotations"
    else:
        detected = _detect(filled, lead.fs, info)
        found = beatlib.from_detections(map_positions(detected, lead.fs, config.fs))
        source = "detect"
    if not found.has_rhythm:
        code = beatlib.rhythm_from_comments(info.comments)
        if code is not None:
            found.rhythm[:] = code
    return found, source, ann_file


def _detect(filled: Filled, fs: float, info: RecordInfo) -> np.ndarray:
    try:
        from heartlm.qrs import detect_in_spans  # imported only when a record needs detection
    except ImportError as exc:
        raise HeartlmError(f"QRS detector unavailable ({exc})", info.file) from None
    x = filled.signal.astype(np.float64)
    return np.sort(np.asarray(detect_in_spans(x, fs, filled.spans()), dtype=np.int64))
