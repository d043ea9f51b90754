"""What the study ran on: GPUs, driver, CUDA, NCCL, torch, topology, CPU."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from typing import Any

from heartlm.runinfo import cpu_model, versions


def _run(cmd: list[str], timeout: float = 20.0) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def gpus() -> list[dict[str, str]]:
    """One entry per visible NVIDIA GPU (empty without nvidia-smi or GPUs)."""
    fields = "index,name,memory.total,driver_version,power.limit,pci.bus_id"
    out = _run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"])
    if not out:
        return []
    keys = fields.split(",")
    return [
        dict(zip(keys, (v.strip() for v in line.split(",")), strict=False))
        for line in out.splitlines()
    ]


def gpu_count() -> int:
    """GPUs torch can use here (0 on a CPU machine)."""
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def _torch_info() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {}
    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        nccl = torch.cuda.nccl.version() if torch.cuda.is_available() else None
        info["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl
    except (AttributeError, RuntimeError):
        info["nccl"] = None
    info["cudnn"] = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    return info


def capture() -> dict[str, Any]:
    """Everything environment.json records; cheap enough to call before every grid."""
    gpu_list = gpus()
    return {
        "host": platform.node(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "gpu_count": gpu_count(),
        "gpus": gpu_list,
        "gpu_model": gpu_list[0]["name"] if gpu_list else None,
        "driver": gpu_list[0].get("driver_version") if gpu_list else None,
        **_torch_info(),
        "versions": versions(),
        "topology": _run(["nvidia-smi", "topo", "-m"]),
    }
