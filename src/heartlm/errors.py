"""The one error type users see: a file (or flag) and what is wrong with it, on one line."""

from __future__ import annotations

from pathlib import Path


class HeartlmError(Exception):
    """A problem with the user's input, reported as one line and a non-zero exit."""

    def __init__(self, message: str, path: str | Path | None = None) -> None:
        self.path = None if path is None else str(path)
        self.message = message
        super().__init__(f"{self.path}: {message}" if self.path else message)
