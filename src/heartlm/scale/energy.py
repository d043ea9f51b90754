"""GPU energy during a cell: NVML counters via pynvml, else nvidia-smi power samples, else none.

A background thread samples (time, joules so far, steps logged so far) so the energy of
just the measured steps can be cut out of the whole launch afterwards.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def _nvml_reader(indices: list[int]) -> Callable[[], float] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        for h in handles:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    except Exception:  # NVML raises its own error types; any of them means "not here"
        return None
    return lambda: sum(pynvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in handles) / 1e3


def _smi_power(indices: list[int]) -> Callable[[], float] | None:
    if shutil.which("nvidia-smi") is None or not indices:
        return None
    cmd = [
        "nvidia-smi",
        f"--id={','.join(map(str, indices))}",
        "--query-gpu=power.draw",
        "--format=csv,noheader,nounits",
    ]

    def read() -> float:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=True).stdout
        return sum(float(v) for v in out.split())

    try:
        read()
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return read


@dataclass
class EnergySampler:
    """Samples while the cell runs; `mean_power(a, b)` gives watts from step a to step b."""

    indices: list[int]
    progress: Callable[[], int]
    interval_s: float = 0.2
    source: str = "none"
    samples: list[tuple[float, float, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._energy = _nvml_reader(self.indices)
        self._power = None if self._energy else _smi_power(self.indices)
        self.source = "nvml" if self._energy else "nvidia-smi" if self._power else "none"
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> EnergySampler:
        if self.source != "none":
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        joules, last_t = 0.0, time.monotonic()
        while not self._stop.is_set():
            t = time.monotonic()
            try:
                if self._energy:
                    joules = self._energy()
                else:
                    joules += self._power() * (t - last_t)
                self.samples.append((t, joules, self.progress()))
            except Exception:  # a failed sample is skipped, never fatal to the cell
                pass
            last_t = t
            self._stop.wait(self.interval_s)

    def mean_power(self, first_step: int, last_step: int) -> float | None:
        """Mean watts from when `first_step` steps were logged to when `last_step` were.

        The engine writes metrics in bursts, so the step count seen from outside lags;
        mean power times the engine's own step time is the energy of the measured steps.
        """
        start = next((s for s in self.samples if s[2] >= first_step), None)
        end = next((s for s in self.samples if s[2] >= last_step), None)
        if start is None or end is None or end[0] - start[0] < self.interval_s:
            return None
        return (end[1] - start[1]) / (end[0] - start[0])
