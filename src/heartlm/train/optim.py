"""AdamW and learning-rate schedules (step, cosine, exponential), each with linear warm-up.

The schedule is a pure function of the step, so the scheduler's state is the step itself.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

SCHEDULES = ("cosine", "step", "exponential", "constant")
REFERENCE_BATCH = 256


@dataclass(frozen=True)
class Schedule:
    base_lr: float
    total_steps: int
    warmup_steps: int = 0
    kind: str = "cosine"
    min_lr_ratio: float = 0.1
    step_every: int = 1000
    step_gamma: float = 0.5
    exp_gamma: float = 0.999

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ValueError(f"--schedule must be one of {', '.join(SCHEDULES)}, not {self.kind!r}")
        if self.warmup_steps < 0:
            raise ValueError(f"--warmup must be >= 0, not {self.warmup_steps}")

    def __call__(self, step: int) -> float:
        """Learning rate for optimizer step `step` (0-based)."""
        if step < self.warmup_steps:
            return self.base_lr * (step + 1) / self.warmup_steps
        t = step - self.warmup_steps
        if self.kind == "cosine":
            span = max(1, self.total_steps - self.warmup_steps)
            frac = min(1.0, t / span)
            lo = self.base_lr * self.min_lr_ratio
            return lo + (self.base_lr - lo) * 0.5 * (1 + math.cos(math.pi * frac))
        if self.kind == "step":
            return self.base_lr * self.step_gamma ** (t // self.step_every)
        if self.kind == "exponential":
            return self.base_lr * self.exp_gamma**t
        return self.base_lr


def scaled_lr(lr: float, global_batch: int, scale: bool) -> float:
    """Linear scaling rule: lr * global_batch / 256 when `scale`."""
    return lr * global_batch / REFERENCE_BATCH if scale else lr


def build_adamw(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    fused: bool,
    capturable: bool = False,
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not norms, biases or embeddings).

    `capturable` (CUDA graphs) keeps the step count on the device; pair it with
    `device_lr` so that the learning rate is read from device memory too.
    """
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.ndim >= 2 and "emb" not in name else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=fused or None, capturable=capturable)


def device_lr(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Give all parameter groups one shared fp32 learning-rate tensor on `device`.

    A captured optimizer step then reads the rate that `set_lr` writes before each replay.
    """
    lr = torch.tensor(float(optimizer.param_groups[0]["lr"]), device=device)
    for group in optimizer.param_groups:
        group["lr"] = lr


def host_lr(optimizer: torch.optim.Optimizer) -> None:
    """Undo `device_lr`: plain float rates again (one host sync)."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"] = float(group["lr"])


@contextlib.contextmanager
def float_lr(optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """Float rates inside (checkpoints hold floats either way), the same tensors after.

    A captured CUDA graph reads the device rate at a fixed address, so the very tensor
    objects are put back.
    """
    saved = [group["lr"] for group in optimizer.param_groups]
    host_lr(optimizer)
    try:
        yield
    finally:
        for group, lr in zip(optimizer.param_groups, saved, strict=True):
            group["lr"] = lr


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set every group's rate; a device tensor rate (`device_lr`) is filled in place."""
    done: set[int] = set()
    for group in optimizer.param_groups:
        current = group["lr"]
        if isinstance(current, torch.Tensor):
            if id(current) not in done:
                current.fill_(lr)
                done.add(id(current))
        else:
            group["lr"] = lr
