"""Reading torch.distributed.checkpoint folders without running code from them.

DCP keeps a checkpoint's `.metadata` as a pickle and reads its non-tensor entries (the
optimizer's param_groups) with a `torch.load` that may build any object, so a crafted
checkpoint could run anything on load. Here `.metadata` goes through an unpickler that can build
only DCP's own metadata classes and a few plain torch values, and the other entries go
through torch's weights-only loader. Tensors DCP already reads weights-only.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem

from heartlm.errors import HeartlmError

METADATA = ".metadata"

# Everything DCP (torch 2.4 .. 2.13) writes into `.metadata` for model, optimizer and RNG
# state of plain, DDP and FSDP2 modules. Each is a data class or a value constructor.
_ALLOWED: dict[str, frozenset[str]] = {
    "torch.distributed.checkpoint.metadata": frozenset(
        {
            "Metadata",
            "MetadataIndex",
            "StorageMeta",
            "TensorProperties",
            "TensorStorageMetadata",
            "BytesStorageMetadata",
            "ChunkStorageMetadata",
            "_MEM_FORMAT_ENCODING",
        }
    ),
    "torch.distributed.checkpoint.filesystem": frozenset({"_StorageInfo"}),
    "torch.serialization": frozenset({"_get_layout"}),
    "torch": frozenset({"Size"}),
    "pathlib": frozenset({"PosixPath", "PurePosixPath"}),
    "collections": frozenset({"OrderedDict"}),
}


class _MetadataUnpickler(pickle.Unpickler):
    """An unpickler that knows only the classes a DCP `.metadata` is made of."""

    def find_class(self, module: str, name: str) -> Any:
        dtype = module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        if dtype or name in _ALLOWED.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} has no place in checkpoint metadata")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent references have no place in checkpoint metadata")


def read_metadata(folder: str | Path, name: str = METADATA) -> Metadata:
    """The DCP metadata of a checkpoint folder; anything else is one HeartlmError."""
    path = Path(folder) / name
    try:
        with open(path, "rb") as f:
            metadata = _MetadataUnpickler(f).load()
    except OSError as exc:
        raise HeartlmError(f"unreadable checkpoint metadata ({exc.strerror})", path) from None
    except Exception as exc:  # a damaged or crafted pickle fails in many ways
        raise HeartlmError(f"refused checkpoint metadata ({exc})", path) from None
    if not isinstance(metadata, Metadata):
        raise HeartlmError(f"checkpoint metadata is a {type(metadata).__name__}", path)
    return metadata


class SafeFileSystemReader(dcp.FileSystemReader):
    """`FileSystemReader` whose `.metadata` goes through the restricted unpickler."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        name = METADATA if rank is None else f"__{rank}{METADATA}"
        metadata = read_metadata(os.fspath(self.path), name)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """`DefaultLoadPlanner` that reads non-tensor entries weights-only (plain values)."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        # The same placement as DefaultLoadPlanner.load_bytes, with a loader that cannot
        # build arbitrary objects.
        from torch.distributed.checkpoint._traverse import set_element

        obj = torch.load(value, weights_only=True)
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj
