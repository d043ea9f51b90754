"""Per-step metrics without host syncs: kept on the device, written every `log_every` steps."""

from __future__ import annotations

import contextlib
import resource
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from heartlm.train.distributed import DistEnv, all_reduce_sum
from heartlm.train.flops import mfu_per_gpu
from heartlm.train.metrics import MetricsLogger
from heartlm.train.profile import DATA_SPAN


def _max_mem_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


class DataWait:
    """Seconds a step spent getting its batches, as the device saw them.

    On CUDA: events recorded around each fetch on the current stream, so the span covers the
    device work that cuts windows plus any time the stream sat idle waiting for the host.
    Host timers there would also count launches blocked on a full queue. Resolved lazily
    (`float()`), when the step log syncs anyway, so the step itself stays free of host syncs.
    """

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self.host_s = 0.0

    @contextlib.contextmanager
    def span(self) -> Iterator[None]:
        with torch.profiler.record_function(DATA_SPAN), self._timed():
            yield

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        if self.cuda:
            begin, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            begin.record()
            yield
            end.record()
            self.events.append((begin, end))
        else:
            t = time.perf_counter()
            yield
            self.host_s += time.perf_counter() - t

    def __float__(self) -> float:
        for begin, end in self.events:
            end.synchronize()
            self.host_s += begin.elapsed_time(end) / 1e3
        self.events.clear()
        return self.host_s


class StepLog:
    """Per-step device values, turned into metrics rows at each host sync."""

    def __init__(
        self,
        metrics: MetricsLogger,
        env: DistEnv,
        tokens_per_step: int,
        flops_per_tok: float,
        peak: float,
        batch: int,
        n_windows: int,
    ) -> None:
        self.metrics, self.env = metrics, env
        self.tokens_per_step, self.fpt, self.peak = tokens_per_step, flops_per_tok, peak
        self.batch, self.n_windows = batch, max(1, n_windows)
        self.pending: list[tuple[int, float, torch.Tensor, torch.Tensor, DataWait | float]] = []
        self.run_t0 = self.t0 = time.perf_counter()

    def add(
        self,
        step: int,
        lr: float,
        loss: torch.Tensor,
        grad_norm: torch.Tensor,
        wait_s: DataWait | float,
    ) -> None:
        self.pending.append((step, lr, loss, grad_norm, wait_s))

    def restart_clock(self) -> None:
        self.t0 = time.perf_counter()

    def flush(self, validate: Callable[[], dict[str, float]], stop: bool = False) -> dict[str, Any]:
        """Sync once (one all-reduce of the window's losses and of this rank's `stop`
        request), validate, write the rows. "stop" in the result: any rank asked to stop."""
        n = len(self.pending)
        values = [p[2] for p in self.pending] + [p[3] for p in self.pending]
        values.append(torch.tensor(float(stop), device=values[0].device))
        values = all_reduce_sum(torch.stack(values).float(), self.env) / self.env.world_size
        values = values.tolist()
        now = time.perf_counter()
        step_s = (now - self.t0) / n
        tps = self.tokens_per_step / step_s
        mfu = mfu_per_gpu(self.fpt, tps, self.peak, self.env.world_size)
        val = validate()
        self.t0 = time.perf_counter()  # validation time is not step time
        mem = _max_mem_gib(self.env.device)
        for i, (step, lr, _, _, wait_s) in enumerate(self.pending):
            record = {
                "step": step,
                "loss": values[i],
                "lr": lr,
                "tokens_per_s": tps,
                "mfu": mfu,
                "data_wait_pct": 100.0 * float(wait_s) / step_s,
                "max_mem_gib": mem,
                "grad_norm": values[n + i],
                "step_time_s": step_s,
                "elapsed_s": now - self.run_t0,
                "epoch": step * self.batch / self.n_windows,
                "tokens": step * self.tokens_per_step,
            }
            self.metrics.log(record | (val if i == n - 1 else {}))
        self.metrics.flush()
        self.pending.clear()
        return {"loss": values[n - 1], "tps": tps, "mfu": mfu, "val": val, "stop": values[-1] > 0}
