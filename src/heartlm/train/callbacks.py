"""Hooks into the trainer: extra validation metrics, and the fault tests' killed rank.

A callback sees the loop at two points: after each optimizer step (`on_step_end`) and at
each validation (`on_validation`, which may add metrics such as a validation F1 that
`keep_best` can select by). The training loop itself has no test hooks: the fault tests'
`FaultInjection` comes in as a callback, from the environment of the worker processes
that torchrun starts (`from_environment`).
"""

from __future__ import annotations

import os
import re
import signal
import sys

from torch import nn

from heartlm.errors import HeartlmError
from heartlm.log import logger
from heartlm.train.launch import restart_count

FAULT_STEP_ENV = "HEARTLM_FAULT_AT_STEP"
FAULT_RANK_ENV = "HEARTLM_FAULT_RANK"


class Callback:
    """Does nothing; a callback overrides what it needs."""

    def on_step_end(self, step: int, rank: int) -> None:
        """After optimizer step `step` (1-based), its checkpoint included."""

    def on_validation(self, model: nn.Module) -> dict[str, float]:
        """Metrics to add to a validation (every rank calls it with the same model)."""
        return {}


class FaultInjection(Callback):
    """SIGKILL rank `rank` after optimizer step `step`, on torchrun's first attempt only,
    so the restarted group can finish (tests/test_faults.py, tests/test_distributed.py)."""

    def __init__(self, step: int, rank: int = 0) -> None:
        self.step, self.rank = step, rank

    def on_step_end(self, step: int, rank: int) -> None:
        if step != self.step or rank != self.rank or restart_count() > 0:
            return
        logger.warning("injected fault: killing rank %d after step %d", rank, step)
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def from_environment() -> list[Callback]:
    """The callbacks the environment asks for: `HEARTLM_FAULT_AT_STEP=k` with
    `HEARTLM_FAULT_RANK=r` (default 0) kills rank r after step k."""
    at = os.environ.get(FAULT_STEP_ENV)
    if not at:
        return []
    if not re.fullmatch(r"\d+", at):
        raise HeartlmError(f"{FAULT_STEP_ENV}={at!r} is not a step number")
    return [FaultInjection(int(at), int(os.environ.get(FAULT_RANK_ENV, "0") or 0))]
