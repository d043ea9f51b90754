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
"""The cuBLAS workspace settings under which its kernels are deterministic (CUDA's docs);
PyTorch refuses a cuBLAS call in deterministic mode under any other."""


@contextlib.contextmanager
def deterministic_kernels(on: bool) -> Iterator[None]:
    """Inside, with `on`: PyTorch's deterministic algorithms (an operation without a
    deterministic kernel raises, naming itself), cuDNN without autotuning and a cuBLAS
    workspace it is deterministic with (a deterministic one already set is kept). After:
    the settings as they were, so a library caller's process is left as it found it."""
    if not on:
        yield
        return
    cudnn = torch.backends.cudnn
    before = (torch.are_deterministic_algorithms_enabled(), cudnn.deterministic, cudnn.benchmark)
    workspace = os.environ.get(CUBLAS_WORKSPACE)
    if workspace not in DETERMINISTIC_WORKSPACES:
        os.environ[CUBLAS_WORKSPACE] = DETERMINISTIC_WORKSPACES[0]
    torch.use_deterministic_algorithms(True)
    cudnn.deterministic, cudnn.benchmark = True, False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0])
        cudnn.deterministic, cudnn.benchmark = before[1], before[2]
        if workspace is None:
            os.environ.pop(CUBLAS_WORKSPACE, None)
        else:
            os.environ[CUBLAS_WORKSPACE] = workspace
