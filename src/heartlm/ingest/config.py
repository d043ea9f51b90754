"""`IngestConfig`: the settings of one ingest run, validated, and re-readable from a store."""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heartlm.ecg.references import DEFAULT_REFERENCE
from heartlm.errors import HeartlmError
from heartlm.runinfo import read_run_json
from heartlm.settings import setting

BEAT_SOURCES = ("auto", "annotations", "detect")


def parse_band(text: str) -> tuple[float, float]:
    """`--band LO,HI` in Hz."""
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO,HI in Hz, got {text!r}") from None
    return lo, hi


@dataclass
class IngestConfig:
    lead: str | None = setting(None, metavar="NAME")
    """Lead to keep, by name (case-insensitive), or comma-separated names of which the first
    a record has wins; a record with none of them is refused. None = the fallback order in
    `leads.py`."""
    fs: float = setting(250.0, metavar="HZ")
    """Sampling rate of the store, Hz."""
    pre: float = setting(0.25, metavar="S")
    """Seconds of signal before the R peak in each beat window."""
    post: float = setting(0.40, metavar="S")
    """Seconds of signal after the R peak in each beat window."""
    align: float = setting(0.04, metavar="S")
    """Seconds around each reference beat searched for the R peak (largest |signal|); 0 = off."""
    band: tuple[float, float] = setting((0.5, 40.0), metavar="LO,HI", parse=parse_band)
    """Band-pass corners, Hz (zero-phase Butterworth)."""
    beats: str = setting("auto", choices=BEAT_SOURCES)
    """Where beats come from: annotations, detect, or auto (annotations when present)."""
    annotations: str | None = setting(None, metavar="EXT")
    """Reference annotation extensions, comma-separated, first found wins (LUDB: `ii`);
    not given: `atr`, where a record has one. Extensions given (`atr` too) that no record
    has are refused under `--beats auto`."""
    workers: int = setting(0, metavar="N")
    """Worker processes; 0 = one per CPU core (at most the number of records)."""
    skip_bad: bool = False
    """Skip an unreadable record with a warning instead of stopping the run."""

    def __post_init__(self) -> None:
        self.band = (float(self.band[0]), float(self.band[1]))
        self.fs = float(self.fs)
        self.validate()

    def validate(self) -> None:
        if not 50.0 <= self.fs <= 2000.0:
            raise ValueError(f"--fs must be between 50 and 2000 Hz, got {self.fs:g}")
        if self.pre <= 0 or self.post <= 0:
            raise ValueError("--pre and --post must be positive seconds")
        if self.pre + self.post > 5.0:
            raise ValueError("--pre plus --post must be at most 5 seconds")
        if not 0.0 <= self.align <= 0.1:
            raise ValueError("--align must be between 0 and 0.1 seconds")
        lo, hi = self.band
        if not 0.0 <= lo < hi < self.fs / 2:
            raise ValueError(f"--band must be LO,HI with 0 <= LO < HI < fs/2 ({self.fs / 2:g})")
        if self.beats not in BEAT_SOURCES:
            raise ValueError(f"--beats must be one of {', '.join(BEAT_SOURCES)}")
        if self.annotations is not None and not all(e.isalnum() for e in self.annotation_exts):
            raise ValueError(f"--annotations must be a file extension, got {self.annotations!r}")
        if self.lead is not None and not all(n.strip() for n in self.lead.split(",")):
            raise ValueError(f"--lead must be a lead name or NAME,NAME,..., got {self.lead!r}")
        if self.workers < 0:
            raise ValueError("--workers must be >= 0")

    @property
    def pre_samples(self) -> int:
        return int(self.pre * self.fs + 0.5)

    @property
    def post_samples(self) -> int:
        return int(self.post * self.fs + 0.5)

    @property
    def lead_names(self) -> list[str]:
        return [name.strip() for name in self.lead.split(",")] if self.lead else []

    @property
    def annotation_exts(self) -> list[str]:
        return (DEFAULT_REFERENCE if self.annotations is None else self.annotations).split(",")

    @property
    def align_samples(self) -> int:
        return int(self.align * self.fs + 0.5)

    def resolved_workers(self, n_records: int) -> int:
        wanted = self.workers or os.cpu_count() or 1
        return max(1, min(wanted, n_records))

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["band"] = list(self.band)
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> IngestConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    @classmethod
    def from_run_json(cls, store_dir: str | Path) -> IngestConfig:
        """The settings a store was made with, to ingest more records the same way."""
        info = read_run_json(store_dir, "ingest")
        try:
            return cls.from_dict(info["config"])
        except (KeyError, TypeError, ValueError) as exc:
            raise HeartlmError(
                f"run.json holds no usable ingest config ({exc})", store_dir
            ) from None
