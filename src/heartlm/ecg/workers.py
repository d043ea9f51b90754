"""What to say when a process reading records dies under a pool (SIGKILL, out of memory)."""

from __future__ import annotations

from pathlib import Path

from heartlm.errors import HeartlmError


def worker_died(unfinished: list[Path]) -> HeartlmError:
    """One line naming the records the dead worker may have been reading: a pool cannot
    tell which of the unfinished ones it was."""
    names = ", ".join(p.name for p in unfinished[:4]) + (", ..." if len(unfinished) > 4 else "")
    return HeartlmError(
        f"a worker process died (killed, or out of memory?) while reading {names}",
        unfinished[0].parent,
    )
