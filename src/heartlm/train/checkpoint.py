"""Sharded, atomic, resumable checkpoints through torch.distributed.checkpoint (no pickle).

A checkpoint is `ROOT/step_00000100/`: DCP shards of {model, optim, rng} plus
`meta.json` (step, model config, vocabulary, window, objective). It is written to
`ROOT/.step_00000100.tmp` by every rank and renamed by rank 0 once all are done.
`get_state_dict` / `set_state_dict` give DDP, FSDP2 and a plain module the same keys,
so a checkpoint loads with another process count (DCP reshards on load).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from heartlm.errors import HeartlmError
from heartlm.outdir import atomic_write_text
from heartlm.train.distributed import DistEnv, barrier

_NAME = re.compile(r"^step_(\d{8})$")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """One process without a process group is a normal way to run; DCP warns about it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _rng_state() -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def list_checkpoints(root: str | Path) -> list[Path]:
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _NAME.match(p.name)]
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))


def latest_checkpoint(root: str | Path) -> Path | None:
    found = [p for p in list_checkpoints(root) if (p / "meta.json").is_file()]
    return found[-1] if found else None


def save_checkpoint(
    root: str | Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    meta: dict[str, Any],
    env: DistEnv,
    keep: int = 2,
) -> Path:
    """Save on every rank (collective); returns the final folder."""
    root = Path(root)
    final = root / f"step_{step:08d}"
    tmp = root / f".step_{step:08d}.tmp"
    if env.is_main:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    barrier(env)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd, "rng": _rng_state()}
    with _quiet():
        dcp.save(state, checkpoint_id=str(tmp))
    barrier(env)
    if env.is_main:
        atomic_write_text(tmp / "meta.json", json.dumps({**meta, "step": step}, indent=2) + "\n")
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        for old in list_checkpoints(root)[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    barrier(env)
    return final


def read_meta(path: str | Path) -> dict[str, Any]:
    path = Path(path) / "meta.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise HeartlmError(f"unreadable checkpoint metadata ({exc})", path) from None


def check_compatible(meta: dict[str, Any], expected: dict[str, Any], path: str | Path) -> None:
    """Refuse a checkpoint from another preset, vocabulary or model shape."""
    saved, want = meta.get("model", {}), expected.get("model", {})
    if saved.get("preset") != want.get("preset"):
        raise HeartlmError(
            f"checkpoint is from preset '{saved.get('preset')}', this run uses "
            f"'{want.get('preset')}' (--preset)",
            path,
        )
    if saved.get("vocab_size") != want.get("vocab_size"):
        raise HeartlmError(
            f"checkpoint vocabulary is {saved.get('vocab_size')} tokens, the tokens have "
            f"{want.get('vocab_size')} (tokenized with another codebook?)",
            path,
        )
    for key in (
        "rhythm_vocab_size",
        "d_model",
        "n_layers",
        "n_heads",
        "d_ff",
        "max_len",
        "causal",
        "cls_token",
        "norm",
        "bias",
    ):
        if key in saved and saved.get(key) != want.get(key):
            raise HeartlmError(
                f"checkpoint model has {key}={saved.get(key)}, this run {want.get(key)}", path
            )
    for key in ("objective", "window"):
        if key in meta and meta.get(key) != expected.get(key):
            raise HeartlmError(
                f"checkpoint was trained with {key} {meta.get(key)}, this run asks for "
                f"{expected.get(key)} (--{key})",
                path,
            )


def load_checkpoint(
    path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer, restore_rng: bool = True
) -> dict[str, Any]:
    """Load into an (already wrapped) model and its optimizer; returns meta.json."""
    path = Path(path)
    meta = read_meta(path)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd, "rng": _rng_state()}
    try:
        saved = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
        missing = [k for k in model_sd if f"model.{k}" not in saved]
        if missing:
            raise HeartlmError(f"checkpoint lacks model weights {missing[:3]}", path)
        # Partial: optimizer entries of parameters that never had a gradient, and the CUDA
        # RNG state of a CPU checkpoint, may be absent; every model weight was checked above.
        with _quiet():
            dcp.load(
                state, checkpoint_id=str(path), planner=DefaultLoadPlanner(allow_partial_load=True)
            )
    except HeartlmError:
        raise
    except Exception as exc:  # DCP reports a mismatch as CheckpointException and others
        raise HeartlmError(f"checkpoint does not fit this model ({str(exc)[:300]})", path) from None
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )
    if restore_rng:
        torch.set_rng_state(state["rng"]["cpu"])
        if "cuda" in state["rng"]:
            torch.cuda.set_rng_state(state["rng"]["cuda"])
    return meta
