"""Token data and windows: load token shards, cut W-beat windows of one record, shard by rank.

The epochs form one stream: epoch e is a permutation of all windows seeded by (seed, e),
global step s takes stream items [s*B, (s+1)*B), rank r takes every world-th of them.
So every window appears exactly once per epoch across ranks, shapes stay static, and the
data position is just the step.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from heartlm.errors import HeartlmError
from heartlm.shards import PAD


@dataclass
class TokenData:
    """Aligned per-beat streams (numpy, host memory) and record boundaries."""

    morph: np.ndarray
    rhythm: np.ndarray
    aami: np.ndarray
    rhythm_label: np.ndarray
    boundaries: np.ndarray
    records: list[str]
    vocab_size: int
    rhythm_vocab_size: int
    meta: dict[str, Any] = field(default_factory=dict)
    features: np.ndarray | None = None
    """(n_beats, n_features) float16 standardised beat features; None: ids only"""

    @property
    def n_features(self) -> int:
        return 0 if self.features is None else int(self.features.shape[1])

    @property
    def n_beats(self) -> int:
        return int(self.boundaries[-1] - self.boundaries[0])

    def shape_columns(self, absolute_only: bool = False) -> Tensor | None:
        """Bool mask of the feature columns that a masked beat hides (None: no features):
        every shape column, or with `absolute_only` those that are not patient-relative."""
        from heartlm.inputs import absolute_columns
        from heartlm.tokens.features import morphology_columns

        if not self.n_features:
            return None
        names = self.meta.get("features", [])
        mask = torch.zeros(self.n_features, dtype=torch.bool)
        mask[absolute_columns(names) if absolute_only else morphology_columns(names)] = True
        return mask

    def record_lengths(self) -> np.ndarray:
        return np.diff(self.boundaries)

    def subset(self, record_ids: np.ndarray | list[int]) -> TokenData:
        """The records `record_ids` (in that order) as a new, contiguous TokenData."""
        ids = np.asarray(record_ids, dtype=np.int64)
        spans = [np.arange(self.boundaries[i], self.boundaries[i + 1]) for i in ids]
        take = np.concatenate(spans) if spans else np.zeros(0, np.int64)
        lengths = self.record_lengths()[ids]
        return TokenData(
            morph=np.asarray(self.morph[take]),
            rhythm=np.asarray(self.rhythm[take]),
            aami=np.asarray(self.aami[take]),
            rhythm_label=np.asarray(self.rhythm_label[take]),
            boundaries=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            records=[self.records[i] for i in ids],
            vocab_size=self.vocab_size,
            rhythm_vocab_size=self.rhythm_vocab_size,
            meta=self.meta,
            features=None if self.features is None else np.asarray(self.features[take]),
        )


def load_tokens(folder: str | Path) -> TokenData:
    """Read a token folder through `heartlm.tokens.TokenSet` into host memory."""
    from heartlm.tokens.tokenset import TokenSet

    ts = TokenSet.load(folder, mmap=False)
    meta = dict(ts.meta)
    records = [str(r.get("name", i)) for i, r in enumerate(ts.records)]
    if not np.isfinite(ts.features).all():
        raise HeartlmError("holds non-finite beat features", ts.folder / "features.bin")
    return TokenData(
        morph=np.asarray(ts.morph).astype(np.int32),
        rhythm=np.asarray(ts.rhythm).astype(np.int32),
        aami=np.asarray(ts.aami),
        rhythm_label=np.asarray(ts.rhythm_label),
        boundaries=np.asarray(ts.boundaries).astype(np.int64),
        records=records,
        vocab_size=ts.vocab_size,
        rhythm_vocab_size=ts.rhythm_vocab_size,
        meta=meta,
        features=np.asarray(ts.features),
    )


def split_records(data: TokenData, val_fraction: float, seed: int) -> tuple[TokenData, TokenData]:
    """Hold out whole recordings (at least one when val_fraction > 0) for validation: a
    record and its lead copies (`recorded_in`) fall on one side."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"--val-fraction must be in [0, 1), not {val_fraction}")
    recording = recordings(data)
    groups = list(dict.fromkeys(recording))
    n = len(groups)
    n_val = 0 if val_fraction == 0 or n < 2 else max(1, round(n * val_fraction))
    order = np.random.default_rng(seed).permutation(n)
    held = {groups[i] for i in order[:n_val]}
    val = np.array([i for i, rec in enumerate(recording) if rec in held], dtype=np.int64)
    train = np.array([i for i, rec in enumerate(recording) if rec not in held], dtype=np.int64)
    return data.subset(train), data.subset(val)


def recordings(data: TokenData) -> list[str]:
    """Each record's recording (`recording_key`: a lead copy's is its source's); folders
    without record metadata: each record its own."""
    from heartlm.ingest.leads import recording_key

    meta = data.meta.get("records")
    if not meta or len(meta) != len(data.records):
        return [f"#{i}" for i in range(len(data.records))]
    return [recording_key(str(m.get("db", "")), m.get("name", i)) for i, m in enumerate(meta)]


@dataclass
class Batch:
    morph: Tensor  # (B, W) int32
    rhythm: Tensor  # (B, W) int32
    aami: Tensor  # (B, W) int64, -1 = unlabelled / padding
    rhythm_label: Tensor  # (B, W) int64, -1 = padding
    valid: Tensor | None  # (B, W) bool; None: every beat is real
    key: Tensor  # (B,) int64: stream position, seeds per-window randomness
    features: Tensor | None = None  # (B, W, F) float16; None: the data has no features

    def to(self, device: torch.device | str) -> Batch:
        move = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        return Batch(*(move(getattr(self, f)) for f in BATCH_FIELDS))


BATCH_FIELDS = ("morph", "rhythm", "aami", "rhythm_label", "valid", "key", "features")


def window_starts(
    boundaries: np.ndarray, window: int, stride: int, pad_short: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Start offsets and valid lengths of every window; none crosses a record boundary."""
    starts, lengths = [], []
    for a, b in itertools.pairwise(boundaries):
        n = int(b - a)
        if n >= window:
            s = np.arange(a, b - window + 1, stride, dtype=np.int64)
            starts.append(s)
            lengths.append(np.full(s.size, window, np.int64))
        elif n > 0 and pad_short:
            starts.append(np.array([a], np.int64))
            lengths.append(np.array([n], np.int64))
    if not starts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(starts), np.concatenate(lengths)


class WindowSampler:
    """Windows of one TokenData, cut on `device` by index arithmetic (the default path)."""

    def __init__(
        self,
        data: TokenData,
        window: int,
        stride: int | None = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
        pad_short: bool = True,
    ) -> None:
        if window < 1:
            raise ValueError(f"--window must be positive, not {window}")
        stride = stride or window
        if stride < 1:
            raise ValueError(f"--stride must be positive, not {stride}")
        self.data, self.window, self.stride, self.seed = data, window, stride, seed
        self.device = torch.device(device)
        self.starts, self.lengths = window_starts(data.boundaries, window, stride, pad_short)
        if self.starts.size == 0 and len(data.records):
            longest = int(data.record_lengths().max())
            name = data.records[int(data.record_lengths().argmax())]
            raise HeartlmError(
                f"--window {window} is longer than every record (longest: {name}, "
                f"{longest} beats); use a smaller --window"
            )
        self.padded = bool(np.any(self.lengths < window))
        dev = self.device
        self._morph = torch.from_numpy(np.append(data.morph, PAD).astype(np.int32)).to(dev)
        self._rhythm = torch.from_numpy(np.append(data.rhythm, PAD).astype(np.int32)).to(dev)
        self._aami = torch.from_numpy(np.append(data.aami, -1).astype(np.int8)).to(dev)
        self._rlabel = torch.from_numpy(np.append(data.rhythm_label, -1).astype(np.int8)).to(dev)
        self._features = None
        if data.features is not None:  # a zero row at the end for padding
            rows = np.concatenate([data.features, np.zeros((1, data.n_features), np.float16)])
            self._features = torch.from_numpy(rows).to(dev)
        self._starts = torch.from_numpy(self.starts).to(dev)
        self._lengths = torch.from_numpy(self.lengths).to(dev)
        self._ar = torch.arange(window, device=dev)
        self._perms: dict[int, Tensor] = {}

    @property
    def n_windows(self) -> int:
        return int(self.starts.size)

    def steps_per_epoch(self, global_batch: int) -> int:
        return -(-self.n_windows // global_batch)

    def permutation(self, epoch: int) -> Tensor:
        if epoch not in self._perms:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._perms = {e: p for e, p in self._perms.items() if e >= epoch - 1}
            perm = torch.randperm(self.n_windows, generator=g)
            if self.device.type == "cuda":  # a pageable copy would stall the step on the host
                perm = perm.pin_memory()
            self._perms[epoch] = perm.to(self.device, non_blocking=True)
        return self._perms[epoch]

    def positions(
        self, step: int, micro: int, micro_batch: int, accum: int, rank: int, world: int
    ) -> tuple[int, int]:
        """First stream position and stride of this rank's micro-batch."""
        first = step * micro_batch * accum * world + rank + world * micro * micro_batch
        return first, world

    def batch(
        self,
        step: int,
        micro: int = 0,
        micro_batch: int = 1,
        accum: int = 1,
        rank: int = 0,
        world: int = 1,
    ) -> Batch:
        first, every = self.positions(step, micro, micro_batch, accum, rank, world)
        last = first + every * (micro_batch - 1)
        n = self.n_windows
        parts = []
        for epoch in range(first // n, last // n + 1):
            lo = max(first, epoch * n)
            lo += (first - lo) % every
            hi = min(last, (epoch + 1) * n - 1)
            if lo <= hi:
                perm = self.permutation(epoch)
                parts.append(perm[lo - epoch * n : hi - epoch * n + 1 : every])
        windows = parts[0] if len(parts) == 1 else torch.cat(parts)
        key = torch.arange(first, last + 1, every, device=self.device)
        return self.cut(windows, key)

    def cut(self, windows: Tensor, key: Tensor, empty: Tensor | None = None) -> Batch:
        """Gather the (B, W) windows `windows`; rows flagged `empty` carry no beats."""
        idx = self._starts[windows][:, None] + self._ar
        valid = None
        if self.padded or empty is not None:
            valid = self._ar < self._lengths[windows][:, None]
            if empty is not None:
                # One visible key keeps attention finite; the row has no targets anyway.
                valid = valid & ~empty[:, None]
                valid[:, 0] |= empty
            idx = torch.where(valid, idx, self._morph.numel() - 1)
            if empty is not None:
                idx[:, 0] = torch.where(empty, self._morph.numel() - 1, idx[:, 0])
        return Batch(
            morph=self._morph[idx],
            rhythm=self._rhythm[idx],
            aami=self._aami[idx].long(),
            rhythm_label=self._rlabel[idx].long(),
            valid=valid,
            key=key,
            features=None if self._features is None else self._features[idx],
        )

    def eval_batches(
        self, batch_size: int, rank: int = 0, world: int = 1, max_batches: int | None = None
    ) -> Iterator[Batch]:
        """Rank r gets windows r, r+world, ... once each, in fixed-size padded batches; every
        rank gets the same number of batches (a rank past the last window: empty ones), so
        all of them take part in the collectives that sum the results."""
        mine = torch.arange(self.n_windows, device=self.device)[rank::world]
        n_batches = -(-self.n_windows // (world * batch_size))
        if max_batches is not None:
            n_batches = min(n_batches, max_batches)
        for i in range(n_batches):
            chunk = mine[i * batch_size : (i + 1) * batch_size]
            short = batch_size - chunk.numel()
            empty = torch.zeros(batch_size, dtype=torch.bool, device=self.device)
            if short:
                chunk = torch.cat([chunk, chunk.new_zeros(short)])
                empty[batch_size - short :] = True
            # Eval keys sit far from training positions so masks are fixed per window.
            yield self.cut(chunk, chunk + (1 << 40), empty)


class WindowDataset(torch.utils.data.Dataset):
    """The same windows for a DataLoader: item p is stream position p, cut on the host."""

    def __init__(self, sampler: WindowSampler) -> None:
        self.s = sampler
        self.epoch, self.perm = -1, np.zeros(0, np.int64)

    def __len__(self) -> int:
        return 1 << 62

    def __getitem__(self, p: int) -> dict[str, np.ndarray]:
        s, n = self.s, self.s.n_windows
        if p // n != self.epoch:
            self.epoch = p // n
            g = torch.Generator().manual_seed(s.seed * 1_000_003 + self.epoch)
            self.perm = torch.randperm(n, generator=g).numpy()
        w = int(self.perm[p % n])
        a, length = int(s.starts[w]), int(s.lengths[w])
        d = s.data
        out = {
            "morph": np.zeros(s.window, np.int32),
            "rhythm": np.zeros(s.window, np.int32),
            "aami": np.full(s.window, -1, np.int64),
            "rhythm_label": np.full(s.window, -1, np.int64),
            "valid": np.arange(s.window) < length,
            "key": np.int64(p),
        }
        if d.features is not None:
            out["features"] = np.zeros((s.window, d.n_features), np.float16)
            out["features"][:length] = d.features[a : a + length]
        out["morph"][:length] = d.morph[a : a + length]
        out["rhythm"][:length] = d.rhythm[a : a + length]
        out["aami"][:length] = d.aami[a : a + length]
        out["rhythm_label"][:length] = d.rhythm_label[a : a + length]
        return out


class _PositionBatches(torch.utils.data.Sampler):
    def __init__(
        self,
        sampler: WindowSampler,
        start_step: int,
        micro_batch: int,
        accum: int,
        rank: int,
        world: int,
    ) -> None:
        self.s, self.start = sampler, start_step
        self.args = (micro_batch, accum, rank, world)

    def __iter__(self) -> Iterator[list[int]]:
        micro_batch, accum, rank, world = self.args
        step = self.start
        while True:
            for m in range(accum):
                first, every = self.s.positions(step, m, micro_batch, accum, rank, world)
                yield list(range(first, first + every * micro_batch, every))
            step += 1


def dataloader_batches(
    sampler: WindowSampler,
    start_step: int,
    micro_batch: int,
    accum: int,
    rank: int,
    world: int,
    workers: int,
    prefetch: int,
    device: torch.device,
) -> Iterator[Batch]:
    """The batches of `WindowSampler.batch` for steps start_step, ... from DataLoader workers."""
    loader = torch.utils.data.DataLoader(
        WindowDataset(sampler),
        batch_sampler=_PositionBatches(sampler, start_step, micro_batch, accum, rank, world),
        num_workers=workers,
        pin_memory=device.type == "cuda",
        prefetch_factor=prefetch if workers > 0 else None,
        persistent_workers=workers > 0,
    )
    for item in loader:
        valid = item["valid"] if sampler.padded else None
        yield Batch(
            item["morph"],
            item["rhythm"],
            item["aami"],
            item["rhythm_label"],
            valid,
            item["key"],
            item.get("features"),
        ).to(device)
