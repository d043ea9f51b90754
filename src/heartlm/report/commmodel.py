"""A communication model of data-parallel step time, fitted intra-node, extrapolated to nodes.

Per optimizer step on N = M nodes x G GPUs:

    t(N) = c(N) + ring(G, bytes, B_intra, l_intra) + [M > 1] ring(M, bytes, B_node, l_inter)
    ring(n, bytes, B, l) = 2 (n - 1) / n * bytes / B + 2 (n - 1) * l

c(N) is the compute of one step: the 1-GPU step time under weak scaling (fixed per-GPU
batch) and that time / N under strong scaling (fixed global batch, split N ways).
B_intra and l_intra are *effective* values fitted to the measured 1-node steps, so they
absorb whatever of the all-reduce DDP hides behind the backward pass. Across nodes the
gradient all-reduce is hierarchical (reduce-scatter in the node, all-reduce of 1/G of
the bytes per GPU over the network, all-gather in the node): the G GPUs of a node share
its NICs, so the inter-node term is the ring over M nodes at the node's bandwidth
B_node, and none of it is assumed hidden (a conservative model).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls


def ring_s(n: int, nbytes: float, bandwidth: float, latency: float) -> float:
    """Seconds of a ring all-reduce of `nbytes` over n ranks (bandwidth in bytes/s)."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * latency


def compute_s(t1_step: float, n: int, scaling: str) -> float:
    return t1_step if scaling == "weak" else t1_step / n


@dataclass(frozen=True)
class CommFit:
    """The fitted intra-node model of one configuration (task, window, cpus, scaling)."""

    t1_step_s: float
    grad_bytes: float
    bandwidth: float
    """effective intra-node bytes/s (inf: communication fully hidden)"""
    latency_s: float
    scaling: str
    points: int
    """measured GPU counts > 1 the fit used (0: bandwidth assumed, not fitted)"""


def fit_intra(
    gpus: list[int],
    step_s: list[float],
    grad_bytes: float,
    scaling: str,
    assumed_bandwidth: float,
) -> CommFit:
    """Fit effective bandwidth and latency to measured per-step times of one node.

    Non-negative least squares on the extra time over compute; one multi-GPU point fits
    the bandwidth alone (latency 0); none leaves `assumed_bandwidth` and latency 0.
    """
    by_n = dict(zip(gpus, step_s, strict=True))
    if 1 not in by_n:
        raise ValueError("the model needs the 1-GPU step time")
    t1 = by_n[1]
    ns = sorted(n for n in by_n if n > 1)
    if not ns:
        return CommFit(t1, grad_bytes, assumed_bandwidth, 0.0, scaling, 0)
    extra = np.array([by_n[n] - compute_s(t1, n, scaling) for n in ns])
    a_bw = np.array([2 * (n - 1) / n * grad_bytes for n in ns])
    if len(ns) == 1:
        inv_bw, lat = max(extra[0], 0.0) / a_bw[0], 0.0
    else:
        (inv_bw, lat), _ = nnls(np.column_stack([a_bw, [2 * (n - 1) for n in ns]]), extra)
    bandwidth = 1.0 / inv_bw if inv_bw > 0 else float("inf")
    return CommFit(t1, grad_bytes, bandwidth, float(lat), scaling, len(ns))


def predict_step_s(
    fit: CommFit, nodes: int, gpus_per_node: int, node_bandwidth: float, inter_latency_s: float
) -> float:
    n = nodes * gpus_per_node
    intra = ring_s(gpus_per_node, fit.grad_bytes, fit.bandwidth, fit.latency_s)
    inter = ring_s(nodes, fit.grad_bytes, node_bandwidth, inter_latency_s)
    return compute_s(fit.t1_step_s, n, fit.scaling) + intra + inter


def predict_time_s(
    fit: CommFit,
    steps_1gpu: int,
    nodes: int,
    gpus_per_node: int,
    node_bandwidth: float,
    inter_latency_s: float,
) -> float:
    """T of the fixed workload: weak runs steps/N steps, strong runs all of them."""
    n = nodes * gpus_per_node
    steps = steps_1gpu / n if fit.scaling == "weak" else steps_1gpu
    return steps * predict_step_s(fit, nodes, gpus_per_node, node_bandwidth, inter_latency_s)


def gbps_to_bytes(gbit_per_s: float) -> float:
    return gbit_per_s * 1e9 / 8
