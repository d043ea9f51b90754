"""`--profile-steps K`: a torch.profiler trace over K steps, reduced to a time breakdown.

Method: the profiler records K steps after a short warm-up. Communication is the
self time of collective kernels/ops (names containing nccl, gloo, c10d, all_reduce,
allreduce, all_gather, reduce_scatter, broadcast); compute is the self time of all
other device kernels (on CPU: all other aten ops). Data wait is the time spent getting
batches as the device saw it (CUDA events around each fetch; host time on CPU); on CUDA
it is taken out of compute, since it is measured on the same stream. Other = step -
compute - comm - data wait, floored at 0 (launch overhead, optimizer bookkeeping,
idle). With DDP, communication overlaps the backward pass, so compute + comm can exceed
the step time; "other" is then 0.
Written to RUN/breakdown.json as seconds per step.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import SupportsFloat

import torch

from heartlm.outdir import atomic_write_text

COMM = re.compile(r"nccl|gloo|c10d|all_?reduce|all_?gather|reduce_?scatter|broadcast", re.I)


class Breakdown:
    def __init__(self, steps: int, first: int, cuda: bool, out_dir: Path | None) -> None:
        self.steps, self.first, self.cuda, self.out_dir = steps, first, cuda, out_dir
        self.prof: torch.profiler.profile | None = None
        self.wait = 0.0
        self.t0 = 0.0

    def begin(self, step: int) -> None:
        if self.steps <= 0 or step != self.first:
            return
        if self.cuda:
            torch.cuda.synchronize()
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.prof = torch.profiler.profile(activities=activities)
        self.prof.__enter__()
        self.t0 = time.perf_counter()

    def end(self, step: int, data_wait_s: SupportsFloat) -> None:
        if self.prof is None:
            return
        self.wait += float(data_wait_s)
        if step != self.first + self.steps - 1:
            return
        if self.cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - self.t0
        self.prof.__exit__(None, None, None)
        comm = compute = 0.0
        for evt in self.prof.key_averages():
            device_side = str(evt.device_type).endswith("CUDA")
            if self.cuda and not device_side:
                continue
            if not self.cuda and not evt.key.startswith(("aten::", "c10d::", "gloo")):
                continue
            t = (evt.self_device_time_total if self.cuda else evt.self_cpu_time_total) / 1e6
            if COMM.search(evt.key):
                comm += t
            else:
                compute += t
        if self.cuda:  # the window-cutting kernels are data work, not model compute
            compute = max(0.0, compute - self.wait)
        k = self.steps
        result = {
            "step_s": wall / k,
            "compute_s": compute / k,
            "comm_s": comm / k,
            "data_wait_s": self.wait / k,
            "other_s": max(0.0, (wall - compute - comm - self.wait) / k),
            "profiled_steps": k,
            "first_step": self.first + 1,
            "method": "torch.profiler self times; see heartlm.train.profile",
        }
        if self.out_dir is not None:
            atomic_write_text(self.out_dir / "breakdown.json", json.dumps(result, indent=2) + "\n")
        self.prof = None
