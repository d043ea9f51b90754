"""Where this process runs: its rank in a torchrun job and its device.

The one reader of torchrun's RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE, and the one
place a device name ("auto", "cpu", "cuda", "cuda:N") becomes a `torch.device`. torch is
imported only to pick a device, so commands that need no device stay light.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from heartlm.errors import HeartlmError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    worker: bool = False
    """started by torchrun (LOCAL_RANK is set)"""


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise HeartlmError(f"environment variable {name}={value!r} is not an integer") from None


def ranks() -> Ranks:
    """This process's place in the job torchrun (or srun through it) describes."""
    world = _env_int("WORLD_SIZE", 1)
    return Ranks(
        rank=_env_int("RANK", 0),
        world_size=world,
        local_rank=_env_int("LOCAL_RANK", 0),
        local_world_size=_env_int("LOCAL_WORLD_SIZE", world),
        worker="LOCAL_RANK" in os.environ,
    )


def is_main_process() -> bool:
    """True on rank 0 of a torchrun/srun job, and in a plain process."""
    return os.environ.get("RANK", "0") in ("0", "")


def pick_device(name: str | None = "auto", local_rank: int = 0) -> torch.device:
    """The device `name` asks for: "auto" (or None) is CUDA when there is one; a bare
    "cuda" is this process's GPU (`local_rank`). Unknown names and missing GPUs are one
    HeartlmError naming --device."""
    import torch

    name = name or "auto"
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise HeartlmError(f"--device {name!r} is not a torch device") from None
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        raise HeartlmError(f"--device {name}: no CUDA device is available")
    index = local_rank if device.index is None else device.index
    if device.index is not None and index >= torch.cuda.device_count():
        raise HeartlmError(f"--device {name}: there are {torch.cuda.device_count()} GPUs")
    if index >= torch.cuda.device_count():
        raise HeartlmError(
            f"{ranks().local_world_size} processes on this node but only "
            f"{torch.cuda.device_count()} GPUs: use --nproc {torch.cuda.device_count()} or fewer"
        )
    return torch.device("cuda", index)
