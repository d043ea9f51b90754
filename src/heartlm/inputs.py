"""Which beat inputs a fine-tuned model (and the tree floor beside it) may see.

Kept free of torch and of `heartlm.tokens`' heavy imports: the finetune CLI reads `INPUTS`
to build its flags.
"""

from __future__ import annotations

INPUTS: tuple[str, ...] = ("all", "no-heart-rate", "relative")
"""all: codes and every feature column; no-heart-rate: everything but the absolute heart
rate; relative: only patient-relative inputs (no codes, no absolute shape, no heart rate)."""
RATE_FEATURES: tuple[str, ...] = ("log_rr_prev",)
"""The absolute heart rate: the one rhythm column that is not relative to the patient's own
rhythm. With it, the LightGBM floor's S sensitivity on the DS1 folds falls from 0.45 to 0.36
when the same rhythms are played 1.5x slower (benchmarks/README.md): the class follows the
patient's rate."""


def absolute_columns(names: list[str] | tuple[str, ...]) -> list[int]:
    """Columns of the beat's shape on their own (principal components), as opposed to the
    patient-relative ones: what a model must not lean on to generalise across patients."""
    return [i for i, name in enumerate(names) if name.startswith(("beat_pc", "p_pc"))]


def hidden_columns(names: list[str] | tuple[str, ...], inputs: str) -> list[int]:
    """Feature columns that `--inputs` hides (the model reads them as zero, the mean)."""
    if inputs not in INPUTS:
        raise ValueError(f"inputs must be one of {', '.join(INPUTS)}, not {inputs!r}")
    rate = [i for i, name in enumerate(names) if name in RATE_FEATURES]
    if inputs == "all":
        return []
    if inputs == "no-heart-rate":
        return rate
    return sorted({*absolute_columns(names), *rate})
