"""Labelled windows: W consecutive beats of one record, with per-beat or per-window labels.

Rules, stated once here and in docs/finetune.md:

- Windows are cut inside one record with a stride; the last window is aligned to the
  record's end so every beat is covered; a record shorter than W becomes one window padded
  with PAD to W (padding is masked out of attention and of every loss and score).
- Beats task: every beat carries its AAMI code (-1 = no reference label, ignored by the
  loss). When windows overlap, each beat is *scored* once, in the window whose centre is
  nearest to it, so it has the most context on both sides.
- AFIB task: a window is AFIB when at least half of its real (non-pad) beats lie in an
  `(AFIB` rhythm episode (`AFIB_RULE`); atrial flutter `(AFL` is not AFIB.
- AFIB in context (`cut_context_windows`): the scored windows are blocks of `block` beats,
  each shown inside a longer window of `context` beats centred on it (shifted to stay in the
  record); only the block is scored and labelled, the rest is context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from heartlm.ecg.labels import RHYTHMS
from heartlm.shards import PAD

AFIB = RHYTHMS.index("AFIB")
UNKNOWN_RHYTHM = RHYTHMS.index("unknown")
AFIB_MIN_FRACTION = 0.5
AFIB_RULE = "a window is AFIB when >= 50 % of its real beats lie in an (AFIB episode"
AFIB_MIN_BEATS = 8
"""`evaluate` calls no window of fewer real beats (a record shorter than that, padded):
seven RR intervals, the shortest window RR-based AF detectors are reported on (Petrenas et
al., Physiol Meas 36(2), 2015: 8 beats)."""
IGNORE = -1


def callable_windows(beats: np.ndarray, scored: int) -> np.ndarray:
    """Which AFIB windows, of `beats` real beats each, get a call: those of at least
    AFIB_MIN_BEATS, or of the whole scored block where blocks are shorter by choice
    (`evaluate --afib-window`); a shorter one is a padded record too short to call."""
    return beats >= min(AFIB_MIN_BEATS, scored)


@dataclass
class Streams:
    """The aligned per-beat streams of a token folder (views, not copies) and record offsets."""

    morph: np.ndarray
    rhythm: np.ndarray
    aami: np.ndarray
    rhythm_label: np.ndarray
    boundaries: np.ndarray  # (n_records + 1,) int64
    features: np.ndarray | None = None  # (n_beats, F) float16


def streams_of(data) -> Streams:
    """The streams of a `heartlm.train.data.TokenData`."""
    return Streams(
        data.morph, data.rhythm, data.aami, data.rhythm_label, data.boundaries, data.features
    )


@dataclass
class Windows:
    """A batch-ready set of windows; every array has n_windows rows."""

    morph: np.ndarray  # (n, W) int64 tokens, PAD where padded
    rhythm: np.ndarray  # (n, W) int64 tokens
    pad: np.ndarray  # (n, W) bool, True = padding
    beat_label: np.ndarray  # (n, W) int64 AAMI code, IGNORE where none
    scored: np.ndarray  # (n, W) bool, True where this window scores the beat
    window_label: np.ndarray  # (n,) int64: 1 AFIB, 0 not (AFIB task), IGNORE otherwise
    record: np.ndarray  # (n,) int64 record index (stream order)
    beat: np.ndarray  # (n, W) int64 global beat index, -1 where padded
    features: np.ndarray | None = None  # (n, W, F) float16, zeros where padded

    def __len__(self) -> int:
        return len(self.record)


def window_starts(n_beats: int, window: int, stride: int) -> np.ndarray:
    """Starts of windows of `window` beats every `stride`, the last one ending at the record end."""
    if n_beats <= window:
        return np.zeros(1, dtype=np.int64)
    starts = np.arange(0, n_beats - window + 1, stride, dtype=np.int64)
    if starts[-1] != n_beats - window:
        starts = np.append(starts, n_beats - window)
    return starts


def scored_positions(starts: np.ndarray, n_beats: int, window: int) -> np.ndarray:
    """(len(starts), window) bool: True where beat start+j is scored by this window, i.e. the
    window's centre is the nearest to that beat."""
    positions = starts[:, None] + np.arange(window)[None, :]
    centres = starts + (min(window, n_beats) - 1) / 2.0
    # Ties go to the earlier window (argmin takes the first), so each beat is scored once.
    owner = np.argmin(np.abs(np.arange(n_beats)[:, None] - centres[None, :]), axis=1)
    valid = positions < n_beats
    clipped = np.minimum(positions, n_beats - 1)
    return valid & (owner[clipped] == np.arange(len(starts))[:, None])


def afib_window_label(rhythm_codes: np.ndarray) -> int:
    """1 when at least AFIB_MIN_FRACTION of the window's real beats are in AFIB, else 0;
    IGNORE when no beat of the window has a known rhythm (nothing to learn or score)."""
    codes = np.asarray(rhythm_codes)
    if len(codes) == 0 or np.all((codes == UNKNOWN_RHYTHM) | (codes < 0)):
        return IGNORE
    return int(np.mean(codes == AFIB) >= AFIB_MIN_FRACTION)


def cut_windows(
    streams: Streams, records: Sequence[int], window: int, stride: int, task: str
) -> Windows:
    """All windows of the given records (indices into `streams.boundaries`)."""
    if window < 1 or stride < 1:
        raise ValueError("--window and the stride must be positive")

    def place(n: int) -> tuple[np.ndarray, np.ndarray]:
        starts = window_starts(n, window, stride)
        return starts, scored_positions(starts, n, window)

    windows = _cut(streams, records, window, place)
    if task == "afib":
        windows.window_label = _afib_labels(streams, windows, ~windows.pad)
    elif task == "beats":
        aami = np.asarray(streams.aami)[np.where(windows.pad, 0, windows.beat)]
        windows.beat_label = np.where(windows.pad, IGNORE, aami).astype(np.int64)
    return windows


def _gather(streams: Streams, beat: np.ndarray) -> Windows:
    """The token and feature rows of windows given by global beat indices (-1 = padding);
    no beat labels, nothing scored, no window labels, record -1: the caller fills those."""
    pad = beat < 0
    safe = np.where(pad, 0, beat)
    features = None
    if streams.features is not None:
        features = np.where(pad[..., None], np.float16(0), np.asarray(streams.features)[safe])
    n = len(beat)
    return Windows(
        morph=np.where(pad, PAD, np.asarray(streams.morph)[safe].astype(np.int64)),
        rhythm=np.where(pad, PAD, np.asarray(streams.rhythm)[safe].astype(np.int64)),
        pad=pad,
        beat_label=np.full(beat.shape, IGNORE, dtype=np.int64),
        scored=np.zeros(beat.shape, dtype=bool),
        window_label=np.full(n, IGNORE, dtype=np.int64),
        record=np.full(n, -1, dtype=np.int64),
        beat=beat,
        features=features,
    )


def cut_context_windows(
    streams: Streams, records: Sequence[int], context: int, block: int
) -> Windows:
    """AFIB windows of `block` beats (non-overlapping, the last aligned to the record's end, as
    `cut_windows` with stride = window), each inside `context` beats centred on it: rows are
    `context` wide, `scored` marks the block, `window_label` is the block's."""
    if not 1 <= block <= context:
        raise ValueError("the scored block must be between 1 beat and the context window")

    def place(n: int) -> tuple[np.ndarray, np.ndarray]:
        blocks = window_starts(n, block, block)
        width = min(block, n)
        starts = np.clip(blocks - (context - width) // 2, 0, max(n - context, 0))
        offset = (blocks - starts)[:, None]
        position = np.arange(context)[None, :]
        return starts, (position >= offset) & (position < offset + width)

    windows = _cut(streams, records, context, place)
    windows.window_label = _afib_labels(streams, windows, windows.scored)
    return windows


def _cut(
    streams: Streams,
    records: Sequence[int],
    width: int,
    place: Callable[[int], tuple[np.ndarray, np.ndarray]],
) -> Windows:
    """Windows `width` beats wide over the records that have beats: `place(n)` gives a record
    of n beats its window starts and their scored positions. Labels are the caller's."""
    rows: list[np.ndarray] = []
    scored: list[np.ndarray] = []
    rec_ids: list[np.ndarray] = []
    for r in records:
        lo, hi = int(streams.boundaries[r]), int(streams.boundaries[r + 1])
        if hi == lo:
            continue
        starts, marks = place(hi - lo)
        idx = lo + starts[:, None] + np.arange(width)[None, :]
        idx[idx >= hi] = -1
        rows.append(idx)
        scored.append(marks)
        rec_ids.append(np.full(len(starts), r, dtype=np.int64))
    if not rows:
        return _empty(width)
    windows = _gather(streams, np.concatenate(rows))
    windows.scored = np.concatenate(scored)
    windows.record = np.concatenate(rec_ids)
    return windows


def _afib_labels(streams: Streams, windows: Windows, counted: np.ndarray) -> np.ndarray:
    """Each window's AFIB label (`afib_window_label`) over its `counted` beats."""
    codes = np.asarray(streams.rhythm_label)[np.where(windows.pad, 0, windows.beat)]
    return np.array(
        [afib_window_label(c[m]) for c, m in zip(codes, counted, strict=True)], dtype=np.int64
    )


def _empty(window: int) -> Windows:
    z2 = np.zeros((0, window), dtype=np.int64)
    return Windows(z2, z2, z2.astype(bool), z2, z2.astype(bool), z2[:, 0], z2[:, 0], z2)


def keep_label_fraction(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """A copy of `labels` in which a seeded `fraction` of the labelled items keep their label.

    The rest become IGNORE: they still feed the encoder as context but give no loss.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError("--label-fraction must be in (0, 1]")
    labels = np.array(labels, dtype=np.int64, copy=True)
    if fraction == 1.0:
        return labels
    labelled = np.flatnonzero(labels >= 0)
    n_keep = max(1, round(fraction * len(labelled))) if len(labelled) else 0
    rng = np.random.default_rng(seed)
    drop = rng.permutation(labelled)[n_keep:]
    labels[drop] = IGNORE
    return labels


def keep_recording_label_fraction(
    labels: np.ndarray,
    boundaries: np.ndarray,
    recordings: Sequence[str],
    fraction: float,
    seed: int,
    whole: Sequence[bool] = (),
) -> np.ndarray:
    """`keep_label_fraction` over whole recordings: the share is drawn over the beats of each
    recording's first record (`boundaries` delimit the records, `recordings` name each one's
    recording), and its other leads keep exactly the same beats' labels, so a lead copy adds
    no labelled beat the share did not draw (`copy_keeps`). Without copies this is
    keep_label_fraction. The records flagged in `whole` (one flag per record; none if empty)
    keep every label, and the share is drawn from the others' (`finetune --keep-labels-of`)."""
    given = np.asarray(labels, dtype=np.int64)
    if fraction == 1.0:
        return given.copy()
    flags = np.asarray(whole, dtype=bool) if len(whole) else np.zeros(len(recordings), bool)
    kept_whole = np.repeat(flags, np.diff(boundaries))
    original = np.where(kept_whole, IGNORE, given)
    labels = original.copy()
    spans = list(zip(boundaries[:-1].tolist(), boundaries[1:].tolist(), strict=True))
    first: dict[str, tuple[int, int]] = {}
    for recording, span in zip(recordings, spans, strict=True):
        first.setdefault(recording, span)
    drawn = np.concatenate([np.arange(a, b) for a, b in first.values()] or [np.zeros(0, int)])
    labels[drawn] = keep_label_fraction(labels[drawn], fraction, seed)
    drawn_kept = labels >= 0  # read at the first records only, which the loop leaves alone
    for recording, (a, b) in zip(recordings, spans, strict=True):
        if (a, b) != first[recording]:
            kept = copy_keeps(original, drawn_kept, first[recording], (a, b))
            labels[a:b] = np.where(kept, labels[a:b], IGNORE)
    return np.where(kept_whole, given, labels)


MAX_EDGE_BEATS = 2
"""Beats by which a lead copy's count may differ from its record's and still be aligned."""


def copy_keeps(
    original: np.ndarray, kept: np.ndarray, first: tuple[int, int], copy: tuple[int, int]
) -> np.ndarray:
    """Which beats of a lead copy (the span `copy`) keep their label: those whose beat in the
    recording's first record (the span `first`) does (`kept`). A copy with a beat or two more
    or fewer (lost at an edge of one lead) is aligned at its start, else at its end, whichever
    first makes the two records' `original` labels agree beat for beat (a record of one class
    throughout aligns at its start); a copy that no alignment fits keeps none."""
    (fa, fb), (a, b) = first, copy
    if fb - fa == b - a:
        return kept[fa:fb].copy()
    out = np.zeros(b - a, dtype=bool)
    n = min(fb - fa, b - a)
    if abs((fb - fa) - (b - a)) > MAX_EDGE_BEATS:
        return out
    for src, dst in ((fa, a), (fb - n, b - n)):
        if np.array_equal(original[src : src + n], original[dst : dst + n]):
            out[dst - a : dst - a + n] = kept[src : src + n]
            break
    return out


def class_weights(
    labels: np.ndarray, n_classes: int, max_weight: float = 50.0, power: float = 1.0
) -> np.ndarray:
    """Class weights (n / (K * count_c)) ** power from the training labels, clipped at
    `max_weight` so a class with a handful of beats cannot dominate the loss. power 1 is the
    fully balanced weighting, 0.5 its square root, 0 no weighting. Classes absent from
    training get weight 0 (they have no loss terms anyway)."""
    counts = np.bincount(labels[labels >= 0], minlength=n_classes).astype(np.float64)
    weights = np.zeros(n_classes)
    present = counts > 0
    weights[present] = (counts[present].sum() / (present.sum() * counts[present])) ** power
    return np.minimum(weights, max_weight)
