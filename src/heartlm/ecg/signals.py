"""One lead of a record at its own sampling rate: the reader that qrs and ingest share.

WFDB records may be single-segment or multi-segment (fixed or variable layout, `~`
gaps), and may hold several samples of a signal per frame (`212x4`): a lead is read
with all of its samples (wfdb's `smooth_frames=False`), so an ECG at 250 Hz in a
62.5 Hz frame is read at 250 Hz. EDF files go through `heartlm.ecg.edf`. Samples that
are missing (gaps, skew, WFDB's invalid-sample value) are NaN.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import wfdb

from heartlm.ecg.wfdbio import brief, is_edf, read_header
from heartlm.errors import HeartlmError

# Bytes per sample of the fixed-width WFDB formats (compressed 5xx formats vary).
_BYTES_PER_SAMPLE = {"8": 1, "16": 2, "61": 2, "80": 1, "160": 2, "212": 1.5, "24": 3, "32": 4}


@dataclass
class RecordInfo:
    """What a record holds, before any signal is read."""

    path: Path  # WFDB record base path (no extension), or the .edf file
    sig_names: list[str]  # one per signal; an unnamed signal is `signal <i>`
    sig_fs: list[float]  # each signal's own sampling rate, Hz
    units: list[str]  # physical units of each signal as the file states them
    frame_fs: float | None  # the rate annotation sample numbers count in (None for EDF)
    comments: list[str]
    source: Any  # the wfdb header, or the edfio.Edf

    @property
    def file(self) -> Path:
        """The file that names the record in messages: its `.hea`, or the `.edf`."""
        return self.path if is_edf(self.path) else Path(f"{self.path}.hea")


@dataclass
class Lead:
    name: str
    fs: float  # this lead's own sampling rate
    signal: np.ndarray  # 1-D, in mV (other units as the file states), NaN where missing


def open_record(path: Path) -> RecordInfo:
    """The header of a WFDB record or EDF file; raises HeartlmError naming the bad file."""
    path = Path(path)
    if is_edf(path):
        from heartlm.ecg.edf import open_edf

        return open_edf(path)
    _check_name(path)
    header = read_header(path)
    frame_fs = float(header.fs)
    signals = _layout(path, header) if isinstance(header, wfdb.MultiRecord) else header
    if not signals.sig_name:
        raise HeartlmError("header lists no signals", f"{path}.hea")
    spf = signals.samps_per_frame or [1] * len(signals.sig_name)
    return RecordInfo(
        path=path,
        sig_names=[n.strip() if n else f"signal {i}" for i, n in enumerate(signals.sig_name)],
        sig_fs=[frame_fs * (s or 1) for s in spf],
        units=[u or "" for u in signals.units or [""] * len(signals.sig_name)],
        frame_fs=frame_fs,
        comments=list(header.comments or []),
        source=header,
    )


def read_lead(info: RecordInfo, index: int, float32: bool = False) -> Lead:
    """Lead `index` of a record, every sample at the lead's own rate, voltages in mV."""
    if is_edf(info.path):
        from heartlm.ecg.edf import read_edf_lead

        return read_edf_lead(info, index, float32)
    header = info.source
    res = 32 if float32 else 64
    if isinstance(header, wfdb.MultiRecord):
        x = _read_segments(info, index, res)
    else:
        if not header.sig_len:  # wfdb would say "sampto must be greater than sampfrom"
            raise HeartlmError("record holds no samples (its header says 0)", info.file)
        if (header.fmt or [None] * (index + 1))[index] == "0":
            raise HeartlmError(f"lead {info.sig_names[index]} is a null signal (format 0): "
                               "it holds no samples", info.file)  # fmt: skip
        _check_files(header, info.path.parent)
        x = _rdrecord(info, channels=[index], smooth_frames=False, return_res=res).e_p_signal[0]
    x = np.asarray(x, dtype=np.float32 if float32 else np.float64)
    if len(x) == 0:
        raise HeartlmError("record holds no samples", info.file)
    expected = round((header.sig_len or 0) * info.sig_fs[index] / info.frame_fs)
    if expected and len(x) < expected:
        raise HeartlmError(f"truncated: {len(x)} of {expected} samples", info.path)
    return Lead(info.sig_names[index], info.sig_fs[index], in_millivolts(x, info.units[index]))


_TO_MILLIVOLTS = {"nv": 1e-6, "uv": 1e-3, "µv": 1e-3, "μv": 1e-3, "mv": 1.0, "v": 1e3}


def in_millivolts(x: np.ndarray, unit: str) -> np.ndarray:
    """Voltages in mV, heartlm's unit; other units (or none) are left as they are."""
    factor = _TO_MILLIVOLTS.get(unit.strip().lower(), 1.0)
    return x if factor == 1.0 else x * np.asarray(factor, dtype=x.dtype)


def _check_name(path: Path) -> None:
    """wfdb reads headers as ASCII and drops other bytes, so the signal files of a record
    named `réc` would be looked for as `rc.dat`: refuse such a name rather than say that
    a file which exists is missing."""
    if not path.name.isascii():
        shown = os.fsencode(path.name).decode("utf-8", "backslashreplace")
        raise HeartlmError(
            f"record name '{shown}' is not ASCII: WFDB names are letters, digits, _ and -, "
            "and wfdb cannot find the files of this one (rename them)",
            path.parent,
        )


MAX_LEAD_SAMPLES = 2**28
"""Samples of one lead of a multi-segment record, gaps included (2 GiB as float64: three
days at 1 kHz)."""


def _layout(path: Path, header: wfdb.MultiRecord) -> wfdb.Record:
    """Signal names and samples per frame of a multi-segment record: its layout header
    (variable layout), else its first segment (fixed layout)."""
    names = [s for s in header.seg_name if s != "~"]
    if not names:
        raise HeartlmError("multi-segment header lists only gaps (~), no segments", f"{path}.hea")
    return read_header(path.parent / names[0])


def _read_segments(info: RecordInfo, index: int, res: int) -> np.ndarray:
    """One lead of a multi-segment record, gaps (`~`, or segments without the lead) NaN.

    The segments are read by wfdb (`m2s=False`) and placed here, because wfdb's own
    joining (`multi_to_single`) fails on a fixed-layout record with a gap."""
    header = info.source
    spf = round(info.sig_fs[index] / info.frame_fs)
    folder = info.path.parent
    for name in header.seg_name:
        if name != "~":
            segment = read_header(folder / name)
            _check_files(segment, folder)
            if segment.fs != header.fs:  # its samples would be read at the master's rate
                raise HeartlmError(f"segment {name} is sampled at {segment.fs:g} Hz, the "
                                   f"master header at {header.fs:g} Hz", info.file)  # fmt: skip
    total = int(sum(header.seg_len)) * spf
    if total > MAX_LEAD_SAMPLES:  # gaps (`~`) cost no disk, but their NaN would cost memory
        raise HeartlmError(
            f"the master header implies {total} samples of lead {info.sig_names[index]} "
            f"({total / info.sig_fs[index] / 3600:.0f} h), more than heartlm reads at once "
            f"({MAX_LEAD_SAMPLES}): split the record",
            info.file,
        )
    multi = _rdrecord(info, channels=[index], smooth_frames=False, m2s=False, return_res=res)
    x = np.full(total, np.nan, np.float32 if res == 32 else np.float64)
    start = 0
    for segment, length in zip(multi.segments, header.seg_len, strict=True):
        values = getattr(segment, "e_p_signal", None) if length else None
        if values:
            if len(values[0]) != length * spf:
                raise HeartlmError(
                    f"segment {segment.record_name} has {len(values[0])} samples of lead "
                    f"{info.sig_names[index]}, the master header implies {length * spf}",
                    info.file,
                )
            x[start * spf : (start + length) * spf] = values[0]
        start += length
    return x


def _rdrecord(info: RecordInfo, **kwargs: Any) -> Any:
    try:
        return wfdb.rdrecord(str(info.path), physical=True, **kwargs)
    except FileNotFoundError as exc:
        raise HeartlmError("signal file is missing", exc.filename or info.path) from None
    except Exception as exc:
        raise HeartlmError(f"cannot read signals ({brief(exc)})", info.path) from None


def _check_files(header: wfdb.Record, folder: Path) -> None:
    """Name a missing or truncated signal file before wfdb fails on it with a vague message."""
    names = [n for n in header.file_name or [] if n != "~"]
    for name in dict.fromkeys(names):
        if not (folder / name).is_file():
            raise HeartlmError("signal file is missing", folder / name)
    if not header.sig_len:
        return
    per_file: dict[str, float] = {}
    frames = header.samps_per_frame or [1] * len(header.file_name)
    for name, fmt, spf in zip(header.file_name, header.fmt, frames, strict=False):
        if fmt not in _BYTES_PER_SAMPLE:
            return
        per_file[name] = per_file.get(name, 0.0) + _BYTES_PER_SAMPLE[fmt] * (spf or 1)
    offsets = dict(zip(header.file_name, header.byte_offset or [], strict=False))
    for name, width in per_file.items():
        dat = folder / name
        expected = int(header.sig_len * width + 0.5) + int(offsets.get(name) or 0)
        if dat.stat().st_size < expected:
            raise HeartlmError(
                f"truncated: {dat.stat().st_size} bytes, the header implies {expected}", dat
            )
