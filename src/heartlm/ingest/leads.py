"""Choosing one lead of a record: by name, else the first lead of a fixed fallback order."""

from __future__ import annotations

FALLBACK_ORDER: tuple[str, ...] = (
    "MLII", "II", "V5", "V1", "V2", "V4", "V3", "V6", "ML5", "I", "III", "AVF",
)  # fmt: skip
"""Modified lead II first (MIT-BIH), then limb lead II (LUDB's `ii`), then the precordial
leads where the QRS is large and upright, then the other limb leads; a record with none
of these falls back to its first lead."""


def pick_lead(sig_names: list[str], wanted: str | None = None) -> int:
    """Index of the lead to keep: `wanted` if the record has it, else the fallback order."""
    upper = [name.strip().upper() for name in sig_names]
    order = ((wanted.upper(),) if wanted else ()) + FALLBACK_ORDER
    for name in order:
        if name in upper:
            return upper.index(name)
    return 0
