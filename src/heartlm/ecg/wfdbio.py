"""Finding and reading WFDB records through the `wfdb` library, with one-line errors.

Every failure names the file and the problem as a `HeartlmError`; nothing here
prints or exits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import wfdb

from heartlm.errors import HeartlmError


@dataclass
class Record:
    path: Path  # record base path, without extension
    fs: float
    sig_names: list[str]
    signal: np.ndarray  # (n_samples, n_leads) float64 (float32 on request), physical units (mV)
    comments: list[str]


@dataclass
class Annotations:
    sample: np.ndarray  # int64 sample indices
    symbol: list[str]
    aux_note: list[str]


def find_records(paths: list[str | Path]) -> list[Path]:
    """Record base paths from record paths (with or without extension) and folders."""
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            heads = sorted(p.glob("*.hea"), key=_natural_key)
            if not heads:
                raise HeartlmError("folder holds no WFDB records (no .hea files)", p)
            found.extend(h.with_suffix("") for h in heads)
        elif p.with_suffix(".hea").is_file() or Path(f"{p}.hea").is_file():
            found.append(p.with_suffix("") if p.suffix in {".hea", ".dat", ".atr"} else p)
        elif p.suffix and p.with_suffix("").with_suffix(".hea").is_file():
            found.append(p.with_suffix(""))
        else:
            if p.suffix and p.is_file():
                raise HeartlmError("annotation or data file without its .hea header", p)
            raise HeartlmError("no such WFDB record or folder", p)
    return found


def _natural_key(p: Path) -> tuple:
    stem = p.stem
    return (0, int(stem), "") if stem.isdigit() else (1, 0, stem)


def read_header(path: Path) -> wfdb.Record:
    try:
        return wfdb.rdheader(str(path))
    except FileNotFoundError:
        raise HeartlmError("header file is missing", f"{path}.hea") from None
    except Exception as exc:  # wfdb raises bare ValueError/IndexError on malformed headers
        raise HeartlmError(f"malformed header ({_short(exc)})", f"{path}.hea") from None


def read_record(
    path: Path,
    channels: list[int] | None = None,
    float32: bool = False,
    header: wfdb.Record | None = None,
) -> Record:
    """Read a record's signals in physical units; reject missing, truncated or empty data.

    `float32` returns float32 samples (half the memory and time of float64); `header`, from
    `read_header`, saves parsing it again (slow for many-lead records)."""
    header = header or read_header(path)
    if not header.sig_name:
        raise HeartlmError("header lists no signals", f"{path}.hea")
    dat = Path(path).parent / (header.file_name[0] if header.file_name else f"{path.name}.dat")
    if not dat.is_file():
        raise HeartlmError("signal file is missing", dat)
    _check_dat_size(header, Path(path).parent)
    try:
        rec = wfdb.rdrecord(
            str(path), channels=channels, physical=True, return_res=32 if float32 else 64
        )
    except Exception as exc:
        raise HeartlmError(f"cannot read signals ({_short(exc)})", dat) from None
    signal = np.asarray(rec.p_signal, dtype=np.float32 if float32 else np.float64)
    if signal.ndim != 2 or signal.shape[0] == 0:
        raise HeartlmError("record holds no samples", dat)
    if header.sig_len and signal.shape[0] < header.sig_len:
        raise HeartlmError(f"truncated: {signal.shape[0]} of {header.sig_len} samples", dat)
    return Record(
        path=Path(path),
        fs=float(rec.fs),
        sig_names=list(rec.sig_name),
        signal=signal,
        comments=list(rec.comments or []),
    )


# Bytes per sample of the fixed-width WFDB formats (compressed 5xx formats vary).
_BYTES_PER_SAMPLE = {"8": 1, "16": 2, "61": 2, "80": 1, "160": 2, "212": 1.5, "24": 3, "32": 4}


def _check_dat_size(header: wfdb.Record, folder: Path) -> None:
    """Name a truncated signal file before wfdb fails on it with a vague message."""
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
        if dat.is_file() and dat.stat().st_size < expected:
            raise HeartlmError(
                f"truncated: {dat.stat().st_size} bytes, the header implies {expected}", dat
            )


def read_annotations(path: Path, extension: str = "atr") -> Annotations | None:
    """Reference annotations of a record, or None when it has no such file."""
    ann_path = Path(f"{path}.{extension}")
    if not ann_path.is_file():
        return None
    try:
        ann = wfdb.rdann(str(path), extension)
    except Exception as exc:
        raise HeartlmError(f"cannot read annotations ({_short(exc)})", ann_path) from None
    aux = list(ann.aux_note) if ann.aux_note is not None else [""] * len(ann.sample)
    return Annotations(np.asarray(ann.sample, dtype=np.int64), list(ann.symbol), aux)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160]}" if text else type(exc).__name__
