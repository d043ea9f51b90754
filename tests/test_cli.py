"""The command line: every stage is reachable, errors are one line with a non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys

from heartlm.cli import COMMANDS, main


def test_every_command_module_imports_and_has_the_interface():
    import importlib

    for name, (module_name, _) in COMMANDS.items():
        module = importlib.import_module(module_name)
        settings = hasattr(module, "Config") or callable(module.add_arguments)
        assert settings and callable(module.run), name


def test_user_error_is_one_line_and_nonzero(tmp_path, capsys):
    missing = tmp_path / "nope"
    code = main(["tokenize", str(missing), "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert len(err) == 1 and str(missing) in err[0] and "Traceback" not in err[0]


def test_console_entry_point_runs():
    out = subprocess.run(
        [sys.executable, "-m", "heartlm", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "ingest" in out.stdout


def test_a_torchrun_worker_leaves_with_its_exit_code_and_its_output(tmp_path):
    # A worker (LOCAL_RANK set) skips interpreter finalisation: what it printed to a pipe
    # must still arrive, and its exit code must still be the command's.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | {"LOCAL_RANK": "0"}
    shown = subprocess.run(
        [sys.executable, "-m", "heartlm", "synth", str(tmp_path / "s"), "--print-config"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert shown.returncode == 0 and "records:" in shown.stdout
    failed = subprocess.run(
        [sys.executable, "-m", "heartlm", "qrs", str(tmp_path / "nope")],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert failed.returncode == 2 and str(tmp_path / "nope") in failed.stderr
