"""Checks the numbers in a WFDB header that wfdb's parser would silently replace.

`wfdb.rdheader` matches each line with optional regex groups: a field it cannot read
takes its default (a gain of `abc` becomes 200, a sampling rate of `abc` becomes 250) or
shifts the fields after it, and the damage surfaces later as a ZeroDivisionError or
IndexError while reading the signal file, or not at all. wfdb still parses the header;
this only refuses, naming the `.hea`, what wfdb would have guessed.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from heartlm.errors import HeartlmError

# The number syntax wfdb's own patterns accept (wfdb.io.header.rx_record, rx_signal).
_DECIMAL = r"(?:\d+\.?\d*|\.\d+)"
_RATE = re.compile(rf"(?P<fs>{_DECIMAL})(?:/-?{_DECIMAL}(?:\(-?{_DECIMAL}\))?)?")
_FORMAT = re.compile(r"(?P<fmt>\d+)(?:x(?P<spf>\d+))?(?::\d+)?(?:\+\d+)?")
_GAIN = re.compile(rf"(?P<gain>-?{_DECIMAL}(?:e[+-]?\d+)?)(?:\(-?\d+\))?(?:/\S*)?")

# The smallest |ADC gain| whose physical values stay finite in float32 (heartlm's samples) for
# the largest (digital - baseline) of any WFDB format (32-bit, both ends): 2**32 / float32's
# largest number.
MIN_GAIN = 2**32 / 3.4028234663852886e38

# wfdb.io._signal's formats, plus 0 (a null signal, as in a layout header).
FORMATS = frozenset(
    ("0", "8", "16", "24", "32", "61", "80", "160", "212", "310", "311", "508", "516", "524")
)


def check_header(hea: Path, text: str) -> None:
    """Raise HeartlmError naming `hea` for any number wfdb would misread in `text`."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise HeartlmError("malformed header (no record line)", hea)
    fields = lines[0].split()
    n_seg = _record_line(fields, hea)
    body = lines[1:]
    n_sig = int(fields[1]) if len(fields) > 1 else 0
    if n_seg is not None:
        if len(body) != n_seg:
            raise HeartlmError(f"header says {n_seg} segments but lists {len(body)}", hea)
        for line in body:
            _segment_line(line.split(), hea)
        return
    if len(body) != n_sig:
        raise HeartlmError(f"header says {n_sig} signals but has {len(body)} signal lines", hea)
    for i, line in enumerate(body):
        _signal_line(line.split(), i, hea)


def _record_line(fields: list[str], hea: Path) -> int | None:
    segments = fields[0].partition("/")[2]
    n_seg = _count(segments, "number of segments", hea) if segments else None
    if len(fields) < 2:
        raise HeartlmError("malformed header: the record line has no number of signals", hea)
    _count(fields[1], "number of signals", hea)
    if len(fields) > 2:
        match = _RATE.fullmatch(fields[2])
        fs = float(match["fs"]) if match else math.nan
        if not (math.isfinite(fs) and fs > 0):
            raise HeartlmError(f"malformed header: sampling rate {fields[2]!r}", hea)
    if len(fields) > 3:
        _count(fields[3], "number of samples", hea)
    return n_seg


def _segment_line(fields: list[str], hea: Path) -> None:
    if len(fields) != 2:
        raise HeartlmError(f"malformed segment line {' '.join(fields)!r}", hea)
    _count(fields[1], f"length of segment {fields[0]}", hea)


def _signal_line(fields: list[str], i: int, hea: Path) -> None:
    where = f"signal {i}"
    if len(fields) < 2:
        raise HeartlmError(f"malformed header: {where} has no format", hea)
    fmt = _FORMAT.fullmatch(fields[1])
    if not fmt or fmt["fmt"] not in FORMATS:
        raise HeartlmError(f"malformed header: {where} has format {fields[1]!r}", hea)
    if fmt["spf"] is not None and int(fmt["spf"]) < 1:
        raise HeartlmError(f"malformed header: {where} has {fmt['spf']} samples per frame", hea)
    if len(fields) > 2:
        gain = _GAIN.fullmatch(fields[2])
        if not gain or not math.isfinite(float(gain["gain"])):
            raise HeartlmError(f"malformed header: {where} has ADC gain {fields[2]!r}", hea)
        if 0 < abs(float(gain["gain"])) < MIN_GAIN:  # 0: uncalibrated, read as WFDB's 200
            raise HeartlmError(f"malformed header: {where} has ADC gain {fields[2]!r}, so "
                               "small that its samples would be infinite", hea)  # fmt: skip


def _count(text: str, what: str, hea: Path) -> int:
    if not text.isdigit():
        raise HeartlmError(f"malformed header: {what} {text!r}", hea)
    return int(text)
