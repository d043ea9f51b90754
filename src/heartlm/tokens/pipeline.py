"""`tokenize`: a beat store becomes a codebook and aligned token shards."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from heartlm.errors import HeartlmError
from heartlm.log import logger, progress
from heartlm.outdir import check_separate, check_writable, staged_dir
from heartlm.runinfo import write_run_json
from heartlm.runtime import pick_device
from heartlm.settings import check_seed, setting
from heartlm.shards import NUM_SPECIAL, UNK
from heartlm.store import BeatStore
from heartlm.tokens import features, rhythm
from heartlm.tokens.codebook import Codebook, assign, train_kmeans
from heartlm.tokens.normalize import Normalization, normalize_beats
from heartlm.tokens.writer import write_tokens

MAX_TOKEN = np.iinfo(np.uint16).max


@dataclass
class TokenizeConfig:
    vocab: int = setting(1024, metavar="K")
    """codebook size K (morphology vocabulary = NUM_SPECIAL + K; 256-8192)"""
    sample: int = setting(200_000, metavar="N")
    """beats drawn (seeded) from the store to learn the codebook"""
    iters: int = setting(25, metavar="N")
    """k-means (Lloyd) iterations at most; stops earlier when assignments stop changing"""
    seed: int = setting(0, metavar="S")
    """seed of sample and k-means"""
    codebook: Path | None = setting(None, metavar="FILE")
    """reuse a codebook: a token folder, its codebook.json or codebook.safetensors"""
    rr_window: int = setting(16, metavar="N")
    """beats in the centred moving mean RR that rhythm bins are relative to"""
    batch: int = setting(65536, metavar="N")
    """beats per assignment batch"""
    device: str = "auto"
    """auto (cuda when available), cpu, cuda or cuda:N"""
    decode: bool = False
    """also write decode/: reconstruction PNG and codebook usage/error report"""
    decode_records: int = setting(4, metavar="N")
    """records in the decode PNG"""
    overwrite: bool = False
    """replace an existing --out"""
    normalization: Normalization = setting(factory=Normalization, cli=False)
    """how beat windows are normalised (saved in the codebook)"""

    def validate(self) -> None:
        if not 2 <= self.vocab <= MAX_TOKEN + 1 - NUM_SPECIAL:
            raise ValueError(
                f"--vocab must be 2 .. {MAX_TOKEN + 1 - NUM_SPECIAL}, got {self.vocab}"
            )
        if self.sample < 1:
            raise ValueError(f"--sample must be positive, got {self.sample}")
        if self.iters < 1:
            raise ValueError(f"--iters must be positive, got {self.iters}")
        if self.rr_window < 2:
            raise ValueError(f"--rr-window must be at least 2, got {self.rr_window}")
        if self.batch < 1:
            raise ValueError(f"--batch must be positive, got {self.batch}")
        if self.decode_records < 1:
            raise ValueError(f"--decode-records must be positive, got {self.decode_records}")
        check_seed(self.seed)
        pick_device(self.device)


def tokenize(store_path: str | Path, out: str | Path, config: TokenizeConfig) -> dict[str, Any]:
    """Tokenize `store_path` into `out` (staged, atomic); return the run summary."""
    config.validate()
    check_writable(out, config.overwrite)
    check_separate(out, [store_path, config.codebook])
    device = pick_device(config.device)
    store = BeatStore(store_path)
    if store.n_beats == 0:
        raise HeartlmError("beat store holds no beats", store.folder)
    boundaries = _boundaries(store)
    timings: dict[str, float] = {}

    t = time.perf_counter()
    learn = config.codebook is None
    if learn:
        book = learn_codebook(store, config, device)
    else:
        book = Codebook.load(config.codebook)
        book.check_compatible(store.fs, store.pre_samples, store.window_samples, config.codebook)
    timings["codebook"] = time.perf_counter() - t

    t = time.perf_counter()
    morph, stats = assign_store(store, book, device, config.batch)
    timings["assign"] = time.perf_counter() - t
    t = time.perf_counter()
    rhythm_tok = rhythm.rhythm_tokens(
        store.table["rr_prev"], store.table["rr_next"], boundaries, config.rr_window
    )
    timings["rhythm"] = time.perf_counter() - t
    t = time.perf_counter()
    raw = beat_features(store, boundaries, morph, stats, book)
    if learn:
        book.space.mean, book.space.std = features.standardization(raw)
    feature_rows = book.space.standardize(raw)
    del raw
    timings["features"] = time.perf_counter() - t

    streams = {
        "morph": morph,
        "rhythm": rhythm_tok,
        "aami": np.asarray(store.table["aami"]),
        "rhythm_label": np.asarray(store.table["rhythm"]),
        "features": feature_rows,
        "boundaries": boundaries,
    }
    records, meta = _records_and_meta(store, book, config)
    counts = {
        "beats": store.n_beats,
        "records": len(store.records),
        "unk_morph": int((morph == UNK).sum()),
        "unk_rhythm": int((rhythm_tok == UNK).sum()),
        "codes_used": int((stats["code_counts"] > 0).sum()),
    }
    summary: dict[str, Any] = {"counts": counts, "codebook_hash": book.content_hash}
    with staged_dir(out, config.overwrite) as stage:
        t = time.perf_counter()
        book.save(stage)
        write_tokens(stage, streams, records, meta)
        timings["write"] = time.perf_counter() - t
        if config.decode:
            from heartlm.tokens.decode import write_decode

            t = time.perf_counter()
            summary["decode"] = write_decode(stage, store, book, config.decode_records, device)
            timings["decode"] = time.perf_counter() - t
        timings["total"] = sum(timings.values())
        summary["timings_s"] = timings
        summary["beats_per_s"] = store.n_beats / max(timings["total"], 1e-9)
        write_run_json(
            stage,
            "tokenize",
            config,
            counts,
            timings,
            extra={"device": str(device), "fit": book.trained_on, "store": str(store.folder)},
        )
    return summary


def _records_and_meta(
    store: BeatStore, book: Codebook, config: TokenizeConfig
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The `records` list and the fields of tokens.json that the writer does not add."""
    records = [
        {"name": r.name, "db": r.db, "lead": r.lead, "start": r.start, "n_beats": r.n_beats}
        for r in store.records
    ]
    meta = {
        "vocab_size": NUM_SPECIAL + book.vocab,
        "rhythm_vocab_size": rhythm.RHYTHM_VOCAB,
        "codebook_size": book.vocab,
        "codebook_hash": book.content_hash,
        "rhythm_bins": {"edges": list(rhythm.RR_EDGES), "per_side": rhythm.N_BINS},
        "rr_window": config.rr_window,
        "features": list(features.FEATURES),
        "fs": store.fs,
        "pre_samples": store.pre_samples,
        "window_samples": store.window_samples,
        "store": os.path.abspath(store.folder),  # where `evaluate` finds the beats' times
    }
    return records, meta


def _boundaries(store: BeatStore) -> np.ndarray:
    b = [0]
    for r in store.records:
        if r.start != b[-1]:
            raise HeartlmError(
                f"record {r.name!r} starts at beat {r.start}, expected {b[-1]}",
                store.folder / "store.json",
            )
        b.append(r.start + r.n_beats)
    if b[-1] != store.n_beats:
        raise HeartlmError(
            f"records hold {b[-1]} beats, n_beats says {store.n_beats}", store.folder / "store.json"
        )
    return np.asarray(b, dtype=np.int64)


def learn_codebook(store: BeatStore, config: TokenizeConfig, device: torch.device) -> Codebook:
    """k-means on a seeded sample of usable, normalised beats."""
    rng = np.random.default_rng(config.seed)
    n = store.n_beats
    idx = np.sort(rng.choice(n, size=min(config.sample, n), replace=False))
    x_NW = torch.from_numpy(np.asarray(store.beats[idx], dtype=np.float32)).to(device)
    xn_NW, _, _, usable_N = normalize_beats(x_NW, config.normalization)
    xn_NW = xn_NW[usable_N]
    if len(xn_NW) < config.vocab:
        where = (
            "usable beats in the store"
            if len(idx) == n
            else f"usable beats of --sample {config.sample}"
        )
        raise HeartlmError(
            f"--vocab {config.vocab} is larger than the {len(xn_NW)} {where}", store.folder
        )
    logger.info(
        "learning %d codes from %d beats on %s (at most %d iterations)",
        config.vocab, len(xn_NW), device, config.iters,
    )  # fmt: skip
    c_KW, fit = train_kmeans(xn_NW, config.vocab, config.iters, config.seed, config.batch)
    fit.update({"store": str(store.folder), "sample": len(xn_NW), "max_iters": config.iters})
    beat_mean, beat_basis, p_mean, p_basis = features.learn_components(
        xn_NW, store.pre_samples, store.fs
    )
    n_features = len(features.FEATURES)
    space = features.FeatureSpace(  # standardisation follows once every beat has its row
        beat_mean, beat_basis, p_mean, p_basis, np.zeros(n_features, np.float32),
        np.ones(n_features, np.float32),
    )  # fmt: skip
    return Codebook(
        centroids=c_KW.float().cpu().numpy(),
        fs=store.fs,
        pre_samples=store.pre_samples,
        window_samples=store.window_samples,
        normalization=config.normalization,
        seed=config.seed,
        trained_on=fit,
        space=space,
    )


def assign_store(
    store: BeatStore, book: Codebook, device: torch.device, batch: int
) -> tuple[np.ndarray, dict[str, Any]]:
    """Morphology token, principal-component scores and baseline of every beat, in batches;
    the next batch is read from the memory-mapped store on a thread while this one is on
    the device. The scores and baselines come back in the stats, for `beat_features`."""
    n = store.n_beats
    c_KW = torch.from_numpy(book.centroids).to(device)
    morph = np.empty(n, dtype=np.uint16)
    n_components = features.BEAT_COMPONENTS + features.P_COMPONENTS
    components = np.empty((n, n_components), dtype=np.float32)
    baseline = np.empty(n, dtype=np.float32)
    counts_K = torch.zeros(book.vocab, dtype=torch.int64, device=device)
    sq_err = torch.zeros((), dtype=torch.float64, device=device)
    starts = range(0, n, batch)
    # Two pinned host buffers: the thread fills one while the other is copied to the GPU.
    # A buffer is refilled two batches later, after the `.cpu()` below has synchronised.
    pinned = (
        [torch.empty((batch, store.window_samples), pin_memory=True) for _ in range(2)]
        if device.type == "cuda"
        else None
    )

    def read(i: int) -> torch.Tensor:
        rows = store.beats[i : i + batch]
        if pinned is None:
            return torch.from_numpy(np.array(rows, dtype=np.float32))
        buf = pinned[(i // batch) % 2][: len(rows)]
        buf.numpy()[:] = rows
        return buf

    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(read, 0)
        for i in progress(starts, total=len(starts), desc="assign", unit="batch"):
            x_BW = pending.result().to(device, non_blocking=True)
            if i + batch < n:
                pending = pool.submit(read, i + batch)
            xn_BW, base_B, _, usable_B = normalize_beats(x_BW, book.normalization)
            code_B, dist_B = assign(xn_BW, c_KW)
            pcs_BC = features.project(xn_BW, book.space, store.pre_samples, store.fs)
            components[i : i + len(code_B)] = pcs_BC.float().cpu().numpy()
            baseline[i : i + len(code_B)] = base_B.float().cpu().numpy()
            counts_K += torch.bincount(code_B[usable_B], minlength=book.vocab)
            sq_err += dist_B[usable_B].double().sum()
            tok_B = torch.where(usable_B, code_B + NUM_SPECIAL, UNK)
            morph[i : i + len(tok_B)] = tok_B.to(torch.int32).cpu().numpy()
    counts = counts_K.cpu().numpy()
    usable = int(counts.sum())
    return morph, {
        "code_counts": counts,
        "usable": usable,
        "mean_sq_err": float(sq_err) / max(usable, 1),
        "components": components,
        "baseline": baseline,
    }


def beat_features(
    store: BeatStore, boundaries: np.ndarray, morph: np.ndarray, stats: dict, book: Codebook
) -> np.ndarray:
    """Raw feature rows of every beat, record by record (threads: the numba kernels release
    the GIL)."""
    raw = np.empty((store.n_beats, len(features.FEATURES)), dtype=np.float32)
    n_codes = NUM_SPECIAL + book.vocab

    def one(r: int) -> None:
        lo, hi = int(boundaries[r]), int(boundaries[r + 1])
        if hi == lo:
            return
        raw[lo:hi] = features.record_features(
            store.beats[lo:hi],
            stats["baseline"][lo:hi],
            stats["components"][lo:hi],
            morph[lo:hi],
            np.asarray(store.table["rr_prev"][lo:hi]),
            np.asarray(store.table["rr_next"][lo:hi]),
            n_codes,
            store.pre_samples,
            store.fs,
        )

    records = range(len(boundaries) - 1)
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
        for _ in progress(pool.map(one, records), total=len(records), desc="features",
                          unit="record"):  # fmt: skip
            pass
    return raw
