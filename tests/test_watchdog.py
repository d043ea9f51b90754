"""The suite's watchdog (pyproject's faulthandler settings): a hung test ends the run."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_a_hung_test_ends_the_run_with_its_stack(tmp_path: Path):
    (tmp_path / "test_hangs.py").write_text(
        "import time\n\ndef test_hangs():\n    time.sleep(120)\n"
    )
    started = time.perf_counter()
    run = subprocess.run(  # the repository's settings, with a 2-s limit instead of 600
        [sys.executable, "-m", "pytest", "-q", "-c", str(PYPROJECT), "--rootdir", str(tmp_path),
         "-p", "no:cacheprovider", "-o", "faulthandler_timeout=2", str(tmp_path)],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert run.returncode != 0
    assert "Timeout" in run.stderr and "test_hangs" in run.stderr
    assert time.perf_counter() - started < 60
