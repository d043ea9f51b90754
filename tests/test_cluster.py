"""`heartlm slurm`: the generated sbatch scripts and Apptainer definition."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from heartlm.cli import main

BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash not found")


def _slurm(out: Path, *extra: str, heartlm: tuple[str, ...] = ("pretrain", "TOK", "RUN")) -> int:
    return main(["slurm", "--out", str(out), *extra, "--", *heartlm])


@needs_bash
def test_scripts_are_valid_bash(tmp_path: Path) -> None:
    assert _slurm(tmp_path / "s") == 0
    scripts = sorted((tmp_path / "s").glob("*.sbatch"))
    assert [p.name for p in scripts] == ["multi_node.sbatch", "single_node.sbatch"]
    for script in scripts:
        check = subprocess.run([BASH, "-n", str(script)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        assert os.access(script, os.X_OK)


def test_single_node_script_flags(tmp_path: Path) -> None:
    assert _slurm(tmp_path / "s", "--gpus-per-node", "8", "--cpus-per-task", "64") == 0
    text = (tmp_path / "s" / "single_node.sbatch").read_text()
    assert "#SBATCH --nodes=1\n" in text
    assert "#SBATCH --gpus-per-node=8\n" in text
    assert "#SBATCH --cpus-per-task=64\n" in text
    assert "--standalone" in text
    assert "--nproc-per-node=8" in text
    assert "srun --cpu-bind=cores apptainer exec --nv heartlm.sif torchrun" in text
    assert "-m heartlm pretrain TOK RUN" in text


def test_multi_node_script_uses_c10d_rendezvous(tmp_path: Path) -> None:
    args = ("--nodes", "4", "--gpus-per-node", "2", "--partition", "gpu", "--time", "1-00:00:00")
    assert _slurm(tmp_path / "s", *args, "--max-restarts", "3", "--image", "/img/h.sif") == 0
    text = (tmp_path / "s" / "multi_node.sbatch").read_text()
    for expected in (
        "#SBATCH --nodes=4\n",
        "#SBATCH --partition=gpu\n",
        "#SBATCH --time=1-00:00:00\n",
        'scontrol show hostnames "$SLURM_JOB_NODELIST"',
        '--nnodes="$SLURM_NNODES"',
        "--rdzv-backend=c10d",
        '--rdzv-id="$SLURM_JOB_ID"',
        "--max-restarts=3",
        "apptainer exec --nv /img/h.sif torchrun",
        "export NCCL_NVLS_ENABLE=0",
        "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1",
        "NCCL_IB_HCA",
    ):
        assert expected in text, expected
    assert "--standalone" not in text
    assert "#SBATCH --account" not in text


@needs_bash
def test_multi_node_script_runs_torchrun_on_the_head_node(tmp_path: Path) -> None:
    """Run the script with stand-ins for scontrol/srun/apptainer and check the final command."""
    heartlm_args = ("pretrain", "my tokens", "RUN", "--batch", "64")
    assert _slurm(tmp_path / "s", "--gpus-per-node", "4", heartlm=heartlm_args) == 0
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "srun.txt"
    stubs = {
        "scontrol": 'printf "gpu-017\\ngpu-018\\n"',
        "srun": f'printf "%s\\n" "$OMP_NUM_THREADS" "$PET_LOG_DIR" "$@" > {record}',
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_NODELIST": "gpu-[017-018]",
        "SLURM_NNODES": "2",
        "SLURM_JOB_ID": "4242",
        "SLURM_CPUS_PER_TASK": "32",
        "SLURM_SUBMIT_DIR": str(tmp_path),
    }
    script = tmp_path / "s" / "multi_node.sbatch"
    done = subprocess.run([BASH, str(script)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    omp, log_dir, *argv = record.read_text().splitlines()
    assert omp == "8"  # 32 cores / 4 workers
    assert log_dir == str(tmp_path / "torchrun-logs")  # not a torchelastic_* folder per node
    assert argv[:5] == ["--cpu-bind=cores", "apptainer", "exec", "--nv", "heartlm.sif"]
    assert "--rdzv-endpoint=gpu-017:29500" in argv
    assert "--nnodes=2" in argv
    assert "--rdzv-id=4242" in argv
    # A requeued job continues from its checkpoint.
    assert argv[-len(heartlm_args) - 1 :] == [*heartlm_args, "--resume"]


def test_apptainer_definition(tmp_path: Path) -> None:
    src = tmp_path / "checkout"
    assert _slurm(tmp_path / "s", "--source", str(src)) == 0
    text = (tmp_path / "s" / "heartlm.def").read_text()
    lines = text.splitlines()
    assert "Bootstrap: docker" in lines
    base = next(line for line in lines if line.startswith("From: "))
    assert base.startswith("From: pytorch/pytorch:") and "cuda" in base and "runtime" in base
    assert f"{src.resolve()}/src /opt/heartlm-src/src" in text
    assert "pip install --no-cache-dir /opt/heartlm-src" in text


def test_no_container_runs_torchrun_directly(tmp_path: Path) -> None:
    assert _slurm(tmp_path / "s", "--no-container") == 0
    text = (tmp_path / "s" / "multi_node.sbatch").read_text()
    assert "apptainer" not in text
    assert "srun --cpu-bind=cores torchrun" in text


def test_heartlm_args_are_quoted(tmp_path: Path) -> None:
    args = ("pretrain", "tokens dir", "RUN", "--tag", "a;b")
    assert _slurm(tmp_path / "s", heartlm=args) == 0
    text = (tmp_path / "s" / "single_node.sbatch").read_text()
    line = next(line for line in text.splitlines() if "-m heartlm" in line)
    assert line.endswith(" &")  # in the background, so the time-limit trap can run
    assert shlex.split(line.split("-m heartlm", 1)[1][:-2]) == [*args, "--resume"]


def test_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s"
    assert _slurm(out, "--nodes", "2") == 0
    before = {p.name: p.read_text() for p in out.iterdir()}
    assert _slurm(out, "--nodes", "8") == 2
    assert "already holds results" in capsys.readouterr().err
    assert {p.name: p.read_text() for p in out.iterdir()} == before
    assert _slurm(out, "--nodes", "8", "--overwrite") == 0
    assert "#SBATCH --nodes=8\n" in (out / "multi_node.sbatch").read_text()


@pytest.mark.parametrize(
    ("extra", "heartlm", "message"),
    [
        ((), (), "give the heartlm command after '--'"),
        ((), ("train", "x"), "'train' is not a heartlm command"),
        ((), ("pretrain", "T", "R", "--nproc", "4"), "--nproc is set by the scripts"),
        (("--nodes", "0"), ("pretrain",), "--nodes must be at least 1"),
        (("--time", "soon"), ("pretrain",), "--time must look like"),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    heartlm: tuple[str, ...],
    message: str,
) -> None:
    assert _slurm(tmp_path / "s", *extra, heartlm=heartlm) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "s").exists()
