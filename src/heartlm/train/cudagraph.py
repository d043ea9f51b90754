"""The whole optimizer step replayed as one CUDA graph (`--cudagraph`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from heartlm.errors import HeartlmError
from heartlm.train.data import BATCH_FIELDS, Batch

GRAPH_WARMUP = 3
"""eager steps (on the capture stream) before the CUDA graph is captured, one process"""
DDP_GRAPH_WARMUP = 11
"""the same under DDP: its reducer rebuilds its buckets and times its first iterations
(host syncs) in the early steps, so the captured step must come after them; PyTorch's CUDA
graphs notes ask for at least 11 DDP-enabled eager iterations before capture"""


def _fields(batch: Batch) -> tuple[torch.Tensor | None, ...]:
    return tuple(getattr(batch, f) for f in BATCH_FIELDS)


def _clone_batch(batch: Batch) -> Batch:
    return Batch(*(None if t is None else t.clone() for t in _fields(batch)))


class GraphedStep:
    """`step_fn(batches) -> (loss, grad_norm)` replayed as one CUDA graph.

    The first `warmup` calls run eagerly on `stream` (they compile and size the workspaces);
    the next call captures the step on that same stream with `.grad` unset, so backward
    allocates the gradients in the graph's pool (under DDP: fills its buckets, which were
    made before), and every later call copies its batches into the static inputs and
    replays. Under DDP the all-reduces are captured with the step, and the DDP module must
    have been built on `stream` too. Nothing in the step may sync with the host or change
    shape.
    """

    def __init__(
        self,
        step_fn: Callable[[list[Batch]], tuple[torch.Tensor, torch.Tensor]],
        zero: Any,
        stream: torch.cuda.Stream,
        warmup: int = GRAPH_WARMUP,
    ) -> None:
        self.step_fn, self.zero, self.stream, self.warmup = step_fn, zero, stream, warmup
        self.calls = self.replays = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: list[Batch] = []
        self.out: tuple[torch.Tensor, torch.Tensor] | None = None

    def __call__(self, batches: list[Batch]) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        if self.graph is None and self.calls <= self.warmup:
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.stream):
                out = self.step_fn(batches)
                self.zero()
            torch.cuda.current_stream().wait_stream(self.stream)
            return out
        if self.graph is None:
            self.static = [_clone_batch(b) for b in batches]
            self.zero()
            torch.cuda.synchronize()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=self.stream):
                self.out = self.step_fn(self.static)
        else:
            for dst, src in zip(self.static, batches, strict=True):
                for d, t in zip(_fields(dst), _fields(src), strict=True):
                    if (d is None) != (t is None):
                        raise HeartlmError("--cudagraph: a batch's valid mask came or went")
                    if d is not None:
                        d.copy_(t, non_blocking=True)
        self.graph.replay()
        self.replays += 1
        assert self.out is not None
        return self.out[0].clone(), self.out[1].clone()

    def release(self, sync: bool = True) -> None:
        """Free the captured graph, after the GPU has finished it (`sync`; not after a
        failure, where a replayed all-reduce may wait for a peer that is gone). Under DDP
        this must come before the process group is torn down: a DDP run that kept the graph
        hung in that teardown (the graph holds the NCCL work it captured)."""
        if self.graph is not None:
            if sync:
                torch.cuda.synchronize()
            self.graph.reset()
        self.graph, self.static, self.out = None, [], None
