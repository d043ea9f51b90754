"""Exported weights: RUN/model.safetensors + RUN/config.json, written and read without pickle.

The layout a Hugging Face user expects (`save_pretrained` / `from_pretrained` of a local
folder; `config.json` names the `model_type` and the tokenizer's codebook hash), written
here rather than through huggingface_hub's `PyTorchModelHubMixin`: the mixin's config.json
holds only the constructor's arguments, while a heartlm run's must also carry its data
facts (window, objective, codebook hash) that evaluate, finetune and embed check, and its
`from_pretrained` would reach for the Hub when a folder is missing. A folder written here
can still be uploaded as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from heartlm.errors import HeartlmError
from heartlm.model.config import ModelConfig
from heartlm.outdir import atomic_write_text
from heartlm.runinfo import check_json_dataclass, json_field, read_json
from heartlm.tensorfile import load_tensors, save_tensors

FORMAT = "heartlm-model"
VERSION = 2
MODEL_TYPE = "heartlm"


def export_model(
    run_dir: str | Path, state: dict[str, torch.Tensor], cfg: ModelConfig, info: dict[str, Any]
) -> None:
    """Write the weights and config (`info`: window, objective, codebook hash, ...)."""
    run_dir = Path(run_dir)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
    save_tensors(tensors, run_dir / "model.safetensors", metadata={"format": FORMAT})
    config = {"format": FORMAT, "version": VERSION, "model_type": MODEL_TYPE,
              "codebook_hash": None, "model": cfg.to_dict(), **info}  # fmt: skip
    atomic_write_text(run_dir / "config.json", json.dumps(config, indent=2) + "\n")


def read_config(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "config.json"
    config = read_json(run_dir, "config.json", "no config.json: not an exported heartlm run")
    if config.get("format") != FORMAT or "model" not in config:
        raise HeartlmError("config.json is not a heartlm model config", path)
    version = json_field(config, "version", int, path)
    if version != VERSION:
        raise HeartlmError(f"model format version {version}, expected {VERSION}", path)
    # fields a newer or older heartlm wrote are ignored, as ModelConfig.from_dict does
    check_json_dataclass(ModelConfig, config["model"], path, "model", unknown_ok=True)
    return config


def _saved_model_config(config: dict[str, Any], path: Path) -> ModelConfig:
    """The model config of a read config.json; a shape no model can have (heads that do
    not divide the width, ...) is one line naming the file."""
    try:
        return ModelConfig.from_dict(config["model"])
    except ValueError as exc:
        raise HeartlmError(f"model: {exc}", path) from None


HEAD_SUFFIXES = ("_head.weight", "_head.bias", "beat_mlp.out.weight", "beat_mlp.out.bias")
"""Weights whose shape follows the classes: re-initialised when a reload changes them."""


_ADDED_BY_OVERRIDE = {"local_stats": "stats_proj.", "beat_mlp": "beat_mlp."}
"""Weights that fine-tuning may add to a pretrained encoder, by the config field that adds
them: an input's projection (`local_stats`), the per-beat network (`beat_mlp`)."""


_FIXED_ONCE_ADDED = {
    "local_stats": ("local_stats", "reading statistics over {} beats a side", "--local-stats"),
    "beat_mlp": ("beat_mlp", "with a per-beat network {} wide", "--beat-mlp"),
    "beat_mlp_bins": ("beat_mlp", "with a per-beat network over {} bins", "--beat-mlp-bins"),
    "beat_mlp_depth": ("beat_mlp", "with a per-beat network {} layers deep", "--beat-mlp-depth"),
    "beat_mlp_context": (
        "beat_mlp",
        "with the per-beat network reading the transformer's state: {}",
        "--beat-mlp-context",
    ),
}
"""Fields a reload may not change once the weights they shape exist: field -> (the field
whose weights they are, what the model was trained with, the flag)."""


class Pretrained:
    """`save_pretrained` / `from_pretrained` for a model class built as `cls(ModelConfig)`."""

    cfg: ModelConfig

    def save_pretrained(self, folder: str | Path, **info: Any) -> Path:
        """Write model.safetensors and config.json into `folder` (created). `info` is
        recorded beside the model config: at least `codebook_hash`, the tokenizer the
        model reads; window, objective, task, ... as a run knows them."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        export_model(folder, self.state_dict(), self.cfg, info)  # type: ignore[attr-defined]
        return folder

    @classmethod
    def from_pretrained(cls, folder: str | Path, **overrides: Any) -> Any:
        """The model saved in the local `folder` (by `save_pretrained` or a heartlm run), in
        eval mode; `overrides` as `load_into`."""
        model, _ = load_into(cls, folder, **overrides)
        return model.eval()


def load_into(
    cls: type,
    run_dir: str | Path,
    preset: str | None = None,
    vocab_size: int | None = None,
    **overrides: Any,
) -> tuple[Any, dict[str, Any]]:
    """The exported model of a run as `cls`, and its config; refuses another preset or
    vocabulary.

    `overrides` change head-only fields (`n_beat_classes`, `n_window_classes`, `causal`,
    `cls_token`) or add weights (`local_stats`, `beat_mlp`: _ADDED_BY_OVERRIDE); heads whose
    shape changes, and added weights, are left freshly initialised.
    """
    run_dir = Path(run_dir)
    config = read_config(run_dir)
    saved = _saved_model_config(config, run_dir / "config.json")
    if preset is not None and preset != saved.preset:
        raise HeartlmError(f"was trained with preset '{saved.preset}', not '{preset}'", run_dir)
    if vocab_size is not None and vocab_size != saved.vocab_size:
        raise HeartlmError(
            f"model vocabulary is {saved.vocab_size} tokens, the tokens have {vocab_size}"
            " (tokenized with another codebook?)",
            run_dir,
        )
    for field, (present, trained, flag) in _FIXED_ONCE_ADDED.items():
        had = getattr(saved, field)
        want = overrides.get(field, had)
        if getattr(saved, present) and want != had:
            raise HeartlmError(f"was trained {trained.format(had)}, not {want} ({flag})", run_dir)
    cfg = _saved_model_config({"model": {**saved.to_dict(), **overrides}}, run_dir / "config.json")
    model = cls(cfg)
    path = run_dir / "model.safetensors"
    if not path.is_file():
        raise HeartlmError("model.safetensors is missing", run_dir)
    state = load_tensors(path)
    for name, tensor in state.items():
        # a diverged run's NaNs would otherwise pass as weights and score as a model
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise HeartlmError(f"holds non-finite weights (tensor {name})", path)
    own = model.state_dict()
    new = tuple(prefix for field, prefix in _ADDED_BY_OVERRIDE.items() if not getattr(saved, field))
    added = {k for k in own.keys() - state.keys() if k.startswith(new)}
    mismatched = sorted((set(state) ^ set(own)) - added)
    if mismatched:
        raise HeartlmError(f"weights do not fit the model config ({mismatched[:3]})", path)
    fitting = {k: v for k, v in state.items() if own[k].shape == v.shape}
    wrong = [k for k in fitting.keys() ^ state.keys() if not k.endswith(HEAD_SUFFIXES)]
    if wrong:
        raise HeartlmError(f"weights do not fit the model config ({wrong[:3]})", path)
    model.load_state_dict(fitting, strict=False)
    return model, config
