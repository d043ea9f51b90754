"""`--ema D`: an exponential moving average of the trained weights, which validation reads
and the run exports.

Own code rather than `torch.optim.swa_utils.AveragedModel`: that class keeps its update count
in a device tensor and compares it on the host at every update (a sync per step), and the
engine's step has none. The count here is the host's step number.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


def ema_decay(decay: float, updates: int) -> float:
    """The decay at update `updates` (1-based): TensorFlow's ExponentialMovingAverage warm-up,
    min(D, (1 + n) / (10 + n)), so that the average forgets its random start within a few
    dozen steps even when D is 0.999 and the run is short (fine-tuning on 1 % of labels)."""
    return min(decay, (1.0 + updates) / (10.0 + updates))


class WeightAverage:
    """The average of `model`'s trained parameters in a copy of it (`module`, on the same
    device). Make it before compile, activation checkpointing or DDP wrap the model: a copy
    made after would call the original's compiled forward. Buffers are copied once (the
    model's are constants)."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay = decay
        self.updates = 0
        self.module = copy.deepcopy(model).eval()
        self.module.requires_grad_(False)
        pairs = [
            (mine, theirs)
            for mine, theirs in zip(self.module.parameters(), model.parameters(), strict=True)
            if theirs.requires_grad
        ]
        self._mine = [m for m, _ in pairs]
        self._theirs = [t.detach() for _, t in pairs]  # views: the optimizer's updates show

    @torch.no_grad()
    def update(self) -> None:
        """Move the average towards the model's weights after one optimizer step."""
        self.updates += 1
        weight = 1.0 - ema_decay(self.decay, self.updates)
        torch._foreach_lerp_(self._mine, self._theirs, weight)

    @torch.no_grad()
    def restart(self, updates: int) -> None:
        """Start the average at the model's current weights, as after `updates` updates (a
        resume from a checkpoint that holds no average)."""
        torch._foreach_copy_(self._mine, self._theirs)
        self.updates = updates

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The averaged weights (sharing storage with `module`: a load into it is in place)."""
        return self.module.state_dict()
