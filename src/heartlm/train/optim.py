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

from heartlm.train.config import SCHEDULES

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


def layer_depth(name: str, n_layers: int) -> int:
    """0 for the input embeddings, i + 1 for transformer block i, n_layers + 1 for the final
    norm and the heads (wrapper prefixes such as `module.` or `_orig_mod.` are ignored).
    `stats_proj` (`--local-stats`) and `beat_mlp` (`--beat-mlp`) count with the heads:
    fine-tuning adds them freshly initialised (or starts the network from `pretrain
    --beat-mlp`'s, which no transformer layer feeds), so they learn at the heads' rate and
    train while `--head-first` holds the pretrained encoder still."""
    parts = name.split(".")
    if "blocks" in parts:
        return int(parts[parts.index("blocks") + 1]) + 1
    if any(p.endswith(("_emb", "feature_proj")) for p in parts):
        return 0
    return n_layers + 1


def build_adamw(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    fused: bool,
    capturable: bool = False,
    layer_decay: float = 1.0,
    n_layers: int = 0,
    heads_apart: bool = False,
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not norms, biases or embeddings).

    `layer_decay` < 1 (fine-tuning) scales the rate of a parameter at `layer_depth` d by
    layer_decay ** (n_layers + 1 - d): the heads learn at the full rate, the blocks below
    more and more slowly, the embeddings slowest, so pretrained features are kept.
    `heads_apart` puts the heads (and final norm) in groups of their own and marks every
    other group `encoder`, so that `set_lr(..., heads_only=True)` can hold the encoder still.
    `capturable` (CUDA graphs) keeps the step count on the device; pair it with
    `device_lr` so that the learning rate is read from device memory too.
    """
    groups: dict[tuple[bool, int], list[nn.Parameter]] = {}
    head = n_layers + 1
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decays = p.ndim >= 2 and "emb" not in name
        depth = layer_depth(name, n_layers)
        if layer_decay == 1.0:  # one rate: only heads held apart get groups of their own
            depth = head if heads_apart and depth == head else 0
        groups.setdefault((decays, depth), []).append(p)
    param_groups = [
        {
            "params": params,
            "weight_decay": weight_decay if decays else 0.0,
            "lr_scale": layer_decay ** (head - depth) if layer_decay != 1.0 else 1.0,
            "encoder": heads_apart and depth != head,
        }
        for (decays, depth), params in sorted(groups.items())
    ]
    return torch.optim.AdamW(
        param_groups, lr=lr, betas=betas, fused=fused or None, capturable=capturable
    )


def device_lr(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Give the parameter groups fp32 learning-rate tensors on `device`, one per rate scale
    (and per `encoder` mark).

    A captured optimizer step then reads the rate that `set_lr` writes before each replay.
    """
    rates: dict[tuple[float, bool], torch.Tensor] = {}
    for group in optimizer.param_groups:
        key = (group.get("lr_scale", 1.0), group.get("encoder", False))
        if key not in rates:
            rates[key] = torch.tensor(float(group["lr"]) * key[0], device=device)
        group["lr"] = rates[key]


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


def set_lr(optimizer: torch.optim.Optimizer, lr: float, heads_only: bool = False) -> None:
    """Set every group's rate (times its `lr_scale`; 0 for the `encoder` groups when
    `heads_only`); a device tensor rate (`device_lr`) is filled in place."""
    done: set[int] = set()
    for group in optimizer.param_groups:
        held = heads_only and group.get("encoder", False)
        current, rate = group["lr"], 0.0 if held else lr * group.get("lr_scale", 1.0)
        if isinstance(current, torch.Tensor):
            if id(current) not in done:
                current.fill_(rate)
                done.add(id(current))
        else:
            group["lr"] = rate
