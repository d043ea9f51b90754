"""A small synthetic token corpus (synth -> ingest -> tokenize) for a grid without --data."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from heartlm import lifeline
from heartlm.errors import HeartlmError
from heartlm.log import logger


def heartlm_cli(args: list[str], what: str, cwd: Path | None = None) -> None:
    """Run `heartlm ARGS` as a subprocess; its logs go to our stderr; failure is one line."""
    logger.info("%s: heartlm %s", what, " ".join(args))
    done = subprocess.run(
        lifeline.wrap([sys.executable, "-m", "heartlm", *args]),
        cwd=cwd,
        stdout=_stderr_fd(),
        check=False,
    )
    if done.returncode != 0:
        raise HeartlmError(f"heartlm {args[0]} failed (exit {done.returncode}); see above", what)


def _stderr_fd() -> int | None:
    """Their result lines (stdout) become our log lines, so our stdout stays our result."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def minutes_for(window: int, bpm: float = 60.0) -> float:
    """Record length that holds at least two windows even at a slow heart rate."""
    return max(1.0, round(2 * window / bpm + 0.5, 1))


def make_tokens(
    folder: Path, records: int, minutes: float, fs: int = 360, seed: int = 0, vocab: int = 256
) -> Path:
    """WFDB records, a beat store and token shards under `folder`; done stages are kept."""
    wfdb_dir, store, tokens = folder / "wfdb", folder / "store", folder / "tokens"
    if not (wfdb_dir / "run.json").is_file() and not any(wfdb_dir.glob("*.hea")):
        heartlm_cli(
            ["synth", str(wfdb_dir), "--records", str(records), "--minutes", str(minutes),
             "--fs", str(fs), "--seed", str(seed), "--overwrite"],
            "synth",
        )  # fmt: skip
    if not (store / "run.json").is_file():
        heartlm_cli(["ingest", str(wfdb_dir), "--out", str(store), "--overwrite"], "ingest")
    if not (tokens / "tokens.json").is_file():
        heartlm_cli(
            ["tokenize", str(store), "--out", str(tokens), "--vocab", str(vocab), "--overwrite"],
            "tokenize",
        )
    return tokens
