"""Beat normalisation before the codebook: remove baseline, divide by a robust amplitude."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Normalization:
    """How a beat window is normalised; saved in the codebook so reuse is exact."""

    edge_fraction: float = 0.1
    """Baseline = median of the first and last `edge_fraction` of the window's samples."""
    low_quantile: float = 0.01
    high_quantile: float = 0.99
    """Amplitude = spread between these quantiles of the window (ignores 1-2 sample spikes)."""
    min_amplitude_mv: float = 0.02
    """Beats flatter than this (a lead that fell off) are unusable: UNK."""
    max_amplitude_mv: float = 20.0
    """Beats taller than this (saturation, artefact) are unusable: UNK."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def normalize_beats(
    x_BW: torch.Tensor, norm: Normalization
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (normalised beats, baseline, amplitude, usable) for float beats (B, W) in mV.

    Unusable beats (non-finite samples, flat, extreme amplitude) come back as zeros with
    `usable` False, so they can go through the same matrix products as the rest.
    """
    W = x_BW.shape[1]
    finite_B = torch.isfinite(x_BW).all(dim=1)
    x_BW = torch.where(
        finite_B[:, None], x_BW, torch.zeros((), dtype=x_BW.dtype, device=x_BW.device)
    )
    edge = max(1, round(W * norm.edge_fraction))
    edges_BE = torch.cat([x_BW[:, :edge], x_BW[:, W - edge :]], dim=1)
    baseline_B = edges_BE.median(dim=1).values
    sorted_BW = x_BW.sort(dim=1).values
    lo, hi = round(norm.low_quantile * (W - 1)), round(norm.high_quantile * (W - 1))
    amplitude_B = sorted_BW[:, hi] - sorted_BW[:, lo]
    usable_B = (
        finite_B & (amplitude_B >= norm.min_amplitude_mv) & (amplitude_B <= norm.max_amplitude_mv)
    )
    scale_B = torch.where(usable_B, amplitude_B, torch.ones_like(amplitude_B))
    xn_BW = (x_BW - baseline_B[:, None]) / scale_B[:, None]
    xn_BW = torch.where(usable_B[:, None], xn_BW, torch.zeros_like(xn_BW))
    return xn_BW, baseline_B, amplitude_B, usable_B
