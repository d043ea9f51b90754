"""`--deterministic`: only kernels that give the same result for the same inputs, so that the
same seed and flags give the same weights on the same kind of machine (as Hugging Face's
`enable_full_determinism` and Lightning's `deterministic=True` do)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

CUBLAS_WORKSPACE = "CUBLAS_WORKSPACE_CONFIG"
DETERMINISTIC_WORKSPACES = (":4096:8", ":16:8")
"""The cuBLAS workspace settings under which its kernels are deterministic (CUDA's docs).
PyTorch reads the variable once, at the process's first cuBLAS call, and in deterministic
mode refuses every cuBLAS call if it was unset then: a command sets it before any CUDA work,
a library caller before its first matmul on the GPU."""


@contextlib.contextmanager
def deterministic_kernels(on: bool) -> Iterator[None]:
    """Inside, with `on`: PyTorch's deterministic algorithms (an operation without a
    deterministic kernel raises, naming itself), cuDNN without autotuning, torch.compile
    without choices made by timing (Inductor's `deterministic`) and a cuBLAS workspace it is
    deterministic with (a deterministic one already set is kept). After: the settings as they
    were, so a library caller's process is left as it found it."""
    if not on:
        yield
        return
    cudnn = torch.backends.cudnn
    before = (torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled(),
              cudnn.deterministic, cudnn.benchmark)  # fmt: skip
    workspace = os.environ.get(CUBLAS_WORKSPACE)
    if workspace not in DETERMINISTIC_WORKSPACES:
        os.environ[CUBLAS_WORKSPACE] = DETERMINISTIC_WORKSPACES[0]
    torch.use_deterministic_algorithms(True)
    cudnn.deterministic, cudnn.benchmark = True, False
    try:
        with _inductor_deterministic():
            yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        cudnn.deterministic, cudnn.benchmark = before[2], before[3]
        if workspace is None:
            os.environ.pop(CUBLAS_WORKSPACE, None)
        else:
            os.environ[CUBLAS_WORKSPACE] = workspace


def _inductor_deterministic() -> contextlib.AbstractContextManager[object]:
    """Inductor's switch off autotuning and padding decisions made by timing, where this
    torch has it."""
    from torch._inductor import config as inductor

    if not hasattr(inductor, "deterministic"):
        return contextlib.nullcontext()
    return inductor.patch(deterministic=True)


NO_DETERMINISTIC_KERNEL = "does not have a deterministic implementation"
"""What PyTorch's deterministic mode says of an operation it has no such kernel for."""


def deterministic_refusal(message: str) -> str | None:
    """The one line to say of PyTorch's deterministic mode refusing: an operation without a
    deterministic kernel (named; a compiled graph's error carries it on a later line), or
    cuBLAS used in this process before its workspace variable was set; None if neither."""
    for line in message.splitlines():
        if NO_DETERMINISTIC_KERNEL in line:
            return line.split(",")[0].strip()
    if CUBLAS_WORKSPACE in message:
        return (f"cuBLAS ran in this process before {CUBLAS_WORKSPACE} was set; set it to "
                f"{DETERMINISTIC_WORKSPACES[0]} before the process starts")  # fmt: skip
    return None
