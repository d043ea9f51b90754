"""Piecewise-linear encoding of the per-beat network's columns (heartlm.model.piecewise)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from heartlm.model.piecewise import PiecewiseLinear, quantile_edges


def test_edges_are_the_columns_quantiles_and_always_strictly_increasing():
    rng = np.random.default_rng(0)
    columns = [rng.normal(size=4000), rng.integers(0, 2, 4000), np.full(4000, 7.0)]
    rows = np.stack([*columns, rng.normal(size=4000)], axis=1)
    rows[::3, 3] = np.nan  # missing values do not place edges
    edges = quantile_edges(rows, 8)
    assert edges.shape == (4, 9)
    assert (np.diff(edges, axis=1) > 0).all()
    finite = rows[:, 3][np.isfinite(rows[:, 3])]
    np.testing.assert_allclose(edges[0], np.quantile(rows[:, 0], np.linspace(0, 1, 9)), rtol=1e-5)
    np.testing.assert_allclose(edges[3], np.quantile(finite, np.linspace(0, 1, 9)), rtol=1e-5)
    assert edges[1, 0] == 0 and edges[1, -1] == 1  # a flag: its two values stay the ends
    np.testing.assert_allclose(edges[2], 7 + np.arange(9) - 4)  # constant: unit steps around it
    with pytest.raises(ValueError, match="at least 2"):
        quantile_edges(rows, 1)
    close = np.r_[np.full(100, 1.0), np.full(100, 1.0 + 1e-9), rng.normal(size=10)][:, None]
    assert (np.diff(quantile_edges(close, 8), axis=1) > 0).all()  # apart in float64 only


def test_the_encoding_fills_the_bins_below_and_reads_the_position_inside_its_own():
    layer = PiecewiseLinear(n_columns=1, n_bins=3, d_embedding=2)
    layer.edges.copy_(torch.tensor([[0.0, 1.0, 2.0, 4.0]]))
    x = torch.tensor([[-1.0], [0.5], [1.5], [3.0], [9.0]])
    expected = [[-1.0, 0, 0], [0.5, 0, 0], [1, 0.5, 0], [1, 1, 0.5], [1, 1, 3.5]]
    torch.testing.assert_close(layer.encode(x)[:, 0], torch.tensor(expected))


def test_the_layer_starts_as_the_identity_and_fits_once():
    layer = PiecewiseLinear(n_columns=3, n_bins=4, d_embedding=5)
    x = torch.randn(2, 7, 3)
    out = layer(x)
    assert out.shape == (2, 7, layer.out_features) == (2, 7, 3 * 6)
    torch.testing.assert_close(out[..., :3], x)
    assert not out[..., 3:].any()  # the bins' layers start at zero and learn the bends
    assert not bool(layer.fitted)
    layer.fit(np.random.default_rng(1).normal(size=(500, 3)))
    assert bool(layer.fitted) and (layer.edges.diff(dim=1) > 0).all()
    with pytest.raises(ValueError, match="rows have 2 columns, not 3"):
        layer.fit(np.zeros((10, 2)))
    with torch.no_grad():
        layer.weight.normal_()
    moved = x.clone()
    moved[..., 0] += 1.0
    changed = (layer(moved) - layer(x))[..., 3:].reshape(2, 7, 3, 5).abs().sum(-1)
    assert changed[..., 0].gt(0).any() and not changed[..., 1:].any()  # each column its own
