"""Exported weights: RUN/model.safetensors + RUN/config.json, written and read without pickle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from heartlm.errors import HeartlmError
from heartlm.model.config import ModelConfig
from heartlm.model.hlm import HeartLM
from heartlm.outdir import atomic_write_text
from heartlm.runinfo import read_json
from heartlm.tensorfile import load_tensors, save_tensors

FORMAT = "heartlm-model"
VERSION = 2


def export_model(
    run_dir: str | Path, state: dict[str, torch.Tensor], cfg: ModelConfig, info: dict[str, Any]
) -> None:
    """Write the weights and config (`info`: window, objective, codebook hash, ...)."""
    run_dir = Path(run_dir)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
    save_tensors(tensors, run_dir / "model.safetensors", metadata={"format": FORMAT})
    config = {"format": FORMAT, "version": VERSION, "model": cfg.to_dict(), **info}
    atomic_write_text(run_dir / "config.json", json.dumps(config, indent=2) + "\n")


def read_config(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "config.json"
    config = read_json(run_dir, "config.json", "no config.json: not an exported heartlm run")
    if config.get("format") != FORMAT or "model" not in config:
        raise HeartlmError("config.json is not a heartlm model config", path)
    if config.get("version") != VERSION:
        raise HeartlmError(
            f"model format version {config.get('version')}, expected {VERSION}", path
        )
    return config


def load_pretrained(
    run_dir: str | Path,
    preset: str | None = None,
    vocab_size: int | None = None,
    **overrides: Any,
) -> tuple[HeartLM, dict[str, Any]]:
    """The exported model of a run and its config; refuses another preset or vocabulary.

    `overrides` change head-only fields (`n_beat_classes`, `n_window_classes`, `causal`,
    `cls_token`); heads whose shape changes are left freshly initialised.
    """
    run_dir = Path(run_dir)
    config = read_config(run_dir)
    saved = ModelConfig.from_dict(config["model"])
    if preset is not None and preset != saved.preset:
        raise HeartlmError(f"was trained with preset '{saved.preset}', not '{preset}'", run_dir)
    if vocab_size is not None and vocab_size != saved.vocab_size:
        raise HeartlmError(
            f"model vocabulary is {saved.vocab_size} tokens, the tokens have {vocab_size}"
            " (tokenized with another codebook?)",
            run_dir,
        )
    cfg = ModelConfig.from_dict({**saved.to_dict(), **overrides})
    model = HeartLM(cfg)
    path = run_dir / "model.safetensors"
    if not path.is_file():
        raise HeartlmError("model.safetensors is missing", run_dir)
    state = load_tensors(path)
    own = model.state_dict()
    mismatched = sorted(set(state) ^ set(own))
    if mismatched:
        raise HeartlmError(f"weights do not fit the model config ({mismatched[:3]})", path)
    fitting = {k: v for k, v in state.items() if own[k].shape == v.shape}
    wrong = [
        k for k in fitting.keys() ^ state.keys() if not k.endswith(("_head.weight", "_head.bias"))
    ]
    if wrong:
        raise HeartlmError(f"weights do not fit the model config ({wrong[:3]})", path)
    model.load_state_dict(fitting, strict=False)
    return model, config
