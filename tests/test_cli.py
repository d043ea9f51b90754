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


def _heartlm_with_exit_hook(args: list[str], worker: bool) -> subprocess.CompletedProcess:
    """`python -m heartlm ARGS` with an exit hook that prints HOOK; LOCAL_RANK set if worker."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONUNBUFFERED", "LOCAL_RANK")}
    if worker:
        env["LOCAL_RANK"] = "0"
    code = (
        "import atexit, runpy, sys; atexit.register(print, 'HOOK'); "
        f"sys.argv = ['heartlm', *{args!r}]; runpy.run_module('heartlm', run_name='__main__')"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)


def test_a_finished_torchrun_worker_skips_finalisation_but_keeps_its_output_and_code(tmp_path):
    # A worker (LOCAL_RANK set) that finished leaves without interpreter finalisation (no
    # exit hooks); what it printed to a pipe must still arrive, with the command's code.
    args = ["synth", str(tmp_path / "s"), "--print-config"]
    worker = _heartlm_with_exit_hook(args, worker=True)
    assert worker.returncode == 0 and "records:" in worker.stdout
    assert "HOOK" not in worker.stdout
    plain = _heartlm_with_exit_hook(args, worker=False)
    assert plain.returncode == 0 and "records:" in plain.stdout and "HOOK" in plain.stdout


def test_a_failed_torchrun_worker_exits_as_usual(tmp_path):
    failed = _heartlm_with_exit_hook(["qrs", str(tmp_path / "nope")], worker=True)
    assert failed.returncode == 2 and str(tmp_path / "nope") in failed.stderr
    assert "HOOK" in failed.stdout  # exit hooks (W&B's, say) still run after a failure
