"""Many records to one beat store: worker processes, ordered results, the writer in the parent."""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from heartlm.ecg.labels import AAMI_CLASSES, RHYTHMS
from heartlm.ecg.references import check_references
from heartlm.ecg.wfdbio import find_records
from heartlm.ecg.workers import (
    common_folder,
    read_here,
    record_pool,
    unique_records,
    worker_died,
)
from heartlm.errors import HeartlmError
from heartlm.ingest.config import IngestConfig
from heartlm.ingest.record import RecordResult, ingest_record
from heartlm.log import logger, progress
from heartlm.outdir import check_separate, check_writable, staged_dir
from heartlm.runinfo import write_run_json
from heartlm.store import StoreWriter

RECORDS_AHEAD_PER_WORKER = 2  # records in flight per worker: bounds memory, keeps workers busy


@dataclass
class _Failure:
    path: Path
    message: str


def ingest(
    sources: list[Path],
    out: Path,
    config: IngestConfig,
    overwrite: bool = False,
    named_annotations: bool = False,
) -> dict[str, Any]:
    """Ingest WFDB records (files or folders) into a beat store at `out`; returns run.json.

    `named_annotations`: the user chose `config.annotations` (`heartlm ingest` does when
    `--annotations` is given, `atr` too), so that no record having such a file is an error,
    not a run of detected beats."""
    t_start = time.perf_counter()
    check_writable(out, overwrite)
    check_separate(out, sources)
    records, skipped = _list_records(sources, config)
    if not records:
        if skipped:
            raise HeartlmError(f"all {len(skipped)} inputs were skipped (see above)", sources[0])
        raise HeartlmError("no WFDB or EDF records to ingest", sources[0] if sources else None)
    if config.beats == "auto":  # else a reference is required (`annotations`) or unused
        check_references(records, config.annotation_exts, named_annotations, "ingest",
                         "their beats are detected",
                         "; --beats detect detects the beats instead")  # fmt: skip
    workers = config.resolved_workers(len(records))
    totals = _Totals(config.fs)
    with (
        staged_dir(out, overwrite) as stage,
        closing(_run_all(records, config, workers)) as results,
    ):
        writer = StoreWriter(stage, config.fs, config.pre_samples, config.post_samples)
        for result in progress(results, total=len(records), desc="ingest", unit="rec"):
            if isinstance(result, _Failure):
                _skip_or_raise(result, config, skipped)
                continue
            if result.unknown_symbols:
                _skip_or_raise(_unknown_symbols(result), config, skipped)
                continue
            writer.append(result.entry, result.beats, result.table)
            totals.add(result)
        if not writer.records:
            where = common_folder(records)
            raise HeartlmError(f"all {len(skipped)} records were skipped (see above)", where)
        if writer.n_beats == 0:
            raise HeartlmError("no beats found in any record", sources[0])
        writer.close()
        elapsed = time.perf_counter() - t_start
        info = write_run_json(
            stage,
            "ingest",
            config.to_dict(),
            counts=totals.counts(writer, skipped),
            timings={"total": elapsed, **totals.seconds},
            extra={
                "sources": [str(s) for s in sources],
                "workers": workers,
                "beats_per_s": writer.n_beats / elapsed,
                "skipped": [{"record": str(f.path), "problem": f.message} for f in skipped],
                "gaps_s": totals.gaps_s,
            },
        )
    skipped_note = f", {len(skipped)} skipped" if skipped else ""
    logger.info(
        f"{out}: {writer.n_beats} beats from {len(writer.records)} records{skipped_note} "
        f"in {elapsed:.1f} s ({writer.n_beats / elapsed:,.0f} beats/s, {workers} workers)"
    )
    return info


def _list_records(sources: list[Path], config: IngestConfig) -> tuple[list[Path], list[_Failure]]:
    """Record paths from the sources; annotation files without a header are bad records."""
    skipped: list[_Failure] = []
    records: list[Path] = []
    for source in sources:
        source = Path(source)
        if source.is_dir():
            for ext in config.annotation_exts:
                for orphan in sorted(source.rglob(f"*.{ext}")):
                    if any(orphan.with_suffix(s).is_file() for s in (".hea", ".edf", ".EDF")):
                        continue
                    problem = _Failure(orphan, "annotation file without its record (no .hea)")
                    _skip_or_raise(problem, config, skipped)
        try:
            records.extend(find_records([source]))
        except HeartlmError as exc:
            _skip_or_raise(_Failure(source, exc.message), config, skipped, exc.path)
    return unique_records(records, "ingest", "ingested"), skipped


def _unknown_symbols(result: RecordResult) -> _Failure:
    """A symbol that is neither an AAMI beat nor a known non-beat is never guessed."""
    found = ", ".join(f"{s!r} ({n}x)" for s, n in sorted(result.unknown_symbols.items()))
    return _Failure(
        Path(result.entry.extra["annotation_file"]),
        f"unknown annotation symbol(s) {found}: not an AAMI beat class nor a known non-beat",
    )


def _skip_or_raise(
    failure: _Failure, config: IngestConfig, skipped: list[_Failure], where: str | None = None
) -> None:
    if not config.skip_bad:
        raise HeartlmError(failure.message, where or failure.path)
    logger.warning(f"skipping {where or failure.path}: {failure.message}")
    skipped.append(failure)


def _safe_ingest(path: Path, config: IngestConfig) -> RecordResult | _Failure:
    """Worker entry point: every problem comes back as a value naming the record's file."""
    try:
        return ingest_record(path, config)
    except HeartlmError as exc:
        return _Failure(Path(exc.path or path), exc.message)
    except Exception as exc:  # a library failing on odd input must still name the record
        return _Failure(Path(f"{path}.hea"), f"cannot ingest ({type(exc).__name__}: {exc})")


def _run_all(
    records: list[Path], config: IngestConfig, workers: int
) -> Iterator[RecordResult | _Failure]:
    if workers == 1:
        yield from read_here(_safe_ingest, records, config)
        return
    # Leaving the pool, also when the caller stops early on a bad record, drops what is queued.
    with record_pool(workers) as pool:
        yield from _ordered(pool.submit, _safe_ingest, records, config, workers)


def _ordered(
    submit: Callable[..., Future],
    fn: Callable,
    items: list[Path],
    config: IngestConfig,
    workers: int,
) -> Iterator[Any]:
    """Results in input order, with at most a few records in flight at a time."""
    pending: deque[tuple[Path, Future]] = deque()
    todo = iter(items)
    for item in todo:
        pending.append((item, submit(fn, item, config)))
        if len(pending) >= RECORDS_AHEAD_PER_WORKER * workers:
            break
    while pending:
        item, future = pending.popleft()
        try:
            result = future.result()
        except BrokenProcessPool:
            raise worker_died([item, *(i for i, _ in pending)]) from None
        item = next(todo, None)
        if item is not None:
            pending.append((item, submit(fn, item, config)))
        yield result


class _Totals:
    """Counts and worker timings summed over the records written so far."""

    def __init__(self, fs: float) -> None:
        self.fs = fs  # the store's rate, that gaps are counted in
        self.aami: Counter = Counter()
        self.rhythm: Counter = Counter()
        self.symbols: Counter = Counter()
        self.unknown: Counter = Counter()
        self.per_record: dict[str, int] = {}
        self.reference = self.dropped = self.lead_fallbacks = 0
        self.detected_records = 0
        self.seconds: dict[str, float] = Counter()
        self.gaps_s: dict[str, list[list[float]]] = {}
        self.bridged_s = 0.0

    def add(self, r: RecordResult) -> None:
        self.aami.update(_names(r.table["aami"], AAMI_CLASSES, "unlabelled"))
        self.rhythm.update(_names(r.table["rhythm"], RHYTHMS, "unknown"))
        self.unknown.update(r.unknown_symbols)
        self.per_record[f"{r.entry.db}/{r.entry.name}"] = len(r.table)
        self.reference += r.n_reference
        self.dropped += r.n_dropped
        self.lead_fallbacks += r.lead_fallback
        self.detected_records += r.entry.beat_source == "detect"
        self.bridged_s += r.entry.extra["bridged_s"]
        if r.entry.extra["gaps"]:
            self.gaps_s[f"{r.entry.db}/{r.entry.name}"] = [
                [a / self.fs, b / self.fs] for a, b in r.entry.extra["gaps"]
            ]
        for key, value in r.seconds.items():
            self.seconds[f"worker_{key}"] += value

    def counts(self, writer: StoreWriter, skipped: list[_Failure]) -> dict[str, Any]:
        return {
            "records": len(writer.records),
            "records_skipped": len(skipped),
            "records_detected": self.detected_records,
            "lead_fallbacks": self.lead_fallbacks,
            "beats": writer.n_beats,
            "beats_found": self.reference,
            "dropped_beats": self.dropped,
            "gaps": sum(len(g) for g in self.gaps_s.values()),
            "gap_s": sum(b - a for g in self.gaps_s.values() for a, b in g),
            "bridged_s": self.bridged_s,
            "aami": dict(self.aami),
            "rhythm": dict(self.rhythm),
            "unknown_symbols": dict(self.unknown),
            "per_record": self.per_record,
        }


def _names(codes: np.ndarray, names: tuple[str, ...], negative: str) -> Counter:
    values, counts = np.unique(codes, return_counts=True)
    return Counter(
        {(names[v] if v >= 0 else negative): int(c) for v, c in zip(values, counts, strict=True)}
    )
