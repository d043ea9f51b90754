"""`heartlm slurm`: sbatch scripts for 1 node x N GPUs and M nodes, and an Apptainer definition."""

from __future__ import annotations

import argparse
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from heartlm.cluster import templates
from heartlm.errors import HeartlmError
from heartlm.log import logger
from heartlm.outdir import staged_dir
from heartlm.runinfo import write_run_json

SINGLE_NODE_SCRIPT = "single_node.sbatch"
MULTI_NODE_SCRIPT = "multi_node.sbatch"
APPTAINER_DEF = "heartlm.def"
DEFAULT_BASE_IMAGE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
# Flags that the scripts set through torchrun; passing them to heartlm too would relaunch.
_LAUNCHER_FLAGS = ("--nproc", "--max-restarts", "--rdzv-timeout")
# Commands that checkpoint on SIGTERM and continue with --resume after a requeue.
_RESUMABLE = ("pretrain", "finetune")
GRACE_S = 120
"""seconds between SLURM's warning (USR1) and the time limit"""


@dataclass
class SlurmConfig:
    out: Path
    heartlm_args: list[str]
    nodes: int = 2
    """nodes for the multi-node script (the single-node script always uses 1)"""
    gpus_per_node: int = 4
    cpus_per_task: int = 32
    """CPU cores of the one task per node (shared by its gpus_per_node workers)"""
    time: str = "02:00:00"
    partition: str | None = None
    account: str | None = None
    job_name: str = "heartlm"
    image: str = "heartlm.sif"
    container: bool = True
    base_image: str = DEFAULT_BASE_IMAGE
    source: Path = field(default_factory=Path)
    port: int = 29500
    max_restarts: int = 0
    rdzv_timeout_s: int = 900

    def validate(self) -> None:
        for flag, value in (
            ("--nodes", self.nodes),
            ("--gpus-per-node", self.gpus_per_node),
            ("--cpus-per-task", self.cpus_per_task),
            ("--rdzv-timeout", self.rdzv_timeout_s),
        ):
            if value < 1:
                raise ValueError(f"{flag} must be at least 1, got {value}")
        if self.max_restarts < 0:
            raise ValueError(f"--max-restarts must be >= 0, got {self.max_restarts}")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"--port must be a TCP port, got {self.port}")
        if not re.fullmatch(r"(\d+-)?\d{1,3}(:\d\d){0,2}", self.time):
            raise ValueError(f"--time must look like [D-]HH:MM:SS, got {self.time!r}")
        if not self.heartlm_args:
            raise ValueError("give the heartlm command after '--', e.g. -- pretrain TOKENS RUN")
        from heartlm.cli import COMMANDS

        if self.heartlm_args[0] not in COMMANDS:
            raise ValueError(f"after '--': {self.heartlm_args[0]!r} is not a heartlm command")
        for arg in self.heartlm_args:
            if arg.split("=", 1)[0] in _LAUNCHER_FLAGS:
                raise ValueError(
                    f"after '--': {arg.split('=', 1)[0]} is set by the scripts "
                    "(use --gpus-per-node / --max-restarts of heartlm slurm)"
                )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, help="folder for the scripts")
    parser.add_argument("--nodes", type=int, default=2, help="nodes of the multi-node script")
    parser.add_argument("--gpus-per-node", type=int, default=4, help="GPUs (workers) per node")
    parser.add_argument(
        "--cpus-per-task", type=int, default=32, help="CPU cores per node, shared by its workers"
    )
    parser.add_argument("--time", default="02:00:00", help="SLURM time limit, [D-]HH:MM:SS")
    parser.add_argument("--partition", help="SLURM partition")
    parser.add_argument("--account", help="SLURM account")
    parser.add_argument("--job-name", default="heartlm", help="SLURM job name")
    parser.add_argument("--image", default="heartlm.sif", help="Apptainer image the jobs run in")
    parser.add_argument(
        "--no-container", action="store_true", help="run torchrun from the host environment"
    )
    parser.add_argument(
        "--base-image", default=DEFAULT_BASE_IMAGE, help="PyTorch/CUDA Docker image for heartlm.def"
    )
    parser.add_argument(
        "--source",
        type=Path,
        default=None,
        help="heartlm checkout copied into the image (default: the one heartlm runs from)",
    )
    parser.add_argument("--port", type=int, default=29500, help="rendezvous port on the head node")
    parser.add_argument("--max-restarts", type=int, default=0, help="torchrun group restarts")
    parser.add_argument(
        "--rdzv-timeout", type=int, default=900, help="seconds for all nodes to join"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    parser.add_argument(
        "heartlm_args", nargs=argparse.REMAINDER, help="-- then the heartlm command to run"
    )


def default_source() -> Path:
    """The checkout heartlm runs from (src layout), else the current folder."""
    here = Path(__file__).resolve().parents[3]
    return here if (here / "pyproject.toml").is_file() else Path.cwd()


def resumable(heartlm_args: list[str]) -> list[str]:
    """A training command with --resume, so the requeued job continues where it stopped
    (the first run says there is no checkpoint yet and starts at step 0)."""
    if heartlm_args[:1] and heartlm_args[0] in _RESUMABLE and "--resume" not in heartlm_args:
        return [*heartlm_args, "--resume"]
    return list(heartlm_args)


def render_all(config: SlurmConfig) -> dict[str, str]:
    """File name -> text of every file `heartlm slurm` writes."""
    container = f"apptainer exec --nv {shlex.quote(config.image)} " if config.container else ""
    extra = "".join(
        f"#SBATCH --{key}={value}\n"
        for key, value in (("partition", config.partition), ("account", config.account))
        if value
    )
    common = dict(
        job_name=config.job_name,
        gpus=config.gpus_per_node,
        cpus=config.cpus_per_task,
        time=config.time,
        sbatch_extra=extra.rstrip("\n"),
        container=container,
        max_restarts=config.max_restarts,
        heartlm_args=shlex.join(resumable(config.heartlm_args)),
        grace=GRACE_S,
        shutdown=GRACE_S - 20,
    )
    return {
        SINGLE_NODE_SCRIPT: templates.render(
            templates.SINGLE_NODE, script=SINGLE_NODE_SCRIPT, nodes=1, **common
        ),
        MULTI_NODE_SCRIPT: templates.render(
            templates.MULTI_NODE,
            script=MULTI_NODE_SCRIPT,
            nodes=config.nodes,
            port=config.port,
            rdzv_timeout=config.rdzv_timeout_s,
            **common,
        ),
        APPTAINER_DEF: templates.render(
            templates.APPTAINER_DEF,
            image=config.image,
            base_image=config.base_image,
            source=config.source.resolve(),
        ),
    }


def run(args: argparse.Namespace) -> int:
    heartlm_args = list(args.heartlm_args)
    if heartlm_args[:1] == ["--"]:
        heartlm_args = heartlm_args[1:]
    config = SlurmConfig(
        out=args.out,
        heartlm_args=heartlm_args,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        cpus_per_task=args.cpus_per_task,
        time=args.time,
        partition=args.partition,
        account=args.account,
        job_name=args.job_name,
        image=args.image,
        container=not args.no_container,
        base_image=args.base_image,
        source=args.source or default_source(),
        port=args.port,
        max_restarts=args.max_restarts,
        rdzv_timeout_s=args.rdzv_timeout,
    )
    try:
        config.validate()
    except ValueError as exc:
        raise HeartlmError(str(exc)) from None
    files = render_all(config)
    with staged_dir(config.out, args.overwrite) as stage:
        for name, text in files.items():
            path = stage / name
            path.write_text(text)
            if name.endswith(".sbatch"):
                os.chmod(path, 0o755)
        write_run_json(stage, "slurm", config, counts={"files": len(files)})
    for name in files:
        print(config.out / name)
    logger.info("submit with: sbatch %s", config.out / MULTI_NODE_SCRIPT)
    return 0
