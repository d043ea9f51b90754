"""Run a model over windows: per-beat class predictions, AFIB scores, or embeddings."""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from heartlm.labelled.offsets import offset_classes
from heartlm.labelled.windows import Windows
from heartlm.log import progress
from heartlm.model.hlm import valid_mean


def _batches(windows: Windows, batch: int, device: torch.device, desc: str = "evaluate"):
    starts = range(0, len(windows), batch)
    for lo in progress(starts, total=len(starts), desc=desc, unit="batch"):
        hi = min(lo + batch, len(windows))
        morph = torch.from_numpy(windows.morph[lo:hi]).to(device)
        rhythm = torch.from_numpy(windows.rhythm[lo:hi]).to(device)
        pad = windows.pad[lo:hi]
        valid = torch.from_numpy(~pad).to(device) if pad.any() else None
        features = None
        if windows.features is not None:
            features = torch.from_numpy(windows.features[lo:hi]).to(device)
        yield lo, hi, morph, rhythm, valid, features


def _autocast(device: torch.device):
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def beat_logits(
    model: torch.nn.Module,
    morph: torch.Tensor,
    rhythm: torch.Tensor,
    valid: torch.Tensor | None,
    features: torch.Tensor | None,
    mlp_share: float | np.ndarray | None = None,
) -> torch.Tensor:
    """The beat head's logits; with `mlp_share` S (a model with a per-beat network; one share,
    or (C,) one per class), 2 (1 - S) x the transformer's own plus 2 S x the per-beat network's:
    0.5 is the sum the model was trained as, 0 the transformer alone, 1 the network alone."""
    if mlp_share is None:
        return model(morph, rhythm, valid_BT=valid, head="beat", features_BTF=features)
    encoder, network = model(morph, rhythm, valid_BT=valid, head="beat_parts",
                             features_BTF=features)  # fmt: skip
    # in float32: under bf16 autocast a share such as 0.3 would be rounded to 0.30078
    share = torch.as_tensor(mlp_share, dtype=torch.float32, device=encoder.device)
    return 2 * (1 - share) * encoder.float() + 2 * share * network.float()


@torch.no_grad()
def beat_probabilities(
    model: torch.nn.Module,
    windows: Windows,
    batch: int,
    device: torch.device,
    mlp_share: float | np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(beat index, (beats, C) class probabilities) for every beat, each from its scoring
    window (`mlp_share`: `beat_logits`)."""
    model.eval().to(device)
    beats, probs = [], []
    for lo, hi, morph, rhythm, valid, features in _batches(windows, batch, device):
        with _autocast(device):
            logits = beat_logits(model, morph, rhythm, valid, features, mlp_share)
        prob = torch.softmax(logits.float(), dim=-1).cpu().numpy()
        scored = windows.scored[lo:hi]
        beats.append(windows.beat[lo:hi][scored])
        probs.append(prob[scored])
    if not beats:
        return np.zeros(0, np.int64), np.zeros((0, 0))
    beat, prob = np.concatenate(beats), np.concatenate(probs)
    order = np.argsort(beat, kind="stable")
    return beat[order], prob[order]


def predicted_classes(prob: np.ndarray) -> np.ndarray:
    """Each beat's most probable class from its (beats, C) probabilities (none for no beats)."""
    return offset_classes(prob)


def beat_predictions(
    model: torch.nn.Module, windows: Windows, batch: int, device: torch.device
) -> tuple[np.ndarray, np.ndarray]:
    """(beat index, predicted class) for every beat, each taken from its scoring window."""
    beat, prob = beat_probabilities(model, windows, batch, device)
    return beat, predicted_classes(prob)


def centre_weights(window: int) -> np.ndarray:
    """(window,) triangular weights, highest at the window's centre and never zero: a beat's
    vote from a window counts more the more context it has there on both sides."""
    position = np.arange(window)
    return 1.0 - np.abs(position - (window - 1) / 2.0) / (window / 2.0 + 1.0)


@torch.no_grad()
def averaged_beat_outputs(
    model: torch.nn.Module,
    windows: Windows,
    batch: int,
    device: torch.device,
    head: str = "beat",
    probabilities: bool = True,
    mlp_share: float | np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(beat index, (beats, C) outputs) for every beat covered by `windows`: the `head`'s
    class probabilities (`probabilities`) or logits from every window that holds the beat,
    averaged with `centre_weights` (head "beat" with `mlp_share`: `beat_logits`)."""
    if mlp_share is not None and head != "beat":
        raise ValueError(f"mlp_share is for head 'beat', not {head!r}")
    model.eval().to(device)
    covered = windows.beat[~windows.pad]
    if covered.size == 0:
        return np.zeros(0, np.int64), np.zeros((0, 0))
    beat = np.unique(covered)
    weight = centre_weights(windows.beat.shape[1])
    total, weights = None, np.zeros(len(beat))
    for lo, hi, morph, rhythm, valid, features in _batches(windows, batch, device):
        with _autocast(device):
            if head == "beat":
                logits = beat_logits(model, morph, rhythm, valid, features, mlp_share)
            else:
                logits = model(morph, rhythm, valid_BT=valid, head=head, features_BTF=features)
        out = logits.float()
        out = (torch.softmax(out, dim=-1) if probabilities else out).cpu().numpy()
        if total is None:
            total = np.zeros((len(beat), out.shape[-1]))
        real = ~windows.pad[lo:hi]
        rows = np.searchsorted(beat, windows.beat[lo:hi][real])
        w = np.broadcast_to(weight, real.shape)[real]
        np.add.at(total, rows, out[real] * w[:, None])
        np.add.at(weights, rows, w)
    return beat, total / weights[:, None]


def block_afib_scores(
    blocks: Windows, members: np.ndarray, beat: np.ndarray, logits: np.ndarray
) -> np.ndarray:
    """Probability of AFIB for every window of `blocks`: the softmax of the mean, over the
    window's `members` (a (windows, width) mask: its scored block, or its real beats), of their
    per-beat `logits`, given for the sorted global beat indices `beat`; as `afib_scores` pools
    one window's own logits."""
    if len(blocks) == 0:
        return np.zeros(0)
    row = np.broadcast_to(np.arange(len(blocks))[:, None], members.shape)[members]
    wanted = blocks.beat[members]
    at = np.searchsorted(beat, wanted)
    if wanted.size and (
        len(beat) == 0 or not np.array_equal(beat[np.minimum(at, len(beat) - 1)], wanted)
    ):
        raise ValueError("a scored beat has no averaged logits")
    summed = np.zeros((len(blocks), logits.shape[1]))
    np.add.at(summed, row, logits[at])
    mean = summed / np.maximum(members.sum(1), 1)[:, None]
    return torch.softmax(torch.from_numpy(mean), dim=-1)[:, 1].numpy()


@torch.no_grad()
def afib_scores(
    model: torch.nn.Module,
    windows: Windows,
    batch: int,
    device: torch.device,
    scored_block: bool = False,
) -> np.ndarray:
    """Probability of AFIB for every window; with `scored_block` (windows from
    `cut_context_windows`), of the scored block inside each: the window head on the mean of
    the block's beats, which the whole window's beats give context to."""
    model.eval().to(device)
    scores = []
    head = "window_beats" if scored_block else "window"
    for lo, hi, morph, rhythm, valid, features in _batches(windows, batch, device):
        with _autocast(device):
            logits = model(morph, rhythm, valid_BT=valid, head=head, features_BTF=features)
        if scored_block:
            block = torch.from_numpy(windows.scored[lo:hi]).to(device)
            logits = valid_mean(logits.float(), block)
        scores.append(torch.softmax(logits.float(), dim=-1)[:, 1].cpu().numpy())
    return np.concatenate(scores) if scores else np.zeros(0)


@torch.no_grad()
def embeddings(
    model: torch.nn.Module, windows: Windows, batch: int, device: torch.device
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(beat index, per-beat embeddings (n_beats, D), per-window embeddings (n_windows, D)):
    the final-norm hidden states, float32. A beat's comes from its scoring window (the one
    whose centre is nearest); a window's is the mean over its real beats, or its CLS state
    when the model has one."""
    model.eval().to(device)
    cls = bool(getattr(model.cfg, "cls_token", False))
    beats, beat_h, window_h = [], [], []
    for lo, hi, morph, rhythm, valid, features in _batches(windows, batch, device, "embed"):
        with _autocast(device):
            h = model(morph, rhythm, valid_BT=valid, head="hidden", features_BTF=features)
        h = h.float()
        if cls:
            window_h.append(h[:, 0].cpu().numpy())
            h = h[:, 1:]
        else:
            real = torch.from_numpy(~windows.pad[lo:hi]).to(device)[..., None].float()
            window_h.append(((h * real).sum(1) / real.sum(1).clamp_min(1.0)).cpu().numpy())
        scored = windows.scored[lo:hi]
        beats.append(windows.beat[lo:hi][scored])
        beat_h.append(h.cpu().numpy()[scored])
    width = int(getattr(model.cfg, "d_model", 0))
    if not beats:
        return np.zeros(0, np.int64), np.zeros((0, width), np.float32), np.zeros((0, width))
    beat, emb = np.concatenate(beats), np.concatenate(beat_h)
    order = np.argsort(beat, kind="stable")
    return beat[order], emb[order], np.concatenate(window_h)
