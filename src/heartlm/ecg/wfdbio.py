"""Finding WFDB and EDF records, and reading WFDB headers and annotations, with one-line errors.

Every failure names the file and the problem as a `HeartlmError`; nothing here
prints or exits. Signals are read by `heartlm.ecg.signals`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import wfdb

from heartlm.ecg.annfile import Annotations, read_mit_annotations
from heartlm.ecg.headercheck import check_header
from heartlm.ecg.labels import SYMBOL_TO_AAMI
from heartlm.errors import HeartlmError

__all__ = [
    "Annotations",
    "Record",
    "annotation_path",
    "annotation_samples",
    "find_records",
    "is_edf",
    "read_annotations",
    "read_header",
    "read_record",
]

ANNOTATIONS_PAST_END_S = 1.0
"""Annotations this far past a record's end mean their time resolution is not the one
they are read with (for example a 500 ticks/s file read as 125 Hz samples)."""


@dataclass
class Record:
    path: Path  # record base path, without extension (or the .edf file)
    fs: float
    sig_names: list[str]
    signal: np.ndarray  # (n_samples, n_leads) float64 (float32 on request), physical units (mV)
    comments: list[str]


def is_edf(path: Path) -> bool:
    return path.suffix.lower() == ".edf"


def database_of(record: Path) -> str:
    """The database a record belongs to: its folder's own name, also for a record given as
    `x` or `../x` (not "" or "..")."""
    return Path(os.path.abspath(record)).parent.name


def find_records(paths: list[str | Path]) -> list[Path]:
    """Record paths from record paths (with or without extension), `.edf` files and folders.

    Folders are searched with their subfolders (hidden ones excepted; linked ones followed,
    each real folder once); the segments and layout header of a multi-segment record are
    part of it, not records of their own."""
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            in_folder = list(_records_under(p))
            if not in_folder:
                raise HeartlmError("folder holds no WFDB or EDF records (no .hea or .edf)", p)
            found.extend(in_folder)
        elif is_edf(p) and p.is_file():
            found.append(p)
        elif p.with_suffix(".hea").is_file() or Path(f"{p}.hea").is_file():
            found.append(p.with_suffix("") if p.suffix in {".hea", ".dat", ".atr"} else p)
        elif p.suffix and p.with_suffix("").with_suffix(".hea").is_file():
            found.append(p.with_suffix(""))
        else:
            for hea in (Path(f"{p}.hea"), p.with_suffix(".hea")):
                _check_regular(hea, "the header")
            if p.suffix and p.is_file():
                raise HeartlmError("annotation or data file without its .hea header", p)
            raise HeartlmError("no such WFDB record, EDF file or folder", p)
    return found


def _check_regular(path: Path, what: str) -> None:
    """Refuse a FIFO, device or folder where a WFDB file is expected: opening one could wait
    or read for ever, and a folder would pass for a missing file."""
    if path.exists() and not path.is_file():
        raise HeartlmError(f"{what} is not a regular file", path)


def _check_ascii_fields(raw: bytes, hea: Path) -> None:
    """A signal line's format, gain and units in ASCII, as WFDB writes them: wfdb drops
    other characters, so `µV` would read as volts, a millionfold too large."""
    lines = [ln for ln in raw.splitlines() if ln.strip() and not ln.lstrip().startswith(b"#")]
    for n, line in enumerate(lines[1:], 2):
        fields = line.split()
        if len(fields) >= 3 and not (fields[1] + fields[2]).isascii():
            shown = fields[2].decode("utf-8", "backslashreplace")
            raise HeartlmError(
                f"signal line {n} has a non-ASCII format or gain field ({shown}), which wfdb "
                "would misread (write microvolts as uV)",
                hea,
            )


def _records_under(folder: Path) -> Iterator[Path]:
    """Records in `folder` and its subfolders, symbolic links to folders followed (a data
    folder of links to databases), each real folder once (a link loop ends there)."""
    seen: set[str] = set()
    for root, dirs, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        here = Path(root)
        # Not a FIFO or a device named `.hea`: opening one would wait or read for ever.
        heads = {f[:-4] for f in files if f.endswith(".hea") and (here / f).is_file()}
        parts: set[str] = set()
        for name in heads:
            parts.update(_segment_names(here / name))
        records = [here / n for n in heads - parts]
        records += [here / f for f in files if is_edf(Path(f)) and f[:-4] not in heads]
        yield from sorted(records, key=_natural_key)


def _segment_names(path: Path) -> list[str]:
    """The segment and layout records a multi-segment header lists; [] for other headers.

    Only the record line is looked at (a `/` after the name marks a master header), so
    that listing a folder does not parse every header twice."""
    try:
        with open(f"{path}.hea", encoding="ascii", errors="ignore") as f:
            first = next((ln for ln in f if ln.strip() and not ln.startswith("#")), "")
    except OSError:
        return []
    if "/" not in (first.split() or [""])[0]:
        return []
    try:
        return [s for s in read_header(path).seg_name if s != "~"]
    except HeartlmError:
        return []  # listed as a record, and refused as one when it is read


def _natural_key(p: Path) -> tuple:
    stem = p.stem if is_edf(p) else p.name
    return (str(p.parent), 0, int(stem), "") if stem.isdigit() else (str(p.parent), 1, 0, stem)


def read_header(path: Path) -> wfdb.Record | wfdb.MultiRecord:
    """The header of a WFDB record, its numbers checked (see `heartlm.ecg.headercheck`)."""
    hea = Path(f"{path}.hea")
    _check_regular(hea, "the header")
    try:
        raw = hea.read_bytes()
    except FileNotFoundError:
        raise HeartlmError("header file is missing", hea) from None
    except OSError as exc:
        raise HeartlmError(f"cannot read the header ({exc.strerror})", hea) from None
    _check_ascii_fields(raw, hea)
    text = raw.decode("ascii", errors="ignore")
    check_header(hea, text)
    try:
        return wfdb.rdheader(str(path))
    except Exception as exc:  # wfdb raises bare ValueError/IndexError on malformed headers
        raise HeartlmError(f"malformed header ({brief(exc)})", hea) from None


def read_record(path: Path, channels: list[int] | None = None, float32: bool = False) -> Record:
    """Leads of a record in physical units as one (n_samples, n_leads) array.

    The leads must share one sampling rate; `heartlm.ecg.signals.read_lead` reads any one
    lead at its own rate."""
    from heartlm.ecg.signals import open_record, read_lead

    info = open_record(path)
    leads = [read_lead(info, i, float32) for i in (channels or range(len(info.sig_names)))]
    if len({lead.fs for lead in leads}) > 1:
        raise HeartlmError("the chosen leads have different sampling rates", path)
    return Record(
        path=Path(path),
        fs=leads[0].fs,
        sig_names=[lead.name for lead in leads],
        signal=np.stack([lead.signal for lead in leads], axis=1),
        comments=info.comments,
    )


def annotation_path(path: Path, extension: str) -> Path:
    """A record's annotation file; an EDF record's sits beside the `.edf`, same name."""
    return Path(f"{path.with_suffix('') if is_edf(path) else path}.{extension}")


def read_annotations(path: Path, extension: str = "atr") -> Annotations | None:
    """Reference annotations of a record, or None when it has no such file.

    A truncated file is an error."""
    ann_path = annotation_path(path, extension)
    base = ann_path.with_suffix("")
    _check_regular(ann_path, "the annotation file")
    if not ann_path.is_file():
        return None
    fast = read_mit_annotations(base, extension)
    if fast is not None:
        return fast
    try:
        ann = wfdb.rdann(str(base), extension)
    except Exception as exc:
        raise HeartlmError(f"cannot read annotations ({brief(exc)})", ann_path) from None
    aux = list(ann.aux_note) if ann.aux_note is not None else [""] * len(ann.sample)
    fs = float(ann.fs) if ann.fs is not None else None  # the file's own, else the header's
    return Annotations(np.asarray(ann.sample, dtype=np.int64), list(ann.symbol), aux, fs)


def annotation_samples(
    ann: Annotations, frame_fs: float | None, fs: float, n_samples: int, ann_path: str | Path
) -> np.ndarray:
    """Annotation times as float sample positions at rate `fs` (not rounded).

    Times count ticks of the file's own time resolution, else frames of the record
    (`frame_fs`). Times that cannot be mapped, or that fall past the record's end, are an
    error naming the annotation file."""
    tick_fs = ann.fs or frame_fs
    if tick_fs is None:
        raise HeartlmError(
            "states no time resolution (## time resolution), and the record has no frame "
            "rate to count its sample numbers in",
            ann_path,
        )
    if not (np.isfinite(tick_fs) and tick_fs > 0):
        raise HeartlmError(f"time resolution {tick_fs:g} ticks/s cannot be used", ann_path)
    _check_order(ann, ann_path)
    position = ann.sample.astype(np.float64) * (fs / tick_fs)
    if len(position) and position.max() > n_samples + ANNOTATIONS_PAST_END_S * fs:
        raise HeartlmError(
            f"annotations run to {position.max() / fs:.1f} s, past the record's end at "
            f"{n_samples / fs:.1f} s: its time resolution ({tick_fs:g} ticks/s) does not "
            "fit the record",
            ann_path,
        )
    return position


def _check_order(ann: Annotations, ann_path: str | Path) -> None:
    """Annotation times in WFDB's canonical order (never backwards), and no two beats at one
    time: either would give a beat a zero or negative RR interval."""
    back = np.flatnonzero(np.diff(ann.sample) < 0)
    if len(back):
        i = int(back[0]) + 1
        raise HeartlmError(
            f"annotation {i} (tick {ann.sample[i]}) comes before annotation {i - 1} (tick "
            f"{ann.sample[i - 1]}): annotation times must not go backwards",
            ann_path,
        )
    beats = ann.sample[np.fromiter((s in SYMBOL_TO_AAMI for s in ann.symbol), dtype=bool,
                                   count=len(ann.symbol))]  # fmt: skip
    twice = np.flatnonzero(np.diff(beats) == 0)
    if len(twice):
        raise HeartlmError(f"two beats are annotated at tick {beats[twice[0]]}", ann_path)


def brief(exc: BaseException) -> str:
    """A library exception as `Type: first line`, to quote in a one-line error."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160]}" if text else type(exc).__name__
