"""Child processes that end with their parent, however the parent ends (even SIGKILL).

Linux's PR_SET_PDEATHSIG has the kernel signal a process when its parent dies, and it
survives exec: `python -m heartlm.lifeline PID SIG -- CMD...` sets it and then becomes
CMD. heartlm starts torchrun this way (torchrun passes the SIGTERM on to its workers and
stops them), and its pool workers set it directly. Elsewhere than Linux it does nothing.
No torch import here: this runs before every launch.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> None:
    """Have the kernel send `sig` to this process when `parent_pid`, its parent, dies."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return
    if os.getppid() != parent_pid:  # the parent died before the prctl took effect
        os.kill(os.getpid(), sig)


def wrap(argv: Sequence[str], sig: int = signal.SIGTERM) -> list[str]:
    """`argv` as a command that receives `sig` when this process dies."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    here = [sys.executable, "-m", "heartlm.lifeline", str(os.getpid()), str(int(sig)), "--"]
    return [*here, *argv]


def main(argv: Sequence[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m heartlm.lifeline PARENT_PID SIGNAL -- COMMAND...", file=sys.stderr)
        return 2
    die_with_parent(int(argv[0]), int(argv[1]))
    os.execvp(argv[3], list(argv[3:]))
    return 127  # not reached: exec replaces this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
