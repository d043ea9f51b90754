"""Reading many records, in worker processes or in this one: each record once, Ctrl-C
left to this process, and what to say when a worker dies (SIGKILL, out of memory)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from heartlm.ecg.wfdbio import is_edf
from heartlm.errors import HeartlmError
from heartlm.lifeline import die_with_parent
from heartlm.log import logger


def unique_records(records: list[Path], command: str, verb: str) -> list[Path]:
    """Each record once, in the order first named; one warning when repeats were dropped.

    `100`, `./100`, `100.hea`, `100.dat`, `100.atr` or `100.ii` (a shell glob such as `1*`
    names them all) and the folder holding it name one record, compared by its resolved
    header (so a symbolic link to it is the same record)."""
    seen: set[Path] = set()
    kept: list[Path] = []
    for path in records:
        if not is_edf(path) and not Path(f"{path}.hea").is_file():
            path = path.with_suffix("")  # `100.ii`: an annotation file named as the record
        key = (path if is_edf(path) else Path(f"{path}.hea")).resolve()
        if key not in seen:
            seen.add(key)
            kept.append(path)
    if len(kept) < len(records):
        n = len(records) - len(kept)
        logger.warning(
            f"{command}: {n} duplicate input{'s' if n > 1 else ''} named records already "
            f"listed; each record is {verb} once"
        )
    return kept


def listed(paths: list[Path], most: int = 4) -> str:
    """The first `most` of `paths`, comma-separated, with `...` when there are more."""
    return ", ".join(str(p) for p in paths[:most]) + (", ..." if len(paths) > most else "")


def read_here(fn: Callable[[Path, Any], Any], records: list[Path], config: Any) -> Iterator[Any]:
    """`fn(record, config)` for each record in this process, each with Ctrl-C held until
    the record is read (`sigint_held` says why)."""
    for record in records:
        with sigint_held():
            result = fn(record, config)
        yield result


def common_folder(paths: list[Path]) -> Path:
    """The deepest folder holding every one of `paths`, as named: where a line about a
    group of records points."""
    try:
        return Path(os.path.commonpath([p.parent for p in paths]) or ".")
    except ValueError:  # absolute and relative paths mixed
        return paths[0].parent


@contextmanager
def record_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """Worker processes that leave Ctrl-C to this process and end with it.

    A terminal's Ctrl-C reaches every process of the group: a worker that took it would
    print a traceback before our one line. So workers ignore SIGINT; until they do (they
    are forked at the first submit), they inherit the handler that holds it. Leaving the
    pool drops what is queued and waits for the records being read; a Ctrl-C during that
    wait (the second, after the one that left the pool) ends the workers at once."""
    # fork, as Linux's default before Python 3.14: the workers start at once, with the
    # handler that holds Ctrl-C (forkserver, 3.14's default, starts them later, unguarded)
    fork = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(
        workers, mp_context=fork, initializer=_start_worker, initargs=(os.getpid(),)
    )
    try:
        with sigint_held():
            pool.submit(int)  # forks the workers now, and starts the pool's own thread
        yield pool
    finally:
        # Held, not raised inside the wait: Python 3.11 takes an interrupted join for the
        # end of the pool's thread, and then hangs on its way out. Ending the workers
        # instead ends that thread, and the wait. Workers write nothing, so nothing is left
        # half-written.
        with sigint_held(then=lambda: _terminate_workers(pool)):
            pool.shutdown(wait=True, cancel_futures=True)


def _start_worker(parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent_pid)


def _terminate_workers(pool: ProcessPoolExecutor) -> None:
    # No public way before Python 3.14 (`terminate_workers`); None once shut down.
    for process in list((pool._processes or {}).values()):
        process.terminate()


@contextmanager
def sigint_held(then: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold a Ctrl-C until the block ends, then raise it (KeyboardInterrupt); `then`, if
    given, is called at each Ctrl-C, at once.

    For what must not stop half-way: reading one record, which calls into C libraries whose
    Python callbacks (soundfile's, for FLAC signals) would swallow the KeyboardInterrupt,
    print it as 'Exception ignored' and read on; starting and stopping a pool."""
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    held: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        held.append(signum)
        if then is not None:
            then()

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if held:
        raise KeyboardInterrupt


def worker_died(unfinished: list[Path]) -> HeartlmError:
    """One line naming the records the dead worker may have been reading: a pool cannot
    tell which of the unfinished ones it was."""
    names = ", ".join(p.name for p in unfinished[:4]) + (", ..." if len(unfinished) > 4 else "")
    return HeartlmError(
        f"a worker process died (killed, or out of memory?) while reading {names}",
        unfinished[0].parent,
    )
