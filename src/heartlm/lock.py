"""One writer per output folder: an exclusive lock held for the whole run.

The lock is `fcntl.flock` on `.NAME.lock` beside the folder. The kernel drops it when its
holder dies, however it dies, so a lock file left behind never blocks a later run; a second
writer is refused with one line naming the holder (pid, host, start time). A launcher that
holds a lock lists it in HEARTLM_HELD_LOCKS for the worker processes it starts, which then
write under their parent's lock instead of contending for it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import os
import platform
from collections.abc import Iterator
from pathlib import Path

from heartlm.errors import HeartlmError
from heartlm.log import logger

HELD_ENV = "HEARTLM_HELD_LOCKS"
_held: list[str] = []  # lock files this process holds, for the workers it launches


def lock_path(out: str | Path) -> Path:
    out = Path(os.path.abspath(out))
    return out.parent / f".{out.name}.lock"


def held_locks() -> str:
    """The value of HELD_ENV for a child process: our locks and our parent's."""
    inherited = [p for p in os.environ.get(HELD_ENV, "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(inherited + _held))


def held_by_parent(out: str | Path) -> bool:
    """Whether the heartlm launcher that started this process holds `out`'s lock."""
    return str(lock_path(out)) in os.environ.get(HELD_ENV, "").split(os.pathsep)


@contextlib.contextmanager
def output_lock(out: str | Path) -> Iterator[bool]:
    """Hold the lock of output folder `out`; refuse if another process holds it. Yields
    whether this process took it (not where the file system has no locks, nor where the
    launcher that started us holds it)."""
    path = lock_path(out)
    if held_by_parent(out):
        yield False
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(path, out)
    if fd is None:
        yield False
        return
    holder = f"pid {os.getpid()} on {platform.node()}, since {dt.datetime.now():%Y-%m-%d %H:%M}"
    os.ftruncate(fd, 0)
    os.write(fd, holder.encode())
    _held.append(str(path))
    try:
        yield True
    finally:
        _held.remove(str(path))
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)


def _acquire(path: Path, out: str | Path) -> int | None:
    """An fd holding the lock (None where the file system has no locks)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise HeartlmError(
                f"is being written by another heartlm run ({holder}); wait for it or stop it",
                out,
            ) from None
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                os.close(fd)
                raise
            # Some cluster file systems are mounted without lock support.
            logger.warning("%s: file system without locks; not guarding against a second run", out)
            os.close(fd)
            return None
        # A holder unlinks the file as it releases: if ours is no longer the file at `path`,
        # a third process may already lock the new one, so start over.
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
