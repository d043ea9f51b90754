"""safetensors files written atomically and read with one-line errors.

safetensors reports every problem as a SafetensorError, a full disk as much as a damaged
header; here the first becomes the OSError it was (the CLI names the file and the cause)
and the second a HeartlmError naming the file. It also creates files readable by their
owner only; here they get the mode any new file gets (the umask's).
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from heartlm.errors import HeartlmError


def save_tensors(
    tensors: dict[str, torch.Tensor], path: str | Path, metadata: dict[str, str] | None = None
) -> None:
    """Write `path` under a temporary name, then rename it into place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        save_file(tensors, str(tmp), metadata=metadata)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except SafetensorError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        code = re.search(r"os error (\d+)", str(exc))
        if code:
            raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(path)) from None
        raise HeartlmError(f"cannot write ({exc})", path) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def load_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of `path`; a damaged or foreign file is one HeartlmError."""
    try:
        return load_file(str(path))
    except SafetensorError as exc:
        raise HeartlmError(f"not a readable safetensors file ({exc})", path) from None
