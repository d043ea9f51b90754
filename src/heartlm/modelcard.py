"""The model card of an exported run: README.md beside model.safetensors and config.json.

What a person needs before using the weights: the model and its tokenizer (codebook hash),
the data and records it was trained and validated on, how long it trained, the metrics
known at export, what it is for, and that it is a research model, not a medical device.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from heartlm.model.load import read_config
from heartlm.outdir import atomic_write_text

CARD = "README.md"
NOT_A_DEVICE = (
    "This is a research model. It is not a medical device: it has not been clinically "
    "validated or cleared by any regulator, and it must not be used to diagnose, treat or "
    "monitor anyone."
)
INTENDED_USE = (
    "Research on learned representations of electrocardiograms: beat and rhythm "
    "classification experiments, embeddings of beats and windows (`heartlm embed`), and "
    "fine-tuning on labelled records (`heartlm finetune`). Its scores hold for data like "
    "its training data (lead, sampling rate after resampling, populations of the records "
    "below); on other data, measure them again with `heartlm evaluate`."
)
_LIST_AT_MOST = 60


def _records(names: list[str]) -> str:
    shown = ", ".join(names[:_LIST_AT_MOST])
    more = len(names) - _LIST_AT_MOST
    return f"{len(names)}: {shown}" + (f", and {more} more" if more > 0 else "")


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, list):
        return _records([str(v) for v in value])
    return "–" if value is None else str(value)


def _table(rows: dict[str, Any]) -> list[str]:
    return ["| | |", "| --- | --- |", *(f"| {k} | {_value(v)} |" for k, v in rows.items())]


def write_model_card(
    folder: Path,
    kind: str,
    data: dict[str, Any],
    training: dict[str, Any],
    validation: dict[str, Any],
    test: dict[str, Any] | None = None,
) -> Path:
    """Write `folder/README.md` for the model exported in `folder` (its config.json gives
    the model type, preset, size and tokenizer)."""
    config = read_config(folder)
    model = config["model"]
    facts = {
        "model type": config.get("model_type", "heartlm"),
        "preset": model.get("preset"),
        "size": f"d_model {model.get('d_model')}, {model.get('n_layers')} layers, "
        f"{model.get('n_heads')} heads, window of up to {model.get('max_len')} beats",
        "tokenizer (codebook hash)": config.get("codebook_hash"),
        "vocabulary": f"{model.get('vocab_size')} morphology, "
        f"{model.get('rhythm_vocab_size')} rhythm tokens, {model.get('n_features')} beat features",
    }
    tested = test or {"scores": "not measured at export: `heartlm evaluate RUN DATA`"}
    lines = [
        f"# heartlm {kind} model", "",
        "A Heart Language Model: a transformer over ECG beat tokens (heartlm).", "",
        "## Model", "", *_table(facts), "",
        "## Data", "", *_table(data), "",
        "## Training", "", *_table(training), "",
        "## Validation metrics", "", *_table(validation or {"scores": "no validation"}), "",
        "## Test metrics", "", *_table(tested), "",
        "## Intended use", "", INTENDED_USE, "",
        "## Not a medical device", "", NOT_A_DEVICE, "",
        "## Load", "", "```python", "from heartlm.model import HeartLM", "",
        'model = HeartLM.from_pretrained("path/to/this/folder")', "```", "",
    ]  # fmt: skip
    path = Path(folder) / CARD
    atomic_write_text(path, "\n".join(lines))
    return path
