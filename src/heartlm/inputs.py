"""Which beat inputs a fine-tuned model (and the tree floor beside it) may see.

Kept free of torch and of `heartlm.tokens`' heavy imports: the finetune CLI reads `INPUTS`
to build its flags.
"""

from __future__ import annotations

from typing import Any

INPUTS: tuple[str, ...] = ("all", "no-heart-rate", "relative", "rhythm", "rhythm-ectopy")
"""all: codes and every feature column; no-heart-rate: everything but the absolute heart
rate; relative: only patient-relative inputs (no codes, no absolute shape, no heart rate);
rhythm: of those, only the rhythm and the atrial activity (RHYTHM_PREFIXES columns);
rhythm-ectopy: rhythm plus ECTOPY_FEATURES."""
CODES_HIDDEN: tuple[str, ...] = ("relative", "rhythm", "rhythm-ectopy")
"""The `--inputs` under which every morphology id reads as MASK (codes are patient-specific)."""
RHYTHM_PREFIXES: tuple[str, ...] = ("rr_", "p_")
"""`--inputs rhythm` keeps the relative columns named so: RR against the patient's own means
and the P segment against the patient's own templates. Atrial fibrillation is a rhythm (RR
irregularly irregular, no consistent P wave); the ventricular beat's shape says nothing of it,
and a model that sees it can learn the few AF patients of the training set by their QRS."""
ECTOPY_FEATURES: tuple[str, ...] = (
    "qrs_corr",
    "beat_corr",
    "log_qrs_ratio",
    "width_shift_ms",
    "residual",
    "cluster_share",
)
"""`--inputs rhythm-ectopy` adds these patient-relative shape columns to `rhythm`: whether a
beat is like the record's dominant beat (an ectopic one is not), which tells a run of
ventricular ectopy (irregular RR, no P wave before the ectopic beats) from AF. On the model
study's AFIB folds they lift the LightGBM floor from F1 0.758 to 0.818 (benchmarks/README.md,
round 19); no single code or absolute shape column comes with them."""
RATE_FEATURES: tuple[str, ...] = ("log_rr_prev",)
"""The absolute heart rate: the one rhythm column that is not relative to the patient's own
rhythm. With it, the LightGBM floor's S sensitivity on the DS1 folds falls from 0.45 to 0.36
when the same rhythms are played 1.5x slower (benchmarks/README.md): the class follows the
patient's rate."""


FORECAST_INPUTS: tuple[str, ...] = (
    "log_rr_prev",
    "qrs_corr",
    "log_qrs_ratio",
    "width_shift_ms",
    "cluster_share",
)
"""With every `p_` column, the feature columns that look back only, all that a causal forecast
of the next beat reads (`pretrain --objective forecast`): the RR before the beat, its P
segment (which ends before its R), the QRS-region columns (which end 0.12 s after R, sooner
than any next beat) and `cluster_share` (a running count). The others see what follows the
beat: the `rr_` columns hold the RR after it or means centred on it; the beat's whole window
(`beat_pc*`, `beat_corr`, `residual`; its code too) runs 0.40 s past R and holds the next
beat's P wave, or its QRS, when that beat comes early; `code_share` is a centred mean."""


def lookahead_columns(names: list[str] | tuple[str, ...]) -> list[int]:
    """Feature columns that a causal model must not read when it forecasts the next beat:
    every one but FORECAST_INPUTS and the `p_` columns."""
    return [i for i, n in enumerate(names) if not (n.startswith("p_") or n in FORECAST_INPUTS)]


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
    relative_hidden = {*absolute_columns(names), *rate}
    if inputs in ("rhythm", "rhythm-ectopy"):
        kept = ECTOPY_FEATURES if inputs == "rhythm-ectopy" else ()
        shape = [i for i, name in enumerate(names)
                 if not name.startswith(RHYTHM_PREFIXES) and name not in kept]  # fmt: skip
        return sorted({*relative_hidden, *shape})
    return sorted(relative_hidden)


def model_inputs(inputs: str, names: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """The ModelConfig settings (`relative_only`, `absolute_columns`) with which a model reads
    only what `--inputs` keeps, in pretraining and in fine-tuning alike. ValueError where
    `inputs` hides the codes and every feature column: the model would read its rhythm
    tokens only."""
    hidden = hidden_columns(names, inputs)
    if inputs in CODES_HIDDEN and len(hidden) == len(names):
        raise ValueError(
            f"holds no feature column that --inputs {inputs} keeps: the model would see its "
            "rhythm tokens only"
        )
    return {"relative_only": inputs in CODES_HIDDEN, "absolute_columns": tuple(hidden)}
