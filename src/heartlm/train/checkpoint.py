"""Sharded, atomic, resumable checkpoints through torch.distributed.checkpoint.

A checkpoint is `ROOT/step_00000100/`: DCP shards of {model, optim, rng}, `meta.json`
(step, model config, vocabulary, window, objective), copies of run files it belongs with
(`metrics.jsonl`) and `manifest.json` (every file's SHA-256). It is written to
`ROOT/.step_00000100.tmp` by every rank and renamed by rank 0 once all are done.
`get_state_dict` / `set_state_dict` give DDP, FSDP2 and a plain module the same keys,
so a checkpoint loads with another process count (DCP reshards on load). Loading checks
the manifest first and reads DCP's metadata without running code (`dcp_safe`).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from heartlm.errors import HeartlmError
from heartlm.log import logger
from heartlm.outdir import atomic_write_text, write_failure
from heartlm.train import manifest
from heartlm.train.dcp_safe import SafeFileSystemReader, SafeLoadPlanner, read_metadata
from heartlm.train.distributed import DistEnv, barrier, broadcast_int

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


def step_name(step: int) -> str:
    """The folder name of the checkpoint after optimizer step `step`."""
    return f"step_{step:08d}"


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
    files: Sequence[Path] = (),
    protect: Sequence[int] = (),
    average: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Save on every rank (collective); returns the final folder. `files` (rank 0's) are
    copied in, so the checkpoint carries the run's log up to its step. Of the older
    checkpoints, the last `keep` (0: all) and those of the steps in `protect` stay.
    `average`: the weight average of `--ema` (heartlm.train.ema), saved beside the model."""
    root = Path(root)
    final = root / step_name(step)
    tmp = root / f".{step_name(step)}.tmp"
    if env.is_main:
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(".step_*.tmp"):  # saves cut off by a kill
            shutil.rmtree(stale, ignore_errors=True)
    barrier(env)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd, "rng": _rng_state()}
    if average is not None:
        state["average"] = average
    try:
        with _quiet():
            dcp.save(state, checkpoint_id=str(tmp))
        barrier(env)
        if env.is_main:
            atomic_write_text(
                tmp / "meta.json", json.dumps({**meta, "step": step}, indent=2) + "\n"
            )
            for f in files:
                if f.is_file():
                    shutil.copyfile(f, tmp / f.name)
            manifest.write_manifest(tmp)
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
            for old in list_checkpoints(root)[:-keep] if keep > 0 else []:
                if _step(old) not in protect:
                    shutil.rmtree(old, ignore_errors=True)
    except (Exception, CheckpointException) as exc:  # CheckpointException is a BaseException
        cause = write_failure(tmp) if env.is_main else None
        if env.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
        if cause is not None:
            raise cause from None
        if isinstance(exc, OSError | HeartlmError):
            raise
        raise HeartlmError(f"could not save the checkpoint ({_first_failure(exc)})", tmp) from None
    barrier(env)
    return final


def _first_failure(exc: BaseException) -> str:
    """The underlying error of a DCP CheckpointException (one per failed rank)."""
    if isinstance(exc, CheckpointException) and exc.failures:
        rank, (inner, *_) = next(iter(exc.failures.items()))
        return f"rank {rank}: {type(inner).__name__}: {str(inner)[:200]}"
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def damage(path: str | Path) -> str | None:
    """Why checkpoint folder `path` cannot be loaded safely, or None: its manifest, its
    meta.json and its DCP metadata are checked, nothing is unpickled freely."""
    path = Path(path)
    why = manifest.damage(path)
    if why is None:
        try:
            read_meta(path)
            read_metadata(path)
        except HeartlmError as exc:
            why = exc.message
    return why


def select_checkpoint(root: str | Path, quiet: bool = False) -> Path | None:
    """The newest intact checkpoint under `root` (None when there is none at all); damaged
    newer ones are named and skipped; only damaged ones is one HeartlmError."""
    damaged = []
    for path in reversed(list_checkpoints(root)):
        why = damage(path)
        if why is None:
            if damaged and not quiet:
                logger.warning(
                    "%s; resuming from the newest intact checkpoint, %s",
                    "; ".join(damaged),
                    path.name,
                )
            return path
        damaged.append(f"{path.name} is damaged ({why})")
    if damaged:
        raise HeartlmError(f"no intact checkpoint to resume from: {'; '.join(damaged)}", root)
    return None


def resume_point(root: str | Path, env: DistEnv) -> Path | None:
    """`select_checkpoint` on rank 0, the same choice on every rank (a collective)."""
    chosen, error = None, None
    if env.is_main:
        try:
            chosen = select_checkpoint(root)
        except HeartlmError as exc:
            error = exc
    step = broadcast_int(-2 if error else -1 if chosen is None else _step(chosen), env)
    if error is not None:
        raise error
    if step == -2:
        raise HeartlmError("no intact checkpoint to resume from (see rank 0)", root)
    return None if step == -1 else Path(root) / step_name(step)


def _step(path: Path) -> int:
    return int(_NAME.match(path.name).group(1))


def read_meta(path: str | Path) -> dict[str, Any]:
    path = Path(path) / "meta.json"
    try:
        meta = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:  # ValueError: bad JSON or not UTF-8
        raise HeartlmError(f"unreadable checkpoint metadata ({exc})", path) from None
    if not isinstance(meta, dict) or not isinstance(meta.get("step"), int):
        raise HeartlmError("checkpoint metadata without a step", path)
    return meta


def _as_flags(settings: dict[str, float]) -> str:
    return " ".join(f"--{key.replace('_', '-')} {value:g}" for key, value in settings.items())


def _setting(settings: dict[str, Any], key: str) -> str:
    """An objective setting as a flag takes it: a list comma-joined ("off" when empty)."""
    value = settings[key]
    if isinstance(value, list | tuple):
        return ",".join(map(str, value)) or "off"
    return str(value)


def _listed(value: Any) -> Any:
    """A tuple as the list JSON gives back, so that a saved setting compares equal."""
    return list(value) if isinstance(value, tuple) else value


def _network_view(model: dict[str, Any]) -> set[int]:
    """The columns a model's per-beat network reads as zero: its own hidden ones and those
    --inputs hides from the whole model (a run written before the network's own list named
    them all listed only the former)."""
    return {*(model.get("beat_mlp_hidden") or ()), *(model.get("absolute_columns") or ())}


FINETUNE_RESUME_KEYS = {
    "task": "--task",
    "from_scratch": "--from-scratch",
    "label_fraction": "--label-fraction",
    "seed": "--seed",
    "train_records": "--records, --val-fraction",
    "val_records": "--records, --val-fraction",
}
"""What a fine-tuning checkpoint records of its training set, and the flags that choose it
(the seed picks the labels a label fraction keeps): a resume with another would train one
model on two sets and describe only the last."""


def _check_training_set(meta: dict[str, Any], expected: dict[str, Any], path: str | Path) -> None:
    """Refuse a fine-tuning resume whose task, initialisation, label share or records differ
    (compared where the checkpoint and the run both record them: a checkpoint from before
    they were recorded, or a check that does not know them yet, compares nothing)."""
    for key, flag in FINETUNE_RESUME_KEYS.items():
        if key not in meta or key not in expected or meta[key] == expected[key]:
            continue
        saved, want = meta[key], expected.get(key)
        if key.endswith("_records"):
            gone = sorted(set(saved or []) - set(want or []))
            new = sorted(set(want or []) - set(saved or []))
            which = "training" if key == "train_records" else "validation"
            shown = ", ".join([*(f"-{r}" for r in gone[:3]), *(f"+{r}" for r in new[:3])])
            raise HeartlmError(
                f"checkpoint was trained with other {which} records ({shown or 'another order'}; "
                f"{flag})",
                path,
            )
        name = key.replace("_", " ")
        raise HeartlmError(f"checkpoint was trained with {name} {saved}, this run asks for "
                           f"{want} ({flag})", path)  # fmt: skip


def check_compatible(meta: dict[str, Any], expected: dict[str, Any], path: str | Path) -> None:
    """Refuse a checkpoint from another preset, vocabulary or model shape."""
    from heartlm.model.config import ModelConfig

    saved, want = meta.get("model", {}), expected.get("model", {})
    for late in ("beat_mlp_depth", "beat_mlp_context"):  # added after checkpoints were written
        if late in want:
            saved = {late: getattr(ModelConfig, late), **saved}
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
        "dropout",
        "feature_embedding",
        "local_stats",
        "beat_mlp",
        "beat_mlp_bins",
        "beat_mlp_depth",
        "beat_mlp_context",
        "beat_codes",
        "choice_critic",
        "relative_only",
        "absolute_columns",
    ):
        if key in saved and _listed(saved.get(key)) != _listed(want.get(key)):
            flag = {"relative_only": " (--inputs)", "absolute_columns": " (--inputs)",
                    "local_stats": " (--local-stats)", "beat_mlp": " (--beat-mlp)",
                    "beat_mlp_bins": " (--beat-mlp-bins)",
                    "beat_mlp_depth": " (--beat-mlp-depth)",
                    "beat_mlp_context": " (--beat-mlp-context)",
                    "choice_critic": " (--objective)"}.get(key, "")  # fmt: skip
            raise HeartlmError(
                f"checkpoint model has {key}={saved.get(key)}, this run {want.get(key)}{flag}",
                path,
            )
    # What the per-beat network reads (not its own list alone: --inputs' columns hide from it
    # too, and an older heartlm left them out of that list).
    seen, asked = _network_view(saved), _network_view(want)
    if saved.get("beat_mlp") and "beat_mlp_hidden" in saved and seen != asked:
        if saved.get("beat_codes") and seen < asked and "task" in meta:  # a fine-tuning
            raise HeartlmError(
                f"this fine-tuning's per-beat network reads columns {sorted(asked - seen)} "
                "that its pretraining hid from it (an older heartlm showed them when --inputs "
                "showed the transformer more); start it again without --resume",
                path,
            )
        raise HeartlmError(
            f"checkpoint model's per-beat network reads without columns {sorted(seen)}, this "
            f"run's without {sorted(asked)} (pretrain --beat-mlp-inputs, --inputs)",
            path,
        )
    _check_training_set(meta, expected, path)
    for key in ("objective", "window"):
        if key in meta and meta.get(key) != expected.get(key):
            raise HeartlmError(
                f"checkpoint was trained with {key} {meta.get(key)}, this run asks for "
                f"{expected.get(key)} (--{key})",
                path,
            )
    # A checkpoint that records none of these settings predates them all: none is compared.
    # One that records some lacks only settings added since, each at its default then.
    saved, want = meta.get("objective_settings") or {}, expected.get("objective_settings") or {}
    was = {**(expected.get("objective_defaults") or {}), **saved} if saved else {}
    keys = [k for k in sorted(want) if k in was and _listed(was[k]) != _listed(want[k])]
    if keys:
        flag = {k: "--" + k.replace("_", "-") for k in keys}
        changed = ", ".join(f"{flag[k]} {_setting(was, k)} -> {_setting(want, k)}"
                            for k in keys)  # fmt: skip
        raise HeartlmError(f"checkpoint was trained with another objective ({changed})", path)
    # Older checkpoints record fewer of these settings (none at first): only shared ones count.
    before, now = meta.get("optimizer") or {}, expected.get("optimizer") or {}
    changed = sorted(k for k in before.keys() & now.keys() if before[k] != now[k])
    if changed:
        was, asked = {k: before[k] for k in changed}, {k: now[k] for k in changed}
        raise HeartlmError(f"the checkpoint was trained with {_as_flags(was)}; resume "
                           f"with the same, not {_as_flags(asked)}", path)  # fmt: skip
    saved_book, book = meta.get("codebook_hash"), expected.get("codebook_hash")
    if saved_book != book:
        raise HeartlmError(
            f"checkpoint was trained on tokens of codebook {saved_book}, these tokens are of "
            f"codebook {book} (tokenized with another codebook?)",
            path,
        )


def load_checkpoint(
    path: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    restore_rng: bool = True,
    verified: bool = False,
    average: dict[str, torch.Tensor] | None = None,
) -> dict[str, Any]:
    """Load into an (already wrapped) model and its optimizer; returns meta.json, with
    "average_loaded": whether `average` (a weight average's tensors, loaded in place) was
    in the checkpoint. The manifest is checked first (unless `verified`: `resume_point`
    just did); nothing in the folder is unpickled freely."""
    path = Path(path)
    why = None if verified else manifest.damage(path)
    if why is not None:
        raise HeartlmError(f"damaged checkpoint ({why})", path)
    meta = read_meta(path)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd, "rng": _rng_state()}
    saved = read_metadata(path).state_dict_metadata
    missing = [k for k in model_sd if f"model.{k}" not in saved]
    if missing:
        raise HeartlmError(f"checkpoint lacks model weights {missing[:3]}", path)
    has_average = average is not None and all(f"average.{k}" in saved for k in average)
    if has_average:
        state["average"] = average
    try:
        # Partial: optimizer entries of parameters that never had a gradient, and the CUDA
        # RNG state of a CPU checkpoint, may be absent; every model weight was checked above.
        with _quiet():
            dcp.load(
                state,
                storage_reader=SafeFileSystemReader(str(path)),
                planner=SafeLoadPlanner(allow_partial_load=True),
            )
    except HeartlmError:
        raise
    except (Exception, CheckpointException) as exc:  # CheckpointException is a BaseException
        raise HeartlmError(
            f"checkpoint does not fit this model ({_first_failure(exc)})", path
        ) from None
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )
    if restore_rng:
        torch.set_rng_state(state["rng"]["cpu"])
        if "cuda" in state["rng"]:
            torch.cuda.set_rng_state(state["rng"]["cuda"])
    return {**meta, "average_loaded": has_average}
