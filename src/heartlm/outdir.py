"""Output folders that appear whole or not at all, and never overwrite results unless asked.

Every stage writes into a staging folder next to the destination and swaps it into place
at the end, so an interrupted or failed run leaves nothing half-written and the previous
result stays until the new one is complete. A writer holds the folder's lock
(`heartlm.lock`) for the whole run; staging left by a writer that was killed is therefore
recognisable (nobody holds the lock) and is removed by the next run.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import glob
import io
import os
import resource
import secrets
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from heartlm.errors import HeartlmError
from heartlm.lock import output_lock
from heartlm.log import logger


def absolute(path: str | Path) -> Path:
    """`path` made absolute without resolving links, so `.` and `..` get real names."""
    return Path(os.path.abspath(path))


def check_writable(out: str | Path, overwrite: bool) -> Path:
    """Refuse an output folder that already holds something, unless `overwrite`; refuse the
    current folder and its parents always. Returns `out` made absolute."""
    out = absolute(out)
    if out.exists() and not out.is_dir():
        raise HeartlmError("exists and is not a folder", out)
    if Path.cwd().resolve().is_relative_to(out.resolve()):
        raise HeartlmError("is the current folder or holds it; name a folder to write", out)
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise HeartlmError("already holds results (use --overwrite to replace them)", out)
    return out


def check_separate(out: str | Path, inputs: Iterable[str | Path | None]) -> None:
    """Refuse an output that is, contains or lies inside one of the inputs: replacing it
    would delete the input, and writing into an input changes what later stages read."""
    target = Path(out).resolve()
    for given in inputs:
        if given is None:
            continue
        source = Path(given).resolve()
        if source == target:
            why = f"is also an input ({given})"
        elif source.is_relative_to(target):
            why = f"holds the input {given}"
        elif target.is_relative_to(source):
            why = f"lies inside the input {given}"
        else:
            continue
        raise HeartlmError(f"{why}; write the output to a separate folder", out)


@contextlib.contextmanager
def claimed(out: str | Path) -> Iterator[Path]:
    """Hold `out`'s lock for the block, after clearing what killed writers left beside it.

    An OSError without a file name (a write that failed on a full disk) is put on `out`.
    """
    out = absolute(out)
    with output_lock(out) as locked:
        if locked:  # otherwise leftovers may belong to a live writer
            _clear_leftovers(out)
        try:
            yield out
        except OSError as exc:
            if exc.filename is None:
                exc.filename = str(out)
            raise


def _clear_leftovers(out: Path) -> None:
    """Staging of dead writers goes; a result moved aside by a swap that was cut off is put
    back when the new one never arrived."""
    if not out.parent.is_dir():
        return
    name = glob.escape(out.name)  # `run[1]` must not match `run1`'s staging
    for old in sorted(out.parent.glob(f".{name}.old-*")):
        if not out.exists():
            old.rename(out)
            logger.warning("%s: restored from an interrupted replacement", out)
        else:
            _remove(old)
    for stage in out.parent.glob(f".{name}.tmp-*"):
        shutil.rmtree(stage, ignore_errors=True)
        logger.info("%s: removed the staging of an earlier run that was killed", stage)


def partial_dir(out: str | Path) -> Path:
    """Where a long, resumable run that replaces `out` is built (kept if it is cut off)."""
    out = absolute(out)
    return out.parent / f".{out.name}.partial"


def new_stage(out: Path) -> Path:
    """A fresh staging folder beside `out` (created with the umask's permissions)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    while True:
        stage = out.parent / f".{out.name}.tmp-{os.getpid()}-{secrets.token_hex(3)}"
        with contextlib.suppress(FileExistsError):
            stage.mkdir()
            return stage


def swap_in(stage: Path, out: Path) -> None:
    """Put the finished `stage` at `out`; the previous `out` is deleted only afterwards (a
    symbolic link is replaced, never what it points to)."""
    old = None
    if out.exists() or out.is_symlink():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        out.rename(old)
    stage.rename(out)
    if old is not None:
        _remove(old)


def _remove(path: Path) -> None:
    """Delete a folder moved aside, or the symbolic link that stood at its place."""
    if path.is_symlink():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def staged_dir(out: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh staging folder; on success it replaces `out`.

    On any exception the staging folder is removed and `out` is left as it was.
    """
    out = check_writable(out, overwrite)
    with claimed(out):
        check_writable(out, overwrite)  # again under the lock: another run may just have ended
        stage = new_stage(out)
        try:
            yield stage
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        swap_in(stage, out)


_PROBE_MAX = 64 << 20


def write_failure(folder: Path) -> OSError | None:
    """The OS error behind a write into `folder` that a library reported without one (torch
    serialisation turns a full disk into "unexpected pos"): what writing there gives now,
    or None when writing works. Names `folder`."""
    sizes = [p.stat().st_size for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
    largest = max(sizes, default=0)
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and largest >= limit:
        return OSError(errno.EFBIG, os.strerror(errno.EFBIG), str(folder))
    probe = folder / ".write-probe" if folder.is_dir() else folder.with_name(".write-probe")
    need = min(largest + 1, _PROBE_MAX)
    try:
        with open(probe, "wb") as f:
            while need > 0:
                f.write(b"\0" * min(need, 1 << 20))
                f.flush()
                need -= 1 << 20
            os.fsync(f.fileno())
    except OSError as exc:
        return OSError(exc.errno, exc.strerror, str(folder))
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return None


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write a file under a temporary name and rename it into place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A CSV table (header, then `rows`) as text, lines ending in `\\n` on every platform."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return text.getvalue()
