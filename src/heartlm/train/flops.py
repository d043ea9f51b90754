"""Model FLOPs per token and the device's peak, for MFU.

Per token, forward + backward = 3x forward, each multiply-add = 2 FLOPs:

    flops/token = 6 * N_body                      (QKV, out-proj and MLP matmuls)
                + 12 * L * T * d                  (attention scores QK^T and A·V, T = positions)
                + 6 * d * V_pad * K / W           (vocabulary head, K predicted of W beats)

N_body = L * (4 d^2 + 2 d d_ff) counts the block matmul weights only; embeddings are
lookups and cost no matmul FLOPs. The causal mask is not discounted (as in PaLM's MFU).
The vocabulary head counts only the K positions where it runs (masked beats) so the
number is honest when the head is gathered. Norms, GELU and softmax are not counted.
"""

from __future__ import annotations

import torch

from heartlm.model.config import ModelConfig

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


def flops_per_token(cfg: ModelConfig, window: int, predicted_per_window: int) -> float:
    d, L = cfg.d_model, cfg.n_layers
    n_body = L * (4 * d * d + 2 * d * cfg.d_ff)
    positions = window + int(cfg.cls_token)
    attention = 12 * L * positions * d
    head = 6 * d * cfg.padded_vocab * predicted_per_window / window
    return 6 * n_body + attention + head


def peak_flops(device: torch.device) -> float:
    """bf16 dense peak of `device`; 0 for CPU or an unknown card (MFU then reads 0)."""
    if device.type != "cuda":
        return 0.0
    name = torch.cuda.get_device_name(device)
    for key, peak in PEAKS.items():
        if key in name:
            return peak
    return 0.0
