"""Logging to stderr, and progress bars that only rank 0 draws."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

from heartlm.runtime import is_main_process

T = TypeVar("T")

logger = logging.getLogger("heartlm")


class _CurrentStderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is at the time of writing (pytest swaps it)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def setup_logging(verbosity: int = 0) -> None:
    level = logging.DEBUG if verbosity > 0 else logging.INFO
    handler = _CurrentStderrHandler()
    handler.setFormatter(logging.Formatter("heartlm: %(message)s"))
    logger.handlers[:] = [handler]
    logger.setLevel(level if is_main_process() else logging.WARNING)
    logger.propagate = False


def progress(
    items: Iterable[T], total: int | None = None, desc: str = "", unit: str = "it"
) -> Iterator[T]:
    """A tqdm bar on stderr, drawn only on rank 0 and only when stderr is a terminal
    (or HEARTLM_PROGRESS=1), so logs and CI output stay clean."""
    show = is_main_process() and (sys.stderr.isatty() or os.environ.get("HEARTLM_PROGRESS") == "1")
    return iter(
        tqdm(
            items,
            total=total,
            desc=desc,
            unit=unit,
            disable=not show,
            file=sys.stderr,
            dynamic_ncols=True,
        )
    )
