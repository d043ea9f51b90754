"""Beat features: what a bare morphology id loses, as one standardised row per beat.

Each beat enters the model with its code *and* this row (format v2 token folders):

- `beat_pc*`: the normalised beat projected on the leading principal components of the
  codebook's training beats (the continuous shape, not just its nearest centroid);
- `p_pc*`: the ~180 ms before the QRS, on its own principal components, so the small P
  wave is not drowned by the QRS as it is in the whole-window k-means;
- the patient-relative stream of `heartlm.tokens.patient` (against a causal running
  template of the record's dominant beat) and `code_share` (how common this beat's code is
  in the surrounding ten minutes of its record);
- the rhythm stream of `heartlm.tokens.rhythm.rr_features` (RR against local and
  record-level *means*, irregularity).

The principal components and the standardisation (mean, std per column) are learnt once
with the codebook and saved with it, so every database tokenized with `--codebook` lands in
the same feature space.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from heartlm.shards import UNK
from heartlm.tokens import patient, rhythm

BEAT_COMPONENTS = 16
P_COMPONENTS = 4
CODE_SHARE_HALF = 300
"""Beats each side over which `code_share` counts (about ten minutes at 60 bpm)."""
CLIP = 8.0
"""Standardised features are clipped to +-CLIP: one artefact cannot blow up an input."""

FEATURES: tuple[str, ...] = (
    *(f"beat_pc{i}" for i in range(BEAT_COMPONENTS)),
    *(f"p_pc{i}" for i in range(P_COMPONENTS)),
    *patient.TEMPLATE_FEATURES,
    *patient.SINUS_FEATURES,
    "code_share",
    *rhythm.RR_FEATURES,
)


def morphology_columns(names: list[str] | tuple[str, ...]) -> list[int]:
    """Columns that describe the beat's shape: hidden with its code when a beat is masked.
    The timing columns (`rhythm.RR_FEATURES`) stay visible, as the rhythm token does."""
    return [i for i, name in enumerate(names) if name not in rhythm.RR_FEATURES]


@dataclass
class FeatureSpace:
    """Principal components of beats and P waves, and per-column standardisation."""

    beat_mean: np.ndarray  # (W,)
    beat_basis: np.ndarray  # (BEAT_COMPONENTS, W)
    p_mean: np.ndarray  # (P,)
    p_basis: np.ndarray  # (P_COMPONENTS, P)
    mean: np.ndarray  # (F,)
    std: np.ndarray  # (F,)

    def tensors(self) -> dict[str, np.ndarray]:
        return {f"features.{k}": np.array(v, np.float32, order="C") for k, v in vars(self).items()}

    @classmethod
    def from_tensors(cls, tensors: dict[str, np.ndarray]) -> FeatureSpace:
        return cls(**{k: np.asarray(tensors[f"features.{k}"]) for k in cls.__annotations__})

    def standardize(self, raw_NF: np.ndarray) -> np.ndarray:
        """float16 rows: (raw - mean) / std, missing values at the mean (0), clipped."""
        z = (raw_NF - self.mean) / self.std
        z = np.where(np.isfinite(z), z, 0.0)
        return np.clip(z, -CLIP, CLIP).astype(np.float16)


def p_segment(xn_BW: torch.Tensor, pre_samples: int, fs: float) -> torch.Tensor:
    """The P-wave segment of normalised beats, its own mean removed."""
    _, _, p_lo, p_hi = patient.regions(pre_samples, fs)
    p_BP = xn_BW[:, p_lo:p_hi]
    return p_BP - p_BP.mean(dim=1, keepdim=True)


def learn_components(
    xn_NW: torch.Tensor, pre_samples: int, fs: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(beat mean, beat basis, P mean, P basis) from normalised sample beats."""

    def pca(x: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
        x = x.double()
        mean = x.mean(dim=0)
        _, _, vt = torch.linalg.svd(x - mean, full_matrices=False)
        basis = np.zeros((k, x.shape[1]), np.float32)  # zero rows when there are fewer
        basis[: min(k, len(vt))] = vt[:k].float().cpu().numpy()
        return mean.float().cpu().numpy(), basis

    beat_mean, beat_basis = pca(xn_NW, BEAT_COMPONENTS)
    p_mean, p_basis = pca(p_segment(xn_NW, pre_samples, fs), P_COMPONENTS)
    return beat_mean, beat_basis, p_mean, p_basis


def project(xn_BW: torch.Tensor, space: FeatureSpace, pre_samples: int, fs: float) -> torch.Tensor:
    """(B, BEAT_COMPONENTS + P_COMPONENTS) principal-component scores of normalised beats."""

    def on(x: torch.Tensor, mean: np.ndarray, basis: np.ndarray) -> torch.Tensor:
        mean_t = torch.from_numpy(mean).to(x)
        return (x - mean_t) @ torch.from_numpy(basis).to(x).T

    beat = on(xn_BW, space.beat_mean, space.beat_basis)
    p = on(p_segment(xn_BW, pre_samples, fs), space.p_mean, space.p_basis)
    return torch.cat([beat, p], dim=1)


def record_features(
    beats_NW: np.ndarray,
    baseline_N: np.ndarray,
    components_NC: np.ndarray,
    codes_N: np.ndarray,
    rr_prev_N: np.ndarray,
    rr_next_N: np.ndarray,
    n_codes: int,
    pre_samples: int,
    fs: float,
) -> np.ndarray:
    """Raw (unstandardised) feature rows (N, len(FEATURES)) of one record's beats, in order.

    A beat the codebook calls UNK (non-finite, flat or saturated) has no shape: its shape
    columns are missing (NaN, standardised to the mean) and it never updates the template;
    its rhythm columns are kept."""
    unusable_N = np.asarray(codes_N) == UNK
    beats_NW = np.where(unusable_N[:, None], np.float32(np.nan), np.asarray(beats_NW, np.float32))
    components_NC = np.where(unusable_N[:, None], np.float32(np.nan), components_NC)
    regions = patient.regions(pre_samples, fs)
    baseline = baseline_N.astype(np.float64)
    template = patient.template_features(beats_NW, baseline, *regions, fs)
    rr_prev = np.asarray(rr_prev_N, np.float64)
    sinus = patient.sinus_p_corr(beats_NW, baseline, rr_prev, regions[2], regions[3])
    share = patient.code_share(codes_N.astype(np.int64), n_codes, CODE_SHARE_HALF)
    share[unusable_N] = np.nan
    rr = rhythm.rr_features(rr_prev_N, rr_next_N)
    columns = [components_NC, template, sinus[:, None], share[:, None], rr]
    return np.concatenate(columns, axis=1).astype(np.float32)


def standardization(raw_NF: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-column mean and std over finite values (std 1 for a constant column)."""
    finite = np.isfinite(raw_NF)
    count = np.maximum(finite.sum(axis=0), 1)
    filled = np.where(finite, raw_NF, 0.0).astype(np.float64)
    mean = filled.sum(axis=0) / count
    var = (np.where(finite, (raw_NF - mean) ** 2, 0.0)).sum(axis=0) / count
    std = np.sqrt(var)
    return mean.astype(np.float32), np.where(std > 1e-6, std, 1.0).astype(np.float32)
