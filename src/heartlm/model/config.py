"""Model configuration: one frozen dataclass and the named presets."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

VOCAB_MULTIPLE = 128
ACTIVATIONS = ("gelu", "gelu_tanh")
FEATURE_EMBEDDINGS = ("linear", "periodic")
PERIODIC_FREQUENCIES = 16
"""`feature_embedding periodic`: learnt frequencies per feature (k of Gorishniy et al.)"""
PERIODIC_SCALE = 0.3
"""... drawn with this spread (their sigma) over features standardised to unit variance:
periods of about 1 to 20 standard deviations, from a step to a gentle slope"""
PERIODIC_DIM = 16
"""... and the width each feature's own layer maps its cosines and sines to"""

BEAT_MLP_EMBEDDING = 16
"""`beat_mlp_bins`: the width each input column's piecewise-linear encoding is mapped to"""
MAX_BEAT_MLP_BINS = 256
"""... and at most this many bins a column: the encoding's weights grow with bins x columns x
BEAT_MLP_EMBEDDING (100,000 bins asked for 97 GB), and piecewise-linear encodings are used
with 8-128 bins (Gorishniy et al., 2022)"""
MAX_BEAT_MLP_DEPTH = 4
"""`beat_mlp_depth`: at most this many hidden layers; the network is a per-beat view beside
the transformer, not a second deep model"""

PRESETS: dict[str, dict[str, int]] = {
    "tiny": {"d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 256},
    "small": {"d_model": 256, "n_layers": 4, "n_heads": 4, "d_ff": 1024},
    "base": {"d_model": 768, "n_layers": 12, "n_heads": 12, "d_ff": 3072},
    "large": {"d_model": 1024, "n_layers": 24, "n_heads": 16, "d_ff": 4096},
}


@dataclass(frozen=True)
class ModelConfig:
    preset: str = "tiny"
    vocab_size: int = 1032
    """morphology vocabulary, special tokens included"""
    rhythm_vocab_size: int = 16
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 256
    max_len: int = 1024
    """longest window in beats (CLS excluded)"""
    causal: bool = False
    cls_token: bool = False
    n_features: int = 0
    """continuous beat features per beat (token folder `features`); 0: ids only"""
    feature_embedding: str = "linear"
    """how the beat features enter: linear (one projection of the row) or periodic (each
    feature through learnt cosines and sines and a small layer of its own, then the
    projection: the PLR embeddings of `rtdl_num_embeddings`). A tree cuts a feature at sharp
    thresholds that one linear map of the row cannot draw."""
    local_stats: int = 0
    """beats on each side over which every beat also reads the mean and standard deviation
    of each feature column it sees, and those of the whole window (0: off). A tree on a
    window's column means and spreads (the AFIB floor) gets them for free; attention has to
    learn a second moment from few AF patients."""
    beat_mlp: int = 0
    """hidden width of a small network (`beat_mlp_depth` hidden layers) from each beat's
    visible feature columns and its two neighbours' straight to the beat head's logits, added
    to the transformer's (0: off). On the DS1 folds a network of this kind alone (the
    probe's has two hidden layers and reads the rhythm code too; one layer without it found as
    many) finds as many V beats as the LightGBM floor, and the transformer fewer
    (benchmarks/feature_scale_probe.py)."""
    beat_mlp_depth: int = 1
    """hidden layers of the per-beat network (`beat_mlp` wide each, at most
    MAX_BEAT_MLP_DEPTH). A tree's split on one column inside another's is an interaction that
    one hidden layer draws only with more width."""
    beat_mlp_bins: int = 0
    """the per-beat network reads each of its input columns also through a piecewise-linear
    encoding over this many quantile bins of the fine-tuning rows (`heartlm.model.piecewise`;
    0: the columns only). On the DS1 folds it lifts such a network's V sensitivity from 0.918
    to 0.932 (benchmarks/feature_scale_probe.py): a tree's thresholds, drawn by a network."""
    beat_mlp_context: bool = False
    """the per-beat network's first hidden layer also reads the transformer's state at the
    beat (the final norm's output), so it calls a beat from the beat, its two neighbours and
    the window around them: the rhythm that tells an S beat reaches the network that carries
    V, where a sum of the two parts' logits only adds what each tells alone"""
    beat_codes: bool = False
    """the per-beat network also names each beat's morphology code from its inputs: a head
    from its last hidden layer over the vocabulary (`pretrain --beat-mlp`). It gives that
    network a start learnt without labels; fine-tuning keeps the head and leaves it still. On
    the DS1 folds a network pretrained so found V beats beyond the seed spread of a random
    start at 10 % of the labels (benchmarks/beat_mlp_pretraining_probe.py)."""
    beat_mlp_hidden: tuple[int, ...] = ()
    """feature columns the per-beat network alone reads as zero, beside `absolute_columns`
    (`pretrain --beat-mlp-inputs`): pretrained on the view its fine-tuning will give it while
    the transformer reads another"""
    choice_critic: bool = False
    """the critic of `pretrain --objective contrastive`: a query from each position's state
    and a key from each candidate beat's features (a small MLP), both d_model wide; head
    `choice`. Fine-tuning keeps the weights and leaves them still."""
    relative_only: bool = False
    """every morphology id reads as MASK (fine-tuning `--inputs relative`)"""
    absolute_columns: tuple[int, ...] = ()
    """feature columns read as zero, in training and at evaluation (fine-tuning `--inputs`:
    `heartlm.inputs.hidden_columns`)"""
    n_beat_classes: int = 5
    n_window_classes: int = 2
    norm: str = "layernorm"
    bias: bool = False
    dropout: float = 0.0
    activation: str = "gelu_tanh"
    """MLP activation: gelu_tanh (tanh approximation, cheaper kernels) or gelu (erf)"""
    bf16_residual: bool = True
    """under bf16 autocast, carry the residual stream in bf16 instead of fp32: halves the
    memory traffic of norms and residual adds (+7 % tokens/s for `base` on an H100,
    benchmarks/README.md); no effect in fp32"""

    def __post_init__(self) -> None:
        object.__setattr__(self, "absolute_columns", tuple(self.absolute_columns))
        object.__setattr__(self, "beat_mlp_hidden", tuple(self.beat_mlp_hidden))
        sizes = {"d_model": self.d_model, "n_layers": self.n_layers, "n_heads": self.n_heads,
                 "d_ff": self.d_ff, "max_len": self.max_len}  # fmt: skip
        small = next((k for k, v in sizes.items() if v < 1), None)
        if small:
            raise ValueError(f"{small} must be at least 1, not {sizes[small]}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of n_heads {self.n_heads}")
        if self.norm not in ("layernorm", "rmsnorm"):
            raise ValueError(f"norm must be layernorm or rmsnorm, not {self.norm!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {', '.join(ACTIVATIONS)}, not {self.activation!r}"
            )
        if self.feature_embedding not in FEATURE_EMBEDDINGS:
            raise ValueError(
                f"feature_embedding must be one of {', '.join(FEATURE_EMBEDDINGS)}, "
                f"not {self.feature_embedding!r}"
            )
        if not 0 <= self.local_stats <= self.max_len:
            raise ValueError(
                f"local_stats must be between 0 and the model's {self.max_len} beats, "
                f"not {self.local_stats}"
            )
        if self.local_stats and not self.n_features:
            raise ValueError("local_stats needs beat features (token format v2 or later)")
        if self.beat_mlp < 0:
            raise ValueError(f"beat_mlp must be >= 0, not {self.beat_mlp}")
        if self.beat_mlp and not self.n_features:
            raise ValueError("beat_mlp needs beat features (token format v2 or later)")
        if self.beat_mlp and self.causal and not self.beat_codes:
            # a causal model's network only names each beat's own code (pretraining)
            raise ValueError("beat_mlp reads the beat after each one: not for a causal model")
        if self.beat_mlp_context and not self.beat_mlp:
            raise ValueError("beat_mlp_context feeds the per-beat network: needs beat_mlp")
        if self.beat_mlp_context and self.beat_codes:
            # the code head names a beat from what the network reads of it, never the state
            raise ValueError("beat_codes pretrains the per-beat network without the "
                             "transformer's state: not with beat_mlp_context")  # fmt: skip
        if self.beat_codes and not self.beat_mlp:
            raise ValueError("beat_codes names codes from the per-beat network: needs beat_mlp")
        if self.beat_mlp_hidden and not self.beat_mlp:
            raise ValueError("beat_mlp_hidden hides the per-beat network's columns: needs beat_mlp")
        if any(not 0 <= c < self.n_features for c in self.beat_mlp_hidden):
            raise ValueError(f"beat_mlp_hidden holds columns outside the {self.n_features} "
                             "beat features")  # fmt: skip
        if not 1 <= self.beat_mlp_depth <= MAX_BEAT_MLP_DEPTH:
            raise ValueError(f"beat_mlp_depth must be between 1 and {MAX_BEAT_MLP_DEPTH}, "
                             f"not {self.beat_mlp_depth}")  # fmt: skip
        if self.beat_mlp_depth != 1 and not self.beat_mlp:
            raise ValueError("beat_mlp_depth counts the per-beat network's layers: needs beat_mlp")
        if self.beat_mlp_bins and not self.beat_mlp:
            raise ValueError("beat_mlp_bins encodes the per-beat network's inputs: needs beat_mlp")
        if self.beat_mlp_bins < 0 or self.beat_mlp_bins == 1:
            raise ValueError(f"beat_mlp_bins must be 0 or at least 2, not {self.beat_mlp_bins}")
        if self.beat_mlp_bins > MAX_BEAT_MLP_BINS:
            raise ValueError(f"beat_mlp_bins must be at most {MAX_BEAT_MLP_BINS}, "
                             f"not {self.beat_mlp_bins}")  # fmt: skip
        if self.choice_critic and not self.n_features:
            raise ValueError("choice_critic needs beat features (token format v2 or later)")
        if self.local_stats and self.causal:
            raise ValueError("local_stats reads the beats after each one: not for a causal model")
        if self.n_features < 0:
            raise ValueError(f"n_features must be >= 0, not {self.n_features}")
        if self.feature_embedding != "linear" and not self.n_features:
            raise ValueError(
                f"feature_embedding {self.feature_embedding} needs beat features (token format "
                "v2 or later); these tokens have none"
            )
        if self.vocab_size < 6 or self.rhythm_vocab_size < 1:
            raise ValueError("vocab_size and rhythm_vocab_size must be positive")

    @property
    def padded_vocab(self) -> int:
        return -(-self.vocab_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE

    @property
    def padded_rhythm_vocab(self) -> int:
        return -(-self.rhythm_vocab_size // 8) * 8

    @property
    def positions(self) -> int:
        return self.max_len + int(self.cls_token)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


def check_dropout(p: float) -> None:
    """ValueError unless `p` is a dropout probability in [0, 1) (NaN included)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"--dropout must be in [0, 1), not {p}")


def model_config(preset: str, **overrides: Any) -> ModelConfig:
    """The named preset with `overrides` (vocab sizes, max_len, causal, ...)."""
    if preset not in PRESETS:
        raise ValueError(f"--preset must be one of {', '.join(PRESETS)}, not {preset!r}")
    return ModelConfig(preset=preset, **{**PRESETS[preset], **overrides})
