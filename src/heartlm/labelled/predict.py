"""Run a fine-tuned model over labelled windows: per-beat class predictions or AFIB scores."""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from heartlm.finetune.data import Windows
from heartlm.log import progress


def _batches(windows: Windows, batch: int, device: torch.device):
    starts = range(0, len(windows), batch)
    for lo in progress(starts, total=len(starts), desc="evaluate", unit="batch"):
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


@torch.no_grad()
def beat_predictions(
    model: torch.nn.Module, windows: Windows, batch: int, device: torch.device
) -> tuple[np.ndarray, np.ndarray]:
    """(beat index, predicted class) for every beat, each taken from its scoring window."""
    model.eval().to(device)
    beats, classes = [], []
    for lo, hi, morph, rhythm, valid, features in _batches(windows, batch, device):
        with _autocast(device):
            logits = model(morph, rhythm, valid_BT=valid, head="beat", features_BTF=features)
        pred = logits.float().argmax(-1).cpu().numpy()
        scored = windows.scored[lo:hi]
        beats.append(windows.beat[lo:hi][scored])
        classes.append(pred[scored])
    if not beats:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    beat, cls = np.concatenate(beats), np.concatenate(classes)
    order = np.argsort(beat, kind="stable")
    return beat[order], cls[order]


@torch.no_grad()
def afib_scores(
    model: torch.nn.Module, windows: Windows, batch: int, device: torch.device
) -> np.ndarray:
    """Probability of AFIB for every window."""
    model.eval().to(device)
    scores = []
    for _, _, morph, rhythm, valid, features in _batches(windows, batch, device):
        with _autocast(device):
            logits = model(morph, rhythm, valid_BT=valid, head="window", features_BTF=features)
        scores.append(torch.softmax(logits.float(), dim=-1)[:, 1].cpu().numpy())
    return np.concatenate(scores) if scores else np.zeros(0)
