"""The step-time breakdown from a profiler trace: parts exclusive and summing to the step."""

from __future__ import annotations

import numpy as np
import pytest

from heartlm.errors import HeartlmError
from heartlm.train.profile import PARTS, breakdown_from_trace, read_trace


def _x(name: str, cat: str, ts: float, dur: float, **args) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 0, "tid": 1,
            "args": args}  # fmt: skip


def test_cuda_trace_parts_are_exclusive_and_sum_to_the_step():
    # One step of 100 us. Host: a data span at 0-10 launching kernel 1 (device 10-14),
    # then the device idles until 20 with the host still in the data span (to 20).
    # Compute kernels 20-60 and 70-90; NCCL 50-80: 10 overlapped with compute (50-60),
    # 10 exposed (60-70), 10 overlapped again (70-80). 90-100: nothing runs, "other".
    events = [
        _x("heartlm::step", "user_annotation", 0, 100),
        _x("heartlm::data", "user_annotation", 0, 20),
        _x("cudaLaunchKernel", "cuda_runtime", 5, 1, correlation=1),
        _x("cudaLaunchKernel", "cuda_runtime", 30, 1, correlation=2),
        _x("index_kernel", "kernel", 10, 4, correlation=1),
        _x("gemm", "kernel", 20, 40, correlation=2),
        _x("gemm", "kernel", 70, 20),
        _x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 50, 30),
    ]
    got = breakdown_from_trace(events, steps=1)
    us = {k: round(v * 1e6, 6) for k, v in got.items()}
    # data: kernel 10-14, plus host data span while the device idles (0-10, 14-20) = 20
    assert us == {"step_s": 100, "data_wait_s": 20, "compute_s": 60, "comm_exposed_s": 10,
                  "comm_overlapped_s": 20, "other_s": 10}  # fmt: skip


def _brute(events: list[dict], steps: int) -> dict[str, float]:
    """The same definitions on a 1-us grid, for random CPU traces."""
    step = [e for e in events if e["name"] == "heartlm::step"]
    lo, hi = min(e["ts"] for e in step), max(e["ts"] + e["dur"] for e in step)
    t = np.arange(lo, hi) + 0.5

    def cover(es):
        m = np.zeros(t.size, bool)
        for e in es:
            m |= (t > e["ts"]) & (t < e["ts"] + e["dur"])
        return m

    ops = [e for e in events if e["cat"] == "cpu_op"]
    data = cover([e for e in events if e["name"] == "heartlm::data"])
    comm = cover([e for e in ops if e["name"].startswith("c10d")])
    busy = cover(ops) & ~comm  # one thread here: time inside a collective is communication
    work = busy | data
    seconds = {
        "step_s": t.size, "data_wait_s": data.sum(), "compute_s": (busy & ~data).sum(),
        "comm_exposed_s": (comm & ~work).sum(), "comm_overlapped_s": (comm & work).sum(),
        "other_s": (~(work | comm)).sum(),
    }  # fmt: skip
    return {k: float(v) / 1e6 / steps for k, v in seconds.items()}


@pytest.mark.parametrize("seed", range(20))
def test_random_cpu_traces_match_a_brute_force_timeline(seed: int):
    rng = np.random.default_rng(seed)
    steps = int(rng.integers(1, 4))
    events = [_x("heartlm::step", "user_annotation", 100 * k, 100) for k in range(steps)]
    for _ in range(int(rng.integers(1, 12))):
        ts, dur = (int(v) for v in rng.integers(0, 100 * steps, 2))
        name = rng.choice(["aten::mm", "aten::add", "c10d::allreduce_", "heartlm::data"])
        cat = "user_annotation" if name == "heartlm::data" else "cpu_op"
        events.append(_x(str(name), cat, ts - 10, dur // 2))  # some start before the window
    got = breakdown_from_trace(events, steps)
    assert got == pytest.approx(_brute(events, steps), abs=1e-12)
    assert sum(got[k] for k in PARTS) == pytest.approx(got["step_s"], rel=1e-12)
    assert all(got[k] >= 0 for k in got)


def test_a_trace_without_steps_or_a_damaged_file_is_one_error(tmp_path):
    with pytest.raises(HeartlmError, match="no heartlm::step span"):
        breakdown_from_trace([_x("gemm", "kernel", 0, 5)], 1)
    bad = tmp_path / "t.json"
    bad.write_text('{"traceEvents": [')
    with pytest.raises(HeartlmError, match="not a readable trace"):
        read_trace(bad)
