"""Write a synthetic corpus as WFDB records (.hea, .dat, .atr) plus run.json, in parallel."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import wfdb

from heartlm.ecg.labels import AAMI_CLASSES, SYMBOL_TO_AAMI
from heartlm.errors import HeartlmError
from heartlm.log import logger, progress
from heartlm.outdir import staged_dir
from heartlm.runinfo import write_run_json
from heartlm.settings import MAX_SEED, comma_list, setting
from heartlm.synth.patient import SICK_SINUS_COUPLING, SICK_SINUS_ECTOPY
from heartlm.synth.record import synth_record

ADC_GAIN = 200.0  # adu per mV, as in MIT-BIH
FORMAT = "16"
MIN_MINUTES = 0.1
MAX_MINUTES = 24 * 60.0


@dataclass
class SynthConfig:
    """What `heartlm synth` draws; written into run.json."""

    records: int = 8
    """number of records (s0000, s0001, ...)"""
    minutes: float = 5.0
    """length of each record in minutes"""
    fs: float = 360.0
    """sampling rate in Hz (100 to 1000)"""
    seed: int = 0
    """record i is drawn from the random stream (seed, i): same seed, same bytes"""
    leads: int = setting(2, choices=(1, 2))
    """1: MLII; 2: MLII, V1"""
    afib_fraction: float = 0.3
    """share of records with AFIB episodes"""
    paced_fraction: float = 0.06
    """share of records from a paced patient (beats '/' and 'f')"""
    noise: float = 1.0
    """scale of baseline wander, muscle and powerline noise (0 = clean)"""
    sick_sinus_fraction: float = 0.0
    """share of records from a patient with a slow, pausing sinus node and atrial ectopic beats
    in the majority (a generalisation check: the usual beat is not the normal one)"""
    sick_sinus_ectopy: list[float] = setting(
        factory=lambda: list(SICK_SINUS_ECTOPY), parse=comma_list(float), metavar="LO,HI"
    )
    """range of a sick-sinus patient's share of atrial ectopic beats, drawn per patient
    (higher: longer runs of them)"""
    sick_sinus_coupling: list[float] = setting(
        factory=lambda: list(SICK_SINUS_COUPLING), parse=comma_list(float), metavar="LO,HI"
    )
    """range of a sick-sinus patient's atrial ectopic RR as a share of the sinus cycle,
    drawn per beat (nearer 1: less premature)"""
    flutter_fraction: float = 0.0
    """share of records with atrial flutter episodes (sawtooth flutter waves at 240-340 per
    minute, conducted 2:1 to 4:1), labelled (AFL: a regular atrium beside AFIB's chaotic one"""
    bigeminy_fraction: float = 0.0
    """share of records with episodes of bigeminy or trigeminy (every 2nd or 3rd beat a
    premature ventricular or atrial one, at a fixed coupling), labelled (B, (T or (N: an RR
    that is irregular but regularly so, which is not AF"""
    afib_ectopy_fraction: float = 0.0
    """share of records with AFIB episodes in which ventricular ectopic beats are frequent
    (a tenth to a quarter of the beats in AF; elsewhere the patient's usual rate), labelled
    (AFIB: the wide beats among the narrow ones make it no less AF"""
    fusion_fraction: float = 0.0
    """share of records from a patient in sinus rhythm with frequent ventricular ectopic beats
    (about 3-15 % of the beats) and fusion beats (5-13 %; MIT-BIH 208 and 213: 11-13 %), each
    fusion beat the sinus P wave and one of four blends of the sinus and the ventricular QRS and
    T (the sinus beat's share 20-80 %)"""

    def validate(self) -> None:
        if not 100 <= self.fs <= 1000:
            raise HeartlmError(f"--fs must be between 100 and 1000 Hz, got {self.fs:g}")
        if self.records < 1:
            raise HeartlmError(f"--records must be at least 1, got {self.records}")
        if not MIN_MINUTES <= self.minutes <= MAX_MINUTES:
            raise HeartlmError(
                f"--minutes must be between {MIN_MINUTES:g} (a few beats) and {MAX_MINUTES:g}"
                f" (24 h), got {self.minutes:g}"
            )
        if not 0 <= self.seed <= MAX_SEED:
            raise HeartlmError(f"--seed must be 0 .. {MAX_SEED}, got {self.seed}")
        if self.leads not in (1, 2):
            raise HeartlmError(f"--leads must be 1 or 2, got {self.leads}")
        if not 0 <= self.afib_fraction <= 1:
            raise HeartlmError(f"--afib-fraction must be in [0, 1], got {self.afib_fraction:g}")
        if not 0 <= self.paced_fraction <= 1:
            raise HeartlmError(f"paced_fraction must be in [0, 1], got {self.paced_fraction:g}")
        if not 0 <= self.sick_sinus_fraction <= 1:
            raise HeartlmError(
                f"--sick-sinus-fraction must be in [0, 1], got {self.sick_sinus_fraction:g}"
            )
        if not 0 <= self.flutter_fraction <= 1:
            raise HeartlmError(
                f"--flutter-fraction must be in [0, 1], got {self.flutter_fraction:g}"
            )
        if not 0 <= self.bigeminy_fraction <= 1:
            raise HeartlmError(
                f"--bigeminy-fraction must be in [0, 1], got {self.bigeminy_fraction:g}"
            )
        if not 0 <= self.afib_ectopy_fraction <= 1:
            raise HeartlmError(
                f"--afib-ectopy-fraction must be in [0, 1], got {self.afib_ectopy_fraction:g}"
            )
        if not 0 <= self.fusion_fraction <= 1:
            raise HeartlmError(f"--fusion-fraction must be in [0, 1], got {self.fusion_fraction:g}")
        if self.noise < 0:
            raise HeartlmError(f"noise must be >= 0, got {self.noise:g}")
        _check_range("--sick-sinus-ectopy", self.sick_sinus_ectopy, 0.0, 0.98)
        _check_range("--sick-sinus-coupling", self.sick_sinus_coupling, 0.3, 1.0)


def _check_range(flag: str, values: list[float], lowest: float, highest: float) -> None:
    """`values` is LO,HI with lowest <= LO <= HI <= highest."""
    if len(values) != 2 or not lowest <= values[0] <= values[1] <= highest:
        shown = ",".join(f"{v:g}" for v in values)
        raise HeartlmError(
            f"{flag} takes LO,HI with {lowest:g} <= LO <= HI <= {highest:g}, got {shown}"
        )


def record_name(i: int) -> str:
    return f"s{i:04d}"


def _share(i: int, fraction: float, phase: float) -> bool:
    """Spread a fraction evenly over record indices: exact for any prefix of the corpus."""
    return int((i + 1) * fraction + phase) > int(i * fraction + phase)


class RecordKind(NamedTuple):
    afib: bool
    paced: bool
    sick: bool
    flutter: bool
    bigeminy: bool
    afib_ectopy: bool
    fusion: bool


def record_kind(i: int, config: SynthConfig) -> RecordKind:
    """What record i is; a paced, sick-sinus, flutter or bigeminy record has no AFIB, a paced
    or sick-sinus record no flutter, a paced, sick-sinus or flutter record no bigeminy, an
    AF-with-ectopy record is none of those and not an AFIB record of the usual kind, and a
    fusion record is none of them."""
    paced = _share(i, config.paced_fraction, 0.5)
    sick = _share(i, config.sick_sinus_fraction, 0.25) and not paced
    flutter = _share(i, config.flutter_fraction, 0.75) and not (paced or sick)
    bigeminy = _share(i, config.bigeminy_fraction, 0.9) and not (paced or sick or flutter)
    ectopy = _share(i, config.afib_ectopy_fraction, 0.1) and not (
        paced or sick or flutter or bigeminy
    )
    fusion = _share(i, config.fusion_fraction, 0.2) and not (
        paced or sick or flutter or bigeminy or ectopy
    )
    afib = _share(i, config.afib_fraction, 0.0) and not (
        paced or sick or flutter or bigeminy or ectopy or fusion
    )
    return RecordKind(afib, paced, sick, flutter, bigeminy, ectopy, fusion)


def write_record(folder: Path, i: int, config: SynthConfig) -> dict[str, int]:
    """Draw record i and write it into `folder`; returns its annotation symbol counts."""
    afib, paced, sick, flutter, bigeminy, ectopy, fusion = record_kind(i, config)
    rec = synth_record(
        config.minutes,
        config.fs,
        (config.seed, i),
        leads=config.leads,
        afib=afib,
        paced=paced,
        noise=config.noise,
        sick_sinus=sick,
        flutter=flutter,
        bigeminy=bigeminy,
        afib_ectopy=ectopy,
        fusion=fusion,
        sick_sinus_ectopy=(config.sick_sinus_ectopy[0], config.sick_sinus_ectopy[1]),
        sick_sinus_coupling=(config.sick_sinus_coupling[0], config.sick_sinus_coupling[1]),
    )
    name = record_name(i)
    write_signal(
        folder,
        name,
        rec.signal,
        rec.fs,
        rec.sig_names,
        comments=[
            f"heartlm synth seed={config.seed} record={i} afib={afib} paced={paced}"
            + (" sick_sinus=True" if sick else "")
            + (" flutter=True" if flutter else "")
            + (" bigeminy=True" if bigeminy else "")
            + (" afib_ectopy=True" if ectopy else "")
            + (" fusion=True" if fusion else "")
        ],
    )
    wfdb.wrann(
        name,
        "atr",
        rec.ann_sample,
        symbol=rec.ann_symbol,
        aux_note=rec.ann_aux,
        write_dir=str(folder),
    )
    counts = Counter(rec.ann_symbol)
    counts["afib_records"] = int(afib)
    counts["paced_records"] = int(paced)
    counts["sick_sinus_records"] = int(sick)
    counts["flutter_records"] = int(flutter)
    counts["bigeminy_records"] = int(bigeminy)
    counts["afib_ectopy_records"] = int(ectopy)
    counts["fusion_records"] = int(fusion)
    counts["afib_episodes"] = rec.ann_aux.count("(AFIB")
    counts["flutter_episodes"] = rec.ann_aux.count("(AFL")
    counts["samples"] = len(rec.signal)
    return dict(counts)


def write_signal(
    folder: Path,
    name: str,
    signal_NL: np.ndarray,
    fs: float,
    sig_names: list[str],
    comments: list[str],
) -> None:
    """Write `name.hea` and a format-16 `name.dat`, byte for byte what wfdb.wrsamp writes.

    wfdb builds the header (checksums, initial values); the samples are written with numpy
    because wrsamp's own checks loop over every sample in Python and cost more than drawing them.
    """
    # -32768 is WFDB's "no sample" value in format 16, so the range stops one short of it.
    digital = np.clip(np.rint(signal_NL * ADC_GAIN), -(2**15) + 1, 2**15 - 1).astype("<i2")
    leads = digital.shape[1]
    header = wfdb.Record(
        record_name=name,
        fs=fs,
        units=["mV"] * leads,
        sig_name=sig_names,
        d_signal=digital,
        fmt=[FORMAT] * leads,
        adc_gain=[ADC_GAIN] * leads,
        baseline=[0] * leads,
        comments=comments,
    )
    header.set_d_features()
    header.set_defaults()
    header.wrheader(write_dir=str(folder))
    digital.tofile(folder / f"{name}.dat")


def write_corpus(
    out: Path,
    records: int,
    minutes: float,
    fs: float,
    seed: int,
    leads: int = 2,
    afib_fraction: float = 0.3,
    workers: int | None = None,
    overwrite: bool = False,
) -> dict:
    """Write `records` synthetic records into `out` and return what run.json holds."""
    config = SynthConfig(
        records=records,
        minutes=minutes,
        fs=fs,
        seed=seed,
        leads=leads,
        afib_fraction=afib_fraction,
    )
    return write_config(Path(out), config, workers=workers, overwrite=overwrite)


def write_config(out: Path, config: SynthConfig, workers: int | None, overwrite: bool) -> dict:
    """Validate `config`, draw and write every record (in parallel), then run.json."""
    config.validate()
    if workers is None:
        workers = os.cpu_count() or 1
    if workers < 1:
        raise HeartlmError(f"--workers must be at least 1, got {workers}")
    workers = min(workers, config.records)
    started = time.perf_counter()
    totals: Counter[str] = Counter()
    with staged_dir(out, overwrite) as stage:
        done = _run_all(stage, config, workers)
        for counts in progress(done, total=config.records, desc="synth", unit="rec"):
            totals.update(counts)
        # PhysioNet's list of the database's records, which some WFDB tools read.
        names = [record_name(i) for i in range(config.records)]
        (stage / "RECORDS").write_text("".join(f"{name}\n" for name in names))
        elapsed = time.perf_counter() - started
        counts = _summarise(totals, config.records)
        info = write_run_json(
            stage,
            "synth",
            asdict(config),
            counts=counts,
            timings={"total": elapsed},
            extra={"workers": workers, "beats_per_s": counts["beats"] / max(elapsed, 1e-9)},
        )
    logger.info("wrote %d records, %d beats in %.1f s", config.records, counts["beats"], elapsed)
    return info


def _summarise(totals: Counter[str], records: int) -> dict:
    """run.json's counts from the per-record counts: beats per symbol and AAMI class, rhythms."""
    symbols = {k: v for k, v in sorted(totals.items()) if k in SYMBOL_TO_AAMI}
    classes = {c: 0 for c in AAMI_CLASSES}
    for symbol, count in symbols.items():
        classes[SYMBOL_TO_AAMI[symbol]] += count
    return {
        "records": records,
        "beats": sum(classes.values()),
        "samples": totals["samples"],
        "classes": classes,
        "symbols": symbols,
        "afib_records": totals["afib_records"],
        "afib_episodes": totals["afib_episodes"],
        "paced_records": totals["paced_records"],
        "flutter_records": totals["flutter_records"],
        "flutter_episodes": totals["flutter_episodes"],
        "bigeminy_records": totals["bigeminy_records"],
        "afib_ectopy_records": totals["afib_ectopy_records"],
        "fusion_records": totals["fusion_records"],
    }


def _run_all(stage: Path, config: SynthConfig, workers: int) -> Iterator[dict[str, int]]:
    if workers == 1:
        for i in range(config.records):
            yield write_record(stage, i, config)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(write_record, stage, i, config) for i in range(config.records)]
        try:
            for future in as_completed(futures):
                yield future.result()
        finally:
            # On failure or interrupt, records not yet started are dropped instead of drawn.
            for future in futures:
                future.cancel()
