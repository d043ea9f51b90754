"""Model FLOPs per token and the device's peak, for MFU.

Per token, forward + backward = 3x forward, each multiply-add = 2 FLOPs:

    flops/token = 6 * N_body                      (QKV, out-proj and MLP matmuls)
                + 12 * L * T * d                  (attention scores QK^T and A·V, T = positions)
                + 6 * d * V_pad * K / W           (vocabulary head, K predicted of W beats)

    (+ 6 * N_beat_mlp                             (the per-beat network, `--beat-mlp`))

N_body = L * (4 d^2 + 2 d d_ff) counts the block matmul weights only; embeddings are
lookups and cost no matmul FLOPs. The causal mask is not discounted (as in PaLM's MFU).
The vocabulary head counts only the K positions where it runs (masked beats) so the
number is honest when the head is gathered. N_beat_mlp counts the per-beat network's hidden
layers and its bins' per-column maps (`beat_mlp_flops_per_token`), which run on every beat;
its output layer (the beat classes, or the codes while pretraining) is not counted. Norms,
GELU and softmax are not counted.
"""

from __future__ import annotations

import math
import os

import torch

from heartlm.errors import HeartlmError
from heartlm.model.config import BEAT_MLP_EMBEDDING, ModelConfig

# Dense bf16 tensor-core peaks (no sparsity), FLOP/s.
PEAKS = {
    "H200": 989e12,
    "H100": 989e12,
    "GH200": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "A10G": 125e12,
    "RTX 4090": 165e12,
}


def attention_flops_per_token(cfg: ModelConfig, window: int) -> float:
    """The attention scores and their weighted sum, forward and backward."""
    return 12 * cfg.n_layers * (window + int(cfg.cls_token)) * cfg.d_model


def beat_mlp_flops_per_token(cfg: ModelConfig) -> float:
    """The per-beat network's hidden layers and bin maps, forward and backward (0 without
    one)."""
    if not cfg.beat_mlp:
        return 0.0
    columns = 3 * cfg.n_features + 2  # heartlm.model.hlm.beat_neighbourhood
    weights = 0
    if cfg.beat_mlp_bins:
        weights += columns * cfg.beat_mlp_bins * BEAT_MLP_EMBEDDING
        columns *= 1 + BEAT_MLP_EMBEDDING
    if cfg.beat_mlp_context:
        columns += cfg.d_model
    weights += columns * cfg.beat_mlp + (cfg.beat_mlp_depth - 1) * cfg.beat_mlp**2
    return 6 * weights


def flops_per_token(cfg: ModelConfig, window: int, predicted_per_window: int) -> float:
    d, L = cfg.d_model, cfg.n_layers
    n_body = L * (4 * d * d + 2 * d * cfg.d_ff)
    head = 6 * d * cfg.padded_vocab * predicted_per_window / window
    return (
        6 * n_body + attention_flops_per_token(cfg, window) + head + beat_mlp_flops_per_token(cfg)
    )


PEAK_ENV = "HEARTLM_PEAK_TFLOPS"


def mfu_per_gpu(flops_per_tok: float, tokens_per_s: float, peak: float, world_size: int) -> float:
    """Model FLOPs utilisation of one GPU: the model FLOP/s of all `world_size` devices
    (`tokens_per_s` counts every device's tokens) over world_size x one device's `peak`.
    0 when the peak is unknown."""
    if peak <= 0:
        return 0.0
    return flops_per_tok * tokens_per_s / (peak * max(1, world_size))


def peak_flops(device: torch.device) -> float:
    """bf16 dense peak of one `device`, FLOP/s; 0 for CPU or an unknown card (MFU then
    reads 0). HEARTLM_PEAK_TFLOPS overrides it (a card missing from PEAKS, or a test)."""
    override = os.environ.get(PEAK_ENV)
    if override:
        try:
            value = float(override)
        except ValueError:
            value = float("nan")
        if not (math.isfinite(value) and value > 0):
            raise HeartlmError(f"{PEAK_ENV}={override!r} is not a positive number of TFLOP/s")
        return value * 1e12
    if device.type != "cuda":
        return 0.0
    name = torch.cuda.get_device_name(device)
    for key, peak in PEAKS.items():
        if key in name:
            return peak
    return 0.0
