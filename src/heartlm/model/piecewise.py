"""Piecewise-linear encoding of numeric columns over quantile bins (Gorishniy et al., "On
Embeddings for Numerical Features in Tabular Deep Learning", 2022).

Each column x becomes n_bins components: bin j reads (x - e_j) / (e_{j+1} - e_j) clamped to
[0, 1] (the first bin open below, the last open above), so a layer over them draws a
piecewise-linear function of x with a knot at each edge, where a tree would split. The
edges are quantiles of the training rows, fitted once before training and kept with the
weights.

`rtdl_num_embeddings.PiecewiseLinearEmbeddings` computes the same encoding, but its state
depends on the data it was built from (how many distinct edges each column has decides its
buffers' shapes and which of them exist), so a model could not be rebuilt from its config
before its weights are read; here every column has exactly n_bins bins.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

FIT_ROWS = 262_144
"""rows drawn (seeded) from the training rows to place the edges"""


def quantile_edges(rows_NC: np.ndarray, n_bins: int, seed: int = 0) -> np.ndarray:
    """(C, n_bins + 1) strictly increasing edges per column: the column's quantiles at
    0, 1/n_bins, ..., 1 over the finite values of `rows_NC`; where ties leave fewer distinct
    quantiles (a flag, a clipped column), the widest gaps are split until there are enough,
    and a constant (or empty) column gets unit-spaced edges around its value."""
    if n_bins < 2:
        raise ValueError(f"n_bins must be at least 2, not {n_bins}")
    rows = np.asarray(rows_NC, dtype=np.float64)
    if len(rows) > FIT_ROWS:
        rows = rows[np.random.default_rng(seed).choice(len(rows), FIT_ROWS, replace=False)]
    levels = np.linspace(0.0, 1.0, n_bins + 1)
    edges = np.empty((rows.shape[1], n_bins + 1))
    for j in range(rows.shape[1]):
        known = rows[:, j][np.isfinite(rows[:, j])]
        distinct = np.unique(np.quantile(known, levels)) if known.size else np.zeros(1)
        if distinct.size == 1:
            edges[j] = distinct[0] + np.arange(n_bins + 1) - n_bins / 2
            continue
        while distinct.size < n_bins + 1:
            k = int(np.argmax(np.diff(distinct)))
            distinct = np.insert(distinct, k + 1, (distinct[k] + distinct[k + 1]) / 2)
        edges[j] = distinct
    edges32 = edges.astype(np.float32)
    for k in range(1, n_bins + 1):  # edges apart in float64 may meet in float32
        edges32[:, k] = np.maximum(
            edges32[:, k], np.nextafter(edges32[:, k - 1], np.float32(np.inf))
        )
    return edges32


class PiecewiseLinear(nn.Module):
    """(..., C) -> (..., C + C * d_embedding): the columns themselves, then each column's
    piecewise-linear encoding mapped by a layer of its own to d_embedding values. Those
    layers start at zero, so the module starts as the identity on its input and learns the
    bends (version B of rtdl_num_embeddings)."""

    def __init__(self, n_columns: int, n_bins: int, d_embedding: int) -> None:
        super().__init__()
        if n_bins < 2:
            raise ValueError(f"n_bins must be at least 2, not {n_bins}")
        self.register_buffer("edges", torch.linspace(0.0, 1.0, n_bins + 1).repeat(n_columns, 1))
        self.register_buffer("fitted", torch.tensor(False))
        self.weight = nn.Parameter(torch.zeros(n_columns, n_bins, d_embedding))
        self.bias = nn.Parameter(torch.zeros(n_columns, d_embedding))

    @property
    def out_features(self) -> int:
        n_columns, _, d_embedding = self.weight.shape
        return n_columns * (1 + d_embedding)

    def fit(self, rows_NC: np.ndarray, seed: int = 0) -> None:
        """Place the edges at the quantiles of the training rows (`quantile_edges`)."""
        edges = quantile_edges(rows_NC, self.weight.shape[1], seed)
        if edges.shape != tuple(self.edges.shape):
            raise ValueError(f"rows have {edges.shape[0]} columns, not {self.edges.shape[0]}")
        self.edges.copy_(torch.from_numpy(edges))
        self.fitted.fill_(True)

    def encode(self, x: Tensor) -> Tensor:
        """(..., C) -> (..., C, n_bins) in fp32: the bin an x falls in reads its position
        within it, the bins below read 1 and those above 0."""
        left, right = self.edges[:, :-1], self.edges[:, 1:]
        r = (x.float()[..., None] - left) / (right - left)
        return torch.cat(
            [r[..., :1].clamp(max=1.0), r[..., 1:-1].clamp(0.0, 1.0), r[..., -1:].clamp(min=0.0)],
            dim=-1,
        )

    def forward(self, x: Tensor) -> Tensor:
        bins = self.encode(x).to(self.weight.dtype)
        encoded = torch.einsum("...cb,cbd->...cd", bins, self.weight)
        embedded = (encoded + self.bias).flatten(-2)
        return torch.cat([x.to(embedded.dtype), embedded], dim=-1)
