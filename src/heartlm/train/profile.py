"""`--profile-steps K`: K steps under torch.profiler, saved as a trace and reduced to a
breakdown of step time into exclusive parts.

The trace is `RUN/profile/rank0.pt.trace.json` (Chrome trace format: it opens in
ui.perfetto.dev, chrome://tracing, and TensorBoard's profiler plugin with
`--logdir RUN`). The breakdown (`RUN/breakdown.json`, seconds per step) is computed from
that trace on one timeline, so its parts cannot overlap:

- the window is the span of the K `heartlm::step` annotations (the device is synchronised
  at both ends, so all of the steps' device work lies inside it);
- busy intervals: device kernels, copies and sets on CUDA; on CPU, the aten / c10d / gloo
  ops of every thread;
- communication (M): collectives (names with nccl, gloo, c10d, all_reduce, ...);
  data (D): device work launched inside a `heartlm::data` span (cutting windows), plus the
  time such a span runs on the host while the device has nothing to do; compute (C): the
  rest of the busy intervals;
- data_wait = |D|, compute = |C \\ D|, comm (exposed) = |M \\ (C ∪ D)|,
  other = window - |C ∪ D ∪ M| (launch gaps, host work the device waited for, idle);
  these four sum to the step. comm_overlapped = |M ∩ (C ∪ D)| is the communication hidden
  behind other work (DDP's all-reduce during backward), reported beside them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, SupportsFloat

import torch

from heartlm.errors import HeartlmError
from heartlm.outdir import atomic_write_text

COMM = re.compile(
    r"nccl|gloo|c10d|record_param_comms|all_?reduce|all_?gather|reduce_?scatter|broadcast", re.I
)
STEP_SPAN = "heartlm::step"
DATA_SPAN = "heartlm::data"
TRACE_NAME = "rank0.pt.trace.json"
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
PARTS = ("compute_s", "comm_exposed_s", "data_wait_s", "other_s")
PROFILE_AFTER = 5
"""steps a run takes before its profiler window opens (compile and allocator warm-up), or
fewer when the run is too short for them and the window"""

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same points."""
    merged: list[Interval] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def length(intervals: Sequence[Interval]) -> float:
    return sum(b - a for a, b in union(intervals))


def intersect(xs: Sequence[Interval], ys: Sequence[Interval]) -> list[Interval]:
    xs, ys = union(xs), union(ys)
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if a < b:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(xs: Sequence[Interval], ys: Sequence[Interval]) -> list[Interval]:
    """Points of xs not in ys."""
    out = []
    ys = union(ys)
    for a, b in union(xs):
        start = a
        for c, d in ys:
            if d <= start or c >= b:
                continue
            if c > start:
                out.append((start, c))
            start = max(start, d)
        if start < b:
            out.append((start, b))
    return out


def _span(e: dict[str, Any]) -> Interval:
    return float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))


def _host_op(e: dict[str, Any]) -> bool:
    return e.get("cat") == "cpu_op" or (
        e.get("cat") == "user_annotation" and COMM.search(e.get("name", "")) is not None
    )


def breakdown_from_trace(events: list[dict[str, Any]], steps: int) -> dict[str, float]:
    """Seconds per step in exclusive parts (see the module docstring) from Chrome-trace
    events (`ts`, `dur` in microseconds) covering `steps` annotated steps."""
    spans = [e for e in events if e.get("ph") == "X" and "ts" in e]
    step_spans = [
        _span(e) for e in spans if e.get("name") == STEP_SPAN and e.get("cat") == "user_annotation"
    ]
    if not step_spans or steps < 1:
        raise HeartlmError(f"the profiler trace holds no {STEP_SPAN} span")
    window = [(min(a for a, _ in step_spans), max(b for _, b in step_spans))]
    host_data = union(
        _span(e) for e in spans if e.get("name") == DATA_SPAN and e.get("cat") == "user_annotation"
    )
    device = [e for e in spans if e.get("cat") in DEVICE_CATS]
    if device:
        host_calls = [e for e in spans if e.get("cat") in ("cuda_runtime", "cuda_driver")]
        launches = {
            e["args"]["correlation"]: float(e["ts"])
            for e in host_calls
            if "correlation" in e.get("args", {})
        }
        comm, compute, data_dev = [], [], []
        for e in device:
            launched = launches.get(e.get("args", {}).get("correlation"))
            if COMM.search(e.get("name", "")):
                comm.append(_span(e))
            elif launched is not None and intersect([(launched, launched + 1e-3)], host_data):
                data_dev.append(_span(e))
            else:
                compute.append(_span(e))
        busy = union([*comm, *compute, *data_dev])
        data = union([*data_dev, *subtract(host_data, busy)])
    else:
        comm, compute = _host_busy(spans)
        data = host_data
    data, compute, comm = (intersect(x, window) for x in (data, compute, comm))
    work = union([*compute, *data])
    total = window[0][1] - window[0][0]
    seconds = {
        "step_s": total,
        "compute_s": length(subtract(compute, data)),
        "comm_exposed_s": length(subtract(comm, work)),
        "data_wait_s": length(data),
        "comm_overlapped_s": length(intersect(comm, work)),
    }
    seconds["other_s"] = total - length([*work, *comm])
    return {k: v / 1e6 / steps for k, v in seconds.items()}


def _host_busy(spans: list[dict[str, Any]]) -> tuple[list[Interval], list[Interval]]:
    """(communication, compute) intervals of host ops: on each thread, time inside a
    collective is communication, time inside any other op is compute."""
    comm: list[Interval] = []
    compute: list[Interval] = []
    threads: dict[Any, list[dict[str, Any]]] = {}
    for e in spans:
        if _host_op(e):
            threads.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for ops in threads.values():
        on_thread = union(_span(e) for e in ops if COMM.search(e.get("name", "")))
        comm += on_thread
        compute += subtract([_span(e) for e in ops], on_thread)
    return union(comm), union(compute)


class Breakdown:
    """Profiles steps `first` .. `first + steps - 1`; the rank with `out_dir` writes the
    trace and breakdown.json."""

    def __init__(self, steps: int, first: int, cuda: bool, out_dir: Path | None) -> None:
        self.steps, self.first, self.cuda, self.out_dir = steps, first, cuda, out_dir
        self.prof: torch.profiler.profile | None = None
        self.span: torch.profiler.record_function | None = None
        self.wait = 0.0

    def begin(self, step: int) -> None:
        if self.steps <= 0 or not self.first <= step < self.first + self.steps:
            return
        if step == self.first:
            self._sync()
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.cuda:
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.prof = torch.profiler.profile(activities=activities)
            self.prof.__enter__()
        self.span = torch.profiler.record_function(STEP_SPAN)
        self.span.__enter__()

    def end(self, step: int, data_wait_s: SupportsFloat) -> None:
        """`data_wait_s`: the loop's own measure of the step's data wait (CUDA events or
        host time), kept in breakdown.json beside the trace's for comparison."""
        if self.prof is None or self.span is None:
            return
        self.wait += float(data_wait_s)
        last = step == self.first + self.steps - 1
        if last:
            self._sync()  # the last step's device work ends inside its span
        self.span.__exit__(None, None, None)
        self.span = None
        if not last:
            return
        self.prof.__exit__(None, None, None)
        prof, self.prof = self.prof, None
        if self.out_dir is None:
            return
        trace = save_trace(prof, self.out_dir / "profile" / TRACE_NAME)
        result = breakdown_from_trace(read_trace(trace), self.steps)
        result.update(
            profiled_steps=self.steps,
            first_step=self.first + 1,
            data_wait_events_s=self.wait / self.steps,
            trace=str(trace.relative_to(self.out_dir)),
            method="exclusive parts on the trace's timeline; see heartlm.train.profile",
        )
        atomic_write_text(self.out_dir / "breakdown.json", json.dumps(result, indent=2) + "\n")

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def save_trace(prof: torch.profiler.profile, path: Path) -> Path:
    """Write the Chrome trace under a temporary name, then rename: never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        prof.export_chrome_trace(str(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The events of a Chrome trace file; a damaged one is one HeartlmError."""
    try:
        raw = json.loads(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise HeartlmError(f"not a readable trace ({exc})", path) from None
    events = raw.get("traceEvents") if isinstance(raw, dict) else raw
    if not isinstance(events, list):
        raise HeartlmError("not a Chrome trace (no traceEvents list)", path)
    return [e for e in events if isinstance(e, dict)]
