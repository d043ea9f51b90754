"""Output folders that appear whole or not at all, and never overwrite results unless asked.

Every stage writes into a staging folder next to the destination and renames it into
place at the end, so an interrupted or failed run leaves nothing half-written.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from heartlm.errors import HeartlmError


def check_writable(out: str | Path, overwrite: bool) -> Path:
    """Refuse an output folder that already holds something, unless `overwrite`."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise HeartlmError("exists and is not a folder", out)
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise HeartlmError("already holds results (use --overwrite to replace them)", out)
    return out


@contextlib.contextmanager
def staged_dir(out: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh staging folder; on success it replaces `out` atomically.

    On any exception the staging folder is removed and `out` is left as it was.
    """
    out = check_writable(out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        out.rename(old)
    stage.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write a file under a temporary name and rename it into place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())
