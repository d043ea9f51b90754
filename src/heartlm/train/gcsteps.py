"""Python's garbage collection at fixed steps instead of at random moments (`--gc-every N`).

CPython collects whenever its allocation counters say so, at a different moment on every
rank; a rank that stops for a collection holds up the others at the next collective. With
`--gc-every N` the automatic collector is off during training and every rank collects the
young generations after every N steps, at the same step (torchtitan's `gc_freq`).
"""

from __future__ import annotations

import gc
import time
from types import TracebackType

from heartlm.log import logger


class StepCollector:
    """`with StepCollector(every): ... after_step(done)`; `every` 0 leaves Python's GC alone."""

    def __init__(self, every: int) -> None:
        if every < 0:
            raise ValueError(f"--gc-every must be >= 0, not {every}")
        self.every = every
        self.was_enabled = gc.isenabled()
        self.seconds = 0.0

    def __enter__(self) -> StepCollector:
        if self.every:
            self.was_enabled = gc.isenabled()
            gc.collect()  # start the loop with the setup's garbage gone
            gc.disable()
        return self

    def after_step(self, done: int) -> None:
        if self.every and done % self.every == 0:
            t0 = time.perf_counter()
            gc.collect(1)
            self.seconds += time.perf_counter() - t0

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.every:
            if self.was_enabled:
                gc.enable()
            logger.debug("--gc-every %d: %.3f s collecting", self.every, self.seconds)
