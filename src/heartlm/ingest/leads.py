"""Choosing one lead of a record: the one asked for, else the first of a fixed fallback order."""

from __future__ import annotations

import re
from pathlib import Path

from heartlm.errors import HeartlmError

FALLBACK_ORDER: tuple[str, ...] = (
    "MLII", "II", "V5", "V1", "V2", "V4", "V3", "V6", "ML5", "I", "III", "AVF",
)  # fmt: skip
"""Modified lead II first (MIT-BIH), then limb lead II (LUDB's `ii`), then the precordial
leads where the QRS is large and upright, then the other limb leads; a record with none
of these falls back to its first ECG signal (an EDF label such as `ECG` or `EKG`), else
its first signal."""

STANDARD_LEADS = frozenset({*FALLBACK_ORDER, "AVR", "AVL"})


def recorded_in(db: str) -> str:
    """The database whose recordings a folder holds: `mitdb_V1` holds another lead of
    `mitdb`'s records (a database, `_` and an upper-case lead name, as
    `benchmarks/lead_copies.py` names its folders), any other folder its own. Record `101` of
    both is one recording: it must not train on one side of a split and validate or score on
    the other."""
    base, _, lead = db.rpartition("_")
    return base if base and lead in STANDARD_LEADS else db


def recording_key(db: str, name: str) -> str:
    """DB/NAME of the recording that record `name` of folder `db` is a lead of."""
    return f"{recorded_in(db)}/{name}"


# Labels may name the signal type or the word "lead" first (EDF's `ECG II`, `EKG-V1`,
# `ECG Lead II`; `lead II`): compare what follows, without spaces (`ML II` is MLII).
_ECG_PREFIX = re.compile(r"^(?:(?:ECG|EKG|LEAD)[\s_\-:]+)+", re.IGNORECASE)


def lead_key(name: str) -> str:
    key = re.sub(r"\s+", "", _ECG_PREFIX.sub("", name.strip())).upper()
    return key or re.sub(r"\s+", "", name).upper()  # `ECG:` alone names no lead after it


def pick_lead(sig_names: list[str], wanted: str | None = None, where: Path | None = None) -> int:
    """Index of the lead to keep.

    `wanted` is a name, or comma-separated names of which the first present wins; a
    record holding none of them is an error naming `where`. Without `wanted`, the first
    of FALLBACK_ORDER that the record has, else its first ECG signal, else its first."""
    keys = [lead_key(name) for name in sig_names]
    if wanted:
        for name in wanted.split(","):
            if lead_key(name) in keys:
                return keys.index(lead_key(name))
        raise HeartlmError(f"--lead {wanted}: no such lead (has {', '.join(sig_names)})", where)
    for name in FALLBACK_ORDER:
        if name in keys:
            return keys.index(name)
    ecg = [i for i, name in enumerate(sig_names) if re.match(r"(ECG|EKG)", name, re.I)]
    return ecg[0] if ecg else 0
