"""Start heartlm under torchrun (`--nproc N`) and relay what its workers say."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence

from heartlm import lifeline
from heartlm.errors import HeartlmError
from heartlm.lock import HELD_ENV, held_locks
from heartlm.log import logger
from heartlm.runtime import ranks
from heartlm.train.config import LaunchConfig
from heartlm.train.relay import Relay
from heartlm.train.stopsignal import EXIT_STOPPED, SIGNALS

# Flags that belong to the launcher: the relaunched workers must not see them.
LAUNCH_FLAGS = ("--nproc", "--max-restarts", "--rdzv-timeout")
DEFAULT_RDZV_TIMEOUT_S = 300
# Since torch 2.5 the c10d rendezvous shares one TCPStore with the workers across restarts,
# and a restarted group can read the dead group's addresses from it and fail to connect
# (pytorch/pytorch#135712, #167288): give each restart a fresh store instead. torchrun
# passes SIGUSR1 (a time limit's warning) on to the workers like SIGTERM, instead of dying.
LAUNCH_ENV = {
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    "PET_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1",
}


def world_size(nproc: int) -> int:
    """Processes the run will have: `nproc`, or torchrun's WORLD_SIZE inside a worker."""
    here = ranks()
    return max(1, here.world_size if here.worker else nproc)


def maybe_relaunch(launch: LaunchConfig, argv: Sequence[str] | None = None) -> int | None:
    """Relaunch under torchrun when `launch.nproc > 1` and we are not a torchrun worker yet.

    Returns torchrun's exit code, or None when this process should train itself.
    """
    try:
        launch.validate()
    except ValueError as exc:
        raise HeartlmError(str(exc)) from None
    if launch.nproc == 1 or ranks().worker:
        return None
    argv = list(sys.argv[1:] if argv is None else argv)
    return relaunch_under_torchrun(
        launch.nproc,
        argv,
        max_restarts=launch.max_restarts,
        rdzv_timeout_s=launch.rdzv_timeout,
    )


def strip_flags(argv: Sequence[str], flags: Sequence[str] = LAUNCH_FLAGS) -> list[str]:
    """`argv` without the given valued flags (both `--flag V` and `--flag=V`)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in flags:
            skip = True
            continue
        if any(arg.startswith(f + "=") for f in flags):
            continue
        out.append(arg)
    return out


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_nproc(nproc: int) -> None:
    """Refuse more processes per node than GPUs on a CUDA machine (they would share a GPU)."""
    import torch

    if torch.cuda.is_available() and nproc > torch.cuda.device_count():
        raise HeartlmError(
            f"--nproc {nproc}: more processes than the {torch.cuda.device_count()} "
            "GPU(s) on this machine"
        )


def torchrun_command(
    nproc: int,
    argv: Sequence[str],
    max_restarts: int = 0,
    nnodes: str = "1",
    rdzv_endpoint: str | None = None,
    rdzv_id: str | None = None,
    rdzv_timeout_s: int = DEFAULT_RDZV_TIMEOUT_S,
) -> list[str]:
    """The `python -m torch.distributed.run ... -m heartlm ARGV` command line.

    One node without an endpoint: a c10d store on a free localhost port. Several nodes:
    c10d rendezvous at `rdzv_endpoint` (the agent on that host serves the store), with
    `join_timeout` so a group that never forms fails instead of hanging.
    """
    if rdzv_endpoint is None:
        if nnodes != "1":
            raise HeartlmError(f"--nnodes {nnodes} needs a rendezvous endpoint (host:port)")
        rdzv_endpoint = f"127.0.0.1:{free_port()}"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={max_restarts}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={rdzv_endpoint}",
        f"--rdzv-id={rdzv_id or uuid.uuid4().hex[:12]}",
        f"--rdzv-conf=join_timeout={rdzv_timeout_s}",
        "--monitor-interval=0.5",
        "-m",
        "heartlm",
    ]
    return cmd + strip_flags(argv)


def relaunch_under_torchrun(
    nproc: int,
    argv: list[str],
    max_restarts: int = 0,
    nnodes: str = "1",
    rdzv_endpoint: str | None = None,
    rdzv_timeout_s: int = DEFAULT_RDZV_TIMEOUT_S,
    rdzv_id: str | None = None,
) -> int:
    """Run `heartlm ARGV` as `nproc` torchrun workers; stream their output; return the exit
    code (EXIT_STOPPED when a SIGTERM / SIGUSR1 passed on to them stopped the run).

    A failure is one HeartlmError with its cause (the workers' own error line, said once),
    also when the rendezvous does not form within `rdzv_timeout_s`. torchrun ends with us
    even when we are killed (`heartlm.lifeline`).
    """
    check_nproc(nproc)
    if rdzv_endpoint is None and nnodes == "1":
        rdzv_endpoint = f"127.0.0.1:{free_port()}"
    cmd = torchrun_command(
        nproc, argv, max_restarts, nnodes, rdzv_endpoint, rdzv_id, rdzv_timeout_s
    )
    logger.info("launching %d processes x %s node(s) under torchrun", nproc, nnodes)
    logger.debug("%s", " ".join(cmd))
    env = {**os.environ, **LAUNCH_ENV, HELD_ENV: held_locks()}
    env.setdefault("OMP_NUM_THREADS", "1")
    start = time.monotonic()
    relay = Relay()
    with torchrun_log_dir(env) as env:
        # stderr is relayed line by line: the cause of a failure is picked out of it.
        proc = subprocess.Popen(
            lifeline.wrap(cmd), env=env, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        reader = threading.Thread(target=relay.run, args=(proc.stderr,), daemon=True)
        reader.start()
        with _forward_stop_signals(proc) as forwarded:
            try:
                code = proc.wait()
            except KeyboardInterrupt:
                # The terminal already sent SIGINT to torchrun too; let it stop its workers.
                proc.send_signal(signal.SIGINT)
                proc.wait()
                raise
        reader.join(timeout=5)
    if code == 0:
        failed = relay.errors or list(relay.last_exception.values())
        if failed:  # a group that torchrun restarted (--max-restarts): say what happened
            logger.warning("workers failed and were restarted: %s", "; ".join(failed)[:500])
        return 0
    if relay.rendezvous_timeout:
        raise HeartlmError(
            f"rendezvous did not form within {rdzv_timeout_s} s "
            f"({nnodes} node(s) expected at {rdzv_endpoint}, "
            f"waited {time.monotonic() - start:.0f} s): are all nodes started and "
            "is the endpoint reachable?"
        )
    if not relay.errors and (forwarded or relay.root_exitcode() == EXIT_STOPPED):
        return EXIT_STOPPED
    raise HeartlmError(relay.cause())


@contextlib.contextmanager
def torchrun_log_dir(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """`env` for one torchrun launch, its log folder (PET_LOG_DIR, torchrun's --log-dir) a
    temporary folder removed when the launch ends: left to itself, torchrun leaves a
    torchelastic_* folder in the temporary directory at every launch. A PET_LOG_DIR already
    set is kept, and so is what torchrun writes there."""
    if env.get("PET_LOG_DIR"):
        yield env
        return
    with tempfile.TemporaryDirectory(prefix="heartlm-torchrun-", ignore_cleanup_errors=True) as d:
        yield {**env, "PET_LOG_DIR": d}


@contextlib.contextmanager
def _forward_stop_signals(proc: subprocess.Popen) -> Iterator[list[int]]:
    """While torchrun runs, a SIGTERM / SIGUSR1 to us is passed on to it (and by it to the
    workers, which checkpoint and stop); yields the signals passed on."""
    forwarded: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield forwarded
        return

    def forward(signum: int, frame: object) -> None:
        forwarded.append(signum)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    before = {s: signal.signal(s, forward) for s in SIGNALS}
    try:
        yield forwarded
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def restart_count() -> int:
    """How many times torchrun has restarted this worker group (0 on the first attempt)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def is_elastic_restart() -> bool:
    """True in a worker that torchrun started again after a failure: resume, don't start over."""
    return restart_count() > 0
