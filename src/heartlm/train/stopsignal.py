"""SIGTERM and SIGUSR1 end training cleanly, as an HPC time limit needs.

SLURM (`--signal=B:USR1@120`), torchrun and `kill` send these; the training loop then
finishes its step, writes a checkpoint at the next step boundary where the ranks meet
(every step in one process, every `--log-every` steps in several) and the command exits
with EXIT_STOPPED, so a requeued job continues from there with `--resume`. A second
signal of the same kind ends the process at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

EXIT_STOPPED = 75  # sysexits.h EX_TEMPFAIL: stopped early on purpose; rerun with --resume
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

_received: int | None = None


def requested() -> int | None:
    """The stop signal received while `handling()`, or None."""
    return _received


def _handler(signum: int, frame: FrameType | None) -> None:
    # No logging here: the handler may interrupt a write to the same stream.
    global _received
    if _received == signum:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    _received = signum


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """Turn SIGNALS into a stop request for the block (only the main thread can)."""
    global _received
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received = None
    before = {s: signal.signal(s, _handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)
