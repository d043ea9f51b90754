"""A model of data-parallel step time: fitted on one node, extrapolated to a network.

Per optimizer step on N = M nodes x G GPUs:

    t(N) = c(N) + o(N) + max(0, a(N) - w * c(N))
    a(N) = ring(G, bytes, B_intra) + ring(M, bytes, B_net) + 2 (M - 1) l_net
    ring(n, bytes, B) = 2 (n - 1) / n * bytes / B      (B: all-reduce bus bandwidth)

- c(N), compute: the 1-GPU step (weak scaling, fixed per-GPU batch) or it / N (strong).
- a(N), the gradient all-reduce, hierarchical across nodes (reduce-scatter in the node,
  all-reduce over the network, all-gather in the node: the G GPUs share the node's
  network, so the network carries the ring over M nodes at the node's bus bandwidth).
  Bandwidths are all-reduce bus bandwidths as `heartlm.scale.allreduce` measures them
  (B_intra on this node's GPUs; B_net stated, or measured over a socket).
- w * c(N), what DDP hides: each gradient bucket is all-reduced as soon as backward
  produced it, so communication overlaps the backward pass, w = 2/3 of the compute
  (backward costs twice the forward's FLOPs) unless stated; with k micro-batches per step,
  only the last one's backward reduces (DDP's no_sync before it): w = 2/3 / k.
- o(N), the cost of going parallel that is not the all-reduce (bucket copies, hooks,
  waiting for the slowest rank), fitted per GPU count as what the measured 1-node steps
  leave over; for more GPUs than measured, the largest count's.

Nothing here is measured across real nodes: its predictions are a MODEL.
"""

from __future__ import annotations

from dataclasses import dataclass, field

BACKWARD_SHARE = 2 / 3


def ring_s(n: int, nbytes: float, busbw: float) -> float:
    """Seconds of an all-reduce of `nbytes` over n ranks at bus bandwidth `busbw` bytes/s."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / busbw


def compute_s(t1_step: float, n: int, scaling: str) -> float:
    return t1_step if scaling == "weak" else t1_step / n


def exposed_s(allreduce_s: float, compute: float, overlap: float) -> float:
    """The part of the all-reduce that backward cannot hide."""
    return max(0.0, allreduce_s - overlap * compute)


@dataclass(frozen=True)
class CommFit:
    """The model of one configuration (task, window, scaling) fitted on one node."""

    t1_step_s: float
    grad_bytes: float
    scaling: str
    intra_busbw: dict[int, float]
    """all-reduce bus bandwidth (bytes/s) among G GPUs of the node, per G"""
    overlap: float = BACKWARD_SHARE
    overhead_s: dict[int, float] = field(default_factory=dict)
    """o(G): measured step minus the model's compute and exposed all-reduce, per G > 1"""

    @property
    def points(self) -> int:
        """Measured GPU counts > 1 the fit used."""
        return len(self.overhead_s)

    def overhead(self, n: int) -> float:
        """o for n GPUs in all: that of the most GPUs measured up to n (the fewest
        measured when n is below them; 0 on one GPU)."""
        if n <= 1 or not self.overhead_s:
            return 0.0
        known = [g for g in self.overhead_s if g <= n] or [min(self.overhead_s)]
        return self.overhead_s[max(known)]

    def busbw(self, g: int) -> float:
        known = [n for n in self.intra_busbw if n <= g] or sorted(self.intra_busbw)
        return self.intra_busbw[max(known)]


def fit(
    gpus: list[int],
    step_s: list[float],
    grad_bytes: float,
    scaling: str,
    intra_busbw: dict[int, float],
    overlap: float = BACKWARD_SHARE,
) -> CommFit:
    """c from the 1-GPU step, o(G) from each measured G > 1 of one node."""
    by_n = dict(zip(gpus, step_s, strict=True))
    if 1 not in by_n:
        raise ValueError("the model needs the 1-GPU step time")
    base = CommFit(by_n[1], grad_bytes, scaling, intra_busbw, overlap)
    overhead = {}
    for n in sorted(g for g in by_n if g > 1):
        c = compute_s(base.t1_step_s, n, scaling)
        a = ring_s(n, grad_bytes, base.busbw(n))
        overhead[n] = max(0.0, by_n[n] - c - exposed_s(a, c, overlap))
    return CommFit(base.t1_step_s, grad_bytes, scaling, intra_busbw, overlap, overhead)


def predict_step_s(
    fit: CommFit, nodes: int, gpus_per_node: int, net_busbw: float, net_latency_s: float = 0.0
) -> float:
    """Step time on `nodes` x `gpus_per_node` GPUs over a network of bus bandwidth
    `net_busbw` bytes/s and per-hop latency `net_latency_s`."""
    n = nodes * gpus_per_node
    c = compute_s(fit.t1_step_s, n, fit.scaling)
    a = ring_s(gpus_per_node, fit.grad_bytes, fit.busbw(gpus_per_node))
    if nodes > 1:
        a += ring_s(nodes, fit.grad_bytes, net_busbw) + 2 * (nodes - 1) * net_latency_s
    return c + fit.overhead(n) + exposed_s(a, c, fit.overlap)


def predict_flat_step_s(fit: CommFit, n: int, busbw: float) -> float:
    """Step time when every one of n ranks all-reduces over one path of bus bandwidth
    `busbw` (NCCL kept off NVLink and shared memory: the emulated second node)."""
    c = compute_s(fit.t1_step_s, n, fit.scaling)
    return c + fit.overhead(n) + exposed_s(ring_s(n, fit.grad_bytes, busbw), c, fit.overlap)


def steps_at(fit: CommFit, steps_1gpu: int, n: int) -> float:
    """Steps of the fixed workload on n GPUs: weak runs steps / N, strong all of them."""
    return steps_1gpu / n if fit.scaling == "weak" else steps_1gpu


def gbps_to_bytes(gbit_per_s: float) -> float:
    return gbit_per_s * 1e9 / 8
