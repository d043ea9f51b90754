"""A tiny token folder made through heartlm's own writer, and the flags of a tiny run: the
shared inputs of the fault, settings and embedding tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from heartlm.ecg.labels import RHYTHMS
from heartlm.shards import NUM_SPECIAL
from heartlm.tokens.codebook import Codebook
from heartlm.tokens.features import FeatureSpace
from heartlm.tokens.normalize import Normalization
from heartlm.tokens.writer import write_tokens

VOCAB = NUM_SPECIAL + 27
N_RECORDS, BEATS = 8, 120
AFIB, NSR = RHYTHMS.index("AFIB"), RHYTHMS.index("N")
TINY = (
    "--preset", "tiny", "--window", "16", "--batch", "8", "--warmup", "1", "--lr", "3e-3",
    "--log-every", "1", "--val-every", "0", "--device", "cpu", "--precision", "fp32",
    "--seed", "3",
)  # fmt: skip


def make_tokens(folder: Path, afib: bool = True, aami_code: int | None = None) -> Path:
    """A token folder through heartlm's own writer: random tokens, AAMI labels, half of the
    records in AFIB (or none), and a codebook so fine-tuned runs are self-contained."""
    rng = np.random.default_rng(0)
    n = N_RECORDS * BEATS
    rhythm_label = np.full(n, NSR, np.int8)
    if afib:
        rhythm_label[: n // 2] = AFIB
    aami = rng.integers(0, 5, n).astype(np.int8)
    if aami_code is not None:
        aami[7] = aami_code
    folder.mkdir(parents=True)
    one = np.ones(1, np.float32)
    book = Codebook(
        centroids=rng.standard_normal((VOCAB - NUM_SPECIAL, 8)).astype(np.float32),
        fs=360.0, pre_samples=3, window_samples=8, normalization=Normalization(), seed=0,
        trained_on={}, space=FeatureSpace(one, one, one, one, np.zeros(3, np.float32),
                                          np.ones(3, np.float32)),
    )  # fmt: skip
    book.save(folder)
    streams = {
        "morph": rng.integers(NUM_SPECIAL, VOCAB, n).astype(np.uint16),
        "rhythm": rng.integers(NUM_SPECIAL, NUM_SPECIAL + 4, n).astype(np.uint16),
        "aami": aami,
        "rhythm_label": rhythm_label,
        "features": rng.standard_normal((n, 3)).astype(np.float16),
        "boundaries": np.arange(0, n + 1, BEATS, dtype=np.int64),
    }
    records = [
        {"name": f"r{i}", "db": "synth", "start": i * BEATS, "n_beats": BEATS}
        for i in range(N_RECORDS)
    ]
    meta = {"vocab_size": VOCAB, "rhythm_vocab_size": NUM_SPECIAL + 4, "fs": 360.0,
            "window_samples": 8, "codebook_hash": book.content_hash,
            "features": ["beat_pc0", "qrs_corr", "rr_prev_local"]}  # fmt: skip
    write_tokens(folder, streams, records, meta)
    return folder
