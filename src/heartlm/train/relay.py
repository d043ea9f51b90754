"""torchrun's stderr, relayed so that a failed run ends with its cause, said once.

Log and progress lines pass through as they come. Tracebacks (torchrun's own and the
workers', which one failure multiplies: the other ranks lose their peer) and torchrun's
failure report are held back. When the run fails, the cause is the first
`heartlm: error:` line a worker printed (every rank may print it; it is said once, by the
caller, last); without one, the held text is shown and the cause is the failed rank's
last traceback line, or the signal that killed it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import TextIO

ERROR_PREFIX = "heartlm: error: "
RDZV_TIMEOUT_MARK = "RendezvousTimeoutError"
_RANK = re.compile(r"^\[(?:rank|default)(\d+)\]:\s?")
_SUMMARY_EDGE = re.compile(r"^={20,}\s*$")
_FIELD = re.compile(r"^\s+(rank|exitcode|traceback)\s*:\s*(.*?)\s*$")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


class Relay:
    """Feed it torchrun's stderr line by line; ask `cause()` once torchrun has exited."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out
        self.errors: list[str] = []
        self.held: list[str] = []
        self.last_exception: dict[int, str] = {}
        self.root: dict[str, str] = {}
        self.rendezvous_timeout = False
        self._tb_rank: int | None = None  # inside a traceback of this rank (-1: torchrun's)
        self._summary = 0  # inside torchrun's failure report: number of '=====' lines seen
        self._root_section = False

    def run(self, stream: Iterable[str]) -> None:
        for line in stream:
            self.feed(line)

    def feed(self, line: str) -> None:
        match = _RANK.match(line)
        rank = int(match.group(1)) if match else -1
        text = line[match.end() :] if match else line
        if RDZV_TIMEOUT_MARK in text:
            self.rendezvous_timeout = True
        if text.startswith(ERROR_PREFIX):
            # Two ranks failing at once can reach the pipe as one line: split it again.
            for message in text.rstrip("\n").split(ERROR_PREFIX):
                if message and message not in self.errors:
                    self.errors.append(message)
            return
        if self._in_summary(text) or self._in_traceback(rank, text):
            self.held.append(line)
            return
        self._write(line)

    def _in_traceback(self, rank: int, text: str) -> bool:
        if text.startswith("Traceback (most recent call last)") or text.startswith(_CHAINED):
            self._tb_rank = rank
            return True
        if self._tb_rank is None or self._tb_rank != rank:
            return False
        if text[:1].isspace() or not text.strip():
            return True
        self.last_exception[rank] = text.strip()  # the exception line ends the traceback
        self._tb_rank = None
        return True

    def _in_summary(self, text: str) -> bool:
        if "ChildFailedError" in text and self._summary == 0:
            self._summary, self._tb_rank = 1, None
            return True
        if not self._summary:
            return False
        if _SUMMARY_EDGE.match(text):
            self._summary += 1
            if self._summary > 2:  # opening rule, then the closing one
                self._summary, self._root_section = 0, False
            return True
        if text.startswith("Root Cause"):
            self._root_section = True
        field = _FIELD.match(text)
        if self._root_section and field:
            self.root.setdefault(field.group(1), field.group(2))
        return True

    def _write(self, line: str) -> None:
        out = self.out or sys.stderr
        out.write(line)
        out.flush()

    def root_exitcode(self) -> int | None:
        match = re.match(r"-?\d+", self.root.get("exitcode", ""))
        return int(match.group()) if match else None

    def cause(self) -> str:
        """What to tell the user about a failed run, in one line."""
        if self.errors:
            return self.errors[0]
        self._write("".join(self.held))
        rank = re.match(r"\d+", self.root.get("rank", ""))
        who = f"rank {rank.group()}" if rank else "a worker"
        code = self.root_exitcode()
        signal_name = re.search(r"\((SIG\w+)\)", self.root.get("exitcode", ""))
        if signal_name:
            return f"{who} was killed by {signal_name.group(1)}"
        failed = int(rank.group()) if rank else min(self.last_exception, default=-1)
        last = self.last_exception.get(failed) or next(iter(self.last_exception.values()), "")
        if last:
            return f"{who} failed: {last}"
        return f"{who} exited with code {code}" if code is not None else "torchrun failed"
