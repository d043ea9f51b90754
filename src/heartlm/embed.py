"""`heartlm embed RUN DATA --out EMB`: per-beat and per-window embeddings of a run's model.

DATA is a token folder made with RUN's codebook, or a folder of WFDB records, which is
ingested and tokenized as RUN's training data was (`heartlm.labelled.tokens`). EMB holds
`embeddings.safetensors` (`beat`: one row per beat, `window`: one row per window, float32
final-norm hidden states), `beats.csv` (row, record, database, beat index within the
record, R-peak time in seconds where the beat store is at hand, AAMI label), `windows.csv`
(row, record, first beat, beats, AFIB label) and `run.json`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from heartlm.errors import HeartlmError
from heartlm.log import logger
from heartlm.outdir import csv_text
from heartlm.settings import setting


@dataclass
class EmbedConfig:
    run: Path | None = setting(positional=True, required=True, metavar="RUN")
    """a pretrained or fine-tuned run (its model.safetensors and config.json)"""
    data: Path | None = setting(positional=True, required=True, metavar="DATA")
    """token folder made with RUN's codebook, or a folder of WFDB records"""
    out: Path | None = setting(required=True, metavar="EMB")
    """folder to write"""
    overwrite: bool = False
    """replace an existing EMB"""
    records: list[str] | None = setting(None, metavar="NAME")
    """embed only these records (NAME or DB/NAME; default: all)"""
    window: int | None = None
    """beats per window (default: the run's window)"""
    stride: int | None = None
    """beats between windows (default: window / 2); each beat's embedding comes from the
    window whose centre is nearest to it"""
    batch: int = 64
    """windows per forward pass"""
    device: str = "auto"
    """auto (CUDA when available), cpu, cuda or cuda:N"""
    lead: str | None = None
    """WFDB DATA: lead to use instead of the run's (NAME or NAME,NAME,...)"""
    annotations: str | None = setting(None, metavar="EXT")
    """WFDB DATA: reference annotation extension"""

    def validate(self) -> None:
        for flag, value in (("--window", self.window), ("--stride", self.stride),
                            ("--batch", self.batch)):  # fmt: skip
            if value is not None and value < 1:
                raise HeartlmError(f"{flag} must be >= 1, not {value}")


Config = EmbedConfig


def run(cfg: EmbedConfig) -> int:
    from heartlm.outdir import check_separate, check_writable

    cfg.validate()
    check_writable(cfg.out, cfg.overwrite)
    check_separate(cfg.out, [cfg.run, cfg.data])
    t0 = time.perf_counter()
    tables, tensors, counts = embed(cfg)
    _write(cfg, tables, tensors, counts, time.perf_counter() - t0)
    logger.info("%s: %d beats and %d windows embedded", cfg.out, counts["beats"],
                counts["windows"])  # fmt: skip
    return 0


def _tokens(cfg: EmbedConfig) -> tuple[Any, np.ndarray | None]:
    """DATA as token data (a token folder as it is, WFDB records tokenized like RUN's) and
    each beat's time in its record where the beat store is at hand (`beat_times`)."""
    from heartlm.labelled.lineage import run_lineage
    from heartlm.labelled.tokens import beat_times, is_token_folder, token_folder
    from heartlm.train.data import load_tokens

    lineage, codebook = ({}, None) if is_token_folder(cfg.data) else run_lineage(cfg.run)
    overrides = {"lead": cfg.lead, "annotations": cfg.annotations}
    with token_folder(cfg.data, cfg.run, lineage, overrides, codebook) as folder:
        data = load_tokens(folder)
        times = beat_times(data.meta, Path(folder))
    return data, None if times is None else times.seconds


def embed(cfg: EmbedConfig) -> tuple[dict[str, str], dict[str, Any], dict[str, int]]:
    """(csv tables, tensors, counts) of the embeddings of DATA by RUN's model."""
    import torch

    from heartlm.labelled.predict import embeddings
    from heartlm.labelled.windows import cut_windows, streams_of
    from heartlm.model import load_pretrained
    from heartlm.runtime import pick_device

    model, config = load_pretrained(cfg.run)
    device = pick_device(cfg.device)
    data, seconds = _tokens(cfg)
    want, got = config.get("codebook_hash"), data.meta.get("codebook_hash")
    if want and got and want != got:
        raise HeartlmError(f"tokenized with codebook {got}, the run reads codebook {want}; "
                           "tokenize with --codebook from the run's tokens", cfg.data)  # fmt: skip
    window = cfg.window or min(int(config.get("window") or 128), model.cfg.max_len)
    if window > model.cfg.max_len:
        raise HeartlmError(f"--window {window} is longer than the model's "
                           f"{model.cfg.max_len} positions", cfg.run)  # fmt: skip
    chosen = _records(data, cfg.records)
    empty = [str(data.records[i]) for i in chosen if data.boundaries[i + 1] == data.boundaries[i]]
    if empty:
        logger.warning("%s: %d record(s) hold no beat and get no row: %s", cfg.data, len(empty),
                       ", ".join(empty[:10]) + (", ..." if len(empty) > 10 else ""))  # fmt: skip
    windows = cut_windows(streams_of(data), chosen, window, cfg.stride or max(1, window // 2),
                          task="afib")  # fmt: skip
    beat, beat_h, window_h = embeddings(model, windows, cfg.batch, device)
    tensors = {"beat": torch.from_numpy(beat_h), "window": torch.from_numpy(window_h)}
    tables = {"beats.csv": _beat_table(data, beat, seconds),
              "windows.csv": _window_table(data, windows)}  # fmt: skip
    return tables, tensors, {"beats": len(beat), "windows": len(windows), "window": window}


def _records(data: Any, names: list[str] | None) -> list[int]:
    dbs = [str(r.get("db", "")) for r in data.meta.get("records", [])] or [""] * len(data.records)
    if not names:
        return list(range(len(data.records)))
    keys = [{name, f"{db}/{name}"} for name, db in zip(data.records, dbs, strict=True)]
    missing = sorted(set(names) - set().union(*keys))
    if missing:
        raise HeartlmError(f"--records names records the data does not hold: {missing}")
    return [i for i, k in enumerate(keys) if k & set(names)]


def _beat_table(data: Any, beat: np.ndarray, seconds: np.ndarray | None) -> str:
    from heartlm.ecg.labels import AAMI_CLASSES

    record = np.searchsorted(data.boundaries, beat, side="right") - 1
    aami = np.asarray(data.aami)[beat]
    dbs = [str(r.get("db", "")) for r in data.meta.get("records", [])]
    rows = (
        (i, data.records[r], dbs[r] if r < len(dbs) else "", int(b - data.boundaries[r]),
         "" if seconds is None else f"{seconds[b]:.3f}", AAMI_CLASSES[a] if a >= 0 else "")
        for i, (r, b, a) in enumerate(zip(record.tolist(), beat.tolist(), aami.tolist(),
                                          strict=True))
    )  # fmt: skip
    return csv_text(["row", "record", "db", "beat", "time_s", "label"], rows)


def _window_table(data: Any, windows: Any) -> str:
    names = {1: "AFIB", 0: "not AFIB"}
    labels = windows.window_label.tolist()
    rows = []
    for i, (r, beats) in enumerate(zip(windows.record.tolist(), windows.beat, strict=True)):
        real = beats[beats >= 0]
        first = int(real[0] - data.boundaries[r]) if real.size else 0
        rows.append((i, data.records[r], first, int(real.size), names.get(labels[i], "")))
    return csv_text(["row", "record", "first_beat", "beats", "label"], rows)


def _write(cfg: EmbedConfig, tables: dict[str, str], tensors: dict[str, Any],
           counts: dict[str, int], elapsed: float) -> None:  # fmt: skip
    from heartlm.outdir import atomic_write_text, staged_dir
    from heartlm.runinfo import write_run_json
    from heartlm.settings import to_dict
    from heartlm.tensorfile import save_tensors

    with staged_dir(cfg.out, cfg.overwrite) as stage:
        save_tensors(
            tensors, stage / "embeddings.safetensors", metadata={"format": "heartlm-embeddings"}
        )
        for name, text in tables.items():
            atomic_write_text(stage / name, text)
        write_run_json(stage, "embed", to_dict(cfg), counts=counts, timings={"total": elapsed})
