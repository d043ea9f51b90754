"""The Heart Language Model: a pre-norm transformer over beat tokens, for one device."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from heartlm.model.config import (
    BEAT_MLP_EMBEDDING,
    PERIODIC_DIM,
    PERIODIC_FREQUENCIES,
    PERIODIC_SCALE,
    ModelConfig,
)
from heartlm.model.load import Pretrained, load_into
from heartlm.model.piecewise import PiecewiseLinear
from heartlm.shards import CLS, MASK, NUM_SPECIAL

HEADS = ("hidden", "mlm", "masked", "next", "choice", "beat", "beat_parts", "window",
         "window_beats")  # fmt: skip

ATTENTION_KERNELS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}
"""`use_attention_kernel` names (and "auto": PyTorch's own choice)."""


def _norm(cfg: ModelConfig) -> nn.Module:
    if cfg.norm == "rmsnorm":
        return nn.RMSNorm(cfg.d_model)
    return nn.LayerNorm(cfg.d_model, bias=cfg.bias)


def _feature_embedding(cfg: ModelConfig) -> nn.Module | None:
    """Per-feature periodic embeddings (PLR), or None where the features enter linearly."""
    if not cfg.n_features or cfg.feature_embedding != "periodic":
        return None
    from rtdl_num_embeddings import PeriodicEmbeddings

    return PeriodicEmbeddings(
        cfg.n_features,
        PERIODIC_DIM,
        n_frequencies=PERIODIC_FREQUENCIES,
        frequency_init_scale=PERIODIC_SCALE,
        lite=False,
    )


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.causal = cfg.causal
        self.dropout = cfg.dropout
        self.approximate = "tanh" if cfg.activation == "gelu_tanh" else "none"
        self.norm1 = _norm(cfg)
        # One fused QKV matmul and one fused MLP-in matmul: fewer, larger GEMMs.
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.bias)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.norm2 = _norm(cfg)
        self.fc_in = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.fc_out = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)
        self.attention_kernel: SDPBackend | None = None  # HeartLM.use_attention_kernel

    def _attention(self, q: Tensor, k: Tensor, v: Tensor, mask_B11T: Tensor | None) -> Tensor:
        dropout = self.dropout if self.training else 0.0
        if mask_B11T is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, dropout_p=dropout)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask_B11T, dropout_p=dropout)

    def forward(self, x_BTD: Tensor, mask_B11T: Tensor | None) -> Tensor:
        B, T, D = x_BTD.shape
        q, k, v = self.qkv(self.norm1(x_BTD)).view(B, T, 3, self.n_heads, -1).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if self.attention_kernel is None:
            a = self._attention(q, k, v, mask_B11T)
        else:
            with sdpa_kernel(self.attention_kernel):
                a = self._attention(q, k, v, mask_B11T)
        x_BTD = x_BTD + self.drop(self.proj(a.transpose(1, 2).reshape(B, T, D)))
        return x_BTD + self.drop(
            self.fc_out(F.gelu(self.fc_in(self.norm2(x_BTD)), approximate=self.approximate))
        )


def valid_mean(x_BTD: Tensor, valid_BT: Tensor | None) -> Tensor:
    """Mean over the real (valid) positions: the window head's pool."""
    if valid_BT is None:
        return x_BTD.mean(1)
    w = valid_BT[..., None].to(x_BTD.dtype)
    return (x_BTD * w).sum(1) / w.sum(1).clamp_min(1.0)


def _mean_std(sum_BTC: Tensor, square_BTC: Tensor, count_BT1: Tensor) -> list[Tensor]:
    count_BT1 = count_BT1.clamp_min(1.0)
    mean = sum_BTC / count_BT1
    return [mean, (square_BTC / count_BT1 - mean.square()).clamp_min(0.0).sqrt()]


def feature_statistics(features_BTF: Tensor, valid_BT: Tensor | None, half_width: int) -> Tensor:
    """(B, T, 4F) per beat: the mean and standard deviation of each feature column over the
    real beats within `half_width` of it, then over the whole window's real beats (fp32)."""
    x = features_BTF.float()
    B, T, _ = x.shape
    w = torch.ones(B, T, 1, device=x.device) if valid_BT is None else valid_BT[..., None].float()
    moments = torch.cat([w, x * w, x.square() * w], dim=-1)  # count, sum, sum of squares
    cumulative = F.pad(moments.cumsum(1), (0, 0, 1, 0))
    t = torch.arange(T, device=x.device)
    near = (
        cumulative[:, (t + half_width + 1).clamp(max=T)]
        - cumulative[:, (t - half_width).clamp(min=0)]
    )
    whole = moments.sum(1, keepdim=True).expand(B, T, -1)
    n = x.shape[-1]
    parts = [_mean_std(m[..., 1 : 1 + n], m[..., 1 + n :], m[..., :1]) for m in (near, whole)]
    return torch.cat([part for pair in parts for part in pair], dim=-1)


def beat_neighbourhood(features_BTF: Tensor, valid_BT: Tensor | None) -> Tensor:
    """(B, T, 3F + 2): each beat's feature row, its previous and next beats' rows (zeros where
    the window ends or pads), and two flags saying whether those neighbours exist."""
    B, T, _ = features_BTF.shape
    if valid_BT is None:
        real = torch.ones(B, T, dtype=features_BTF.dtype, device=features_BTF.device)
    else:
        real = valid_BT.to(features_BTF.dtype)
    x = features_BTF * real[..., None]
    previous, following = F.pad(x[:, :-1], (0, 0, 1, 0)), F.pad(x[:, 1:], (0, 0, 0, 1))
    has_previous, has_following = F.pad(real[:, :-1], (1, 0)), F.pad(real[:, 1:], (0, 1))
    flags = torch.stack([has_previous, has_following], dim=-1)
    return torch.cat([x, previous, following, flags], dim=-1)


def _beat_mlp(cfg: ModelConfig) -> nn.Sequential | None:
    """`beat_mlp`: `beat_mlp_depth` hidden layers from `beat_neighbourhood`'s columns (first
    through a piecewise-linear encoding with `beat_mlp_bins`; with `beat_mlp_context`, the
    transformer's state beside them) to the beat classes' logits. The first layer's names are
    those of a one-layer network, so its weights load either way."""
    if not cfg.beat_mlp:
        return None
    columns = 3 * cfg.n_features + 2
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    if cfg.beat_mlp_bins:
        layers["bins"] = PiecewiseLinear(columns, cfg.beat_mlp_bins, BEAT_MLP_EMBEDDING)
        columns = layers["bins"].out_features
    if cfg.beat_mlp_context:
        columns += cfg.d_model
    for depth in range(1, cfg.beat_mlp_depth + 1):
        tag = "" if depth == 1 else str(depth)
        layers[f"hidden{tag}"] = nn.Linear(columns, cfg.beat_mlp)
        layers[f"activation{tag}"] = nn.GELU()
        layers[f"dropout{tag}"] = nn.Dropout(cfg.dropout)
        columns = cfg.beat_mlp
    layers["out"] = nn.Linear(cfg.beat_mlp, cfg.n_beat_classes)  # a head: load.HEAD_SUFFIXES
    return nn.Sequential(layers)


class HeartLM(nn.Module, Pretrained):
    """Morphology + rhythm + position embeddings and a projection of the beat features,
    pre-norm blocks, and task heads.

    `forward(..., head=...)` computes only the requested head, so the masked-token
    vocabulary projection runs only at the positions that carry a loss. Head `masked` is
    `mlm` plus the reconstruction of the beat features at those positions; head `choice`
    (`choice_critic`) is `next` plus the contrastive critic's queries and keys.
    `save_pretrained(folder, codebook_hash=...)` / `HeartLM.from_pretrained(folder)` write
    and read a local folder (`heartlm.model.load`).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.morph_emb = nn.Embedding(cfg.padded_vocab, cfg.d_model)
        self.rhythm_emb = nn.Embedding(cfg.padded_rhythm_vocab, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.positions, cfg.d_model)
        self.feature_emb = _feature_embedding(cfg)
        width = cfg.n_features * (PERIODIC_DIM if self.feature_emb is not None else 1)
        self.feature_proj = nn.Linear(width, cfg.d_model) if cfg.n_features else None
        self.feature_head = nn.Linear(cfg.d_model, cfg.n_features) if cfg.n_features else None
        self.stats_proj = nn.Linear(4 * cfg.n_features, cfg.d_model) if cfg.local_stats else None
        self.choice_query = nn.Linear(cfg.d_model, cfg.d_model) if cfg.choice_critic else None
        self.choice_key = (
            nn.Sequential(
                nn.Linear(cfg.n_features, cfg.d_model),
                nn.GELU(),
                nn.Linear(cfg.d_model, cfg.d_model),
            )
            if cfg.choice_critic
            else None
        )
        self.register_buffer(
            "absolute_index", torch.tensor(cfg.absolute_columns, dtype=torch.long), persistent=False
        )
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = _norm(cfg)
        self.lm_head = nn.Linear(cfg.d_model, cfg.padded_vocab, bias=False)
        self.beat_head = nn.Linear(cfg.d_model, cfg.n_beat_classes)
        self.beat_mlp = _beat_mlp(cfg)
        self.beat_code_head = nn.Linear(cfg.beat_mlp, cfg.padded_vocab) if cfg.beat_codes else None
        self.register_buffer(
            "beat_mlp_hidden", torch.tensor(cfg.beat_mlp_hidden, dtype=torch.long),
            persistent=False,
        )  # fmt: skip
        self.window_head = nn.Linear(cfg.d_model, cfg.n_window_classes)
        self.apply(self._init)
        for block in self.blocks:  # GPT-2 style scaling of the residual projections
            for lin in (block.proj, block.fc_out):
                nn.init.normal_(lin.weight, std=0.02 / (2 * cfg.n_layers) ** 0.5)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def head_parameters(self) -> dict[str, list[nn.Parameter]]:
        return {
            "mlm": list(self.lm_head.parameters()),
            "masked": [] if self.feature_head is None else list(self.feature_head.parameters()),
            "choice": [
                p
                for m in (self.choice_query, self.choice_key)
                if m is not None
                for p in m.parameters()
            ],
            "beat": [
                *self.beat_head.parameters(),
                *([] if self.beat_mlp is None else self.beat_mlp.parameters()),
            ],
            "window": list(self.window_head.parameters()),
            "beat_codes": [
                *([] if self.beat_code_head is None else self.beat_code_head.parameters()),
                *([] if self.beat_mlp is None else self.beat_mlp[:-1].parameters()),
            ],
        }

    def use_attention_kernel(self, name: str) -> None:
        """Run attention with one of ATTENTION_KERNELS ("auto": PyTorch chooses). The choice is
        made inside each block's forward, where torch.compile traces it into the graph: a
        context around a compiled call is not part of the graph, and a compiled graph from the
        cache would keep the kernel it was traced with."""
        kernel = None if name == "auto" else ATTENTION_KERNELS[name]
        for block in self.blocks:
            block.attention_kernel = kernel

    def use_heads(self, heads: tuple[str, ...]) -> None:
        """Freeze the heads an objective does not use (DDP then needs no unused search); a
        parameter that two heads share (the per-beat network's hidden layers: `beat` and
        `beat_codes`) trains when either does."""
        wanted = {"mlm" if h == "next" else h for h in heads}
        if wanted & {"masked", "choice"}:
            wanted.add("mlm")
        groups = self.head_parameters()
        trained = {id(p) for name in wanted & groups.keys() for p in groups[name]}
        for params in groups.values():
            for p in params:
                p.requires_grad_(id(p) in trained)

    def encode(
        self,
        morph_BT: Tensor,
        rhythm_BT: Tensor,
        valid_BT: Tensor | None,
        features_BTF: Tensor | None = None,
    ) -> Tensor:
        cfg = self.cfg
        if cfg.relative_only:
            morph_BT = torch.where(morph_BT >= NUM_SPECIAL, MASK, morph_BT)
        x = self.morph_emb(morph_BT) + self.rhythm_emb(rhythm_BT)
        if self.feature_proj is not None:
            features_BTF = self._visible(features_BTF)
            if self.stats_proj is not None:
                stats = feature_statistics(features_BTF, valid_BT, cfg.local_stats)
                x = x + self.stats_proj(stats.to(self.stats_proj.weight.dtype))
            if self.feature_emb is not None:
                B, T, F_ = features_BTF.shape
                features_BTF = self.feature_emb(features_BTF.reshape(B * T, F_)).reshape(B, T, -1)
            x = x + self.feature_proj(features_BTF)
        if cfg.cls_token:
            cls = self.morph_emb.weight[CLS].expand(x.shape[0], 1, -1)
            x = torch.cat([cls, x], dim=1)
            if valid_BT is not None:
                valid_BT = F.pad(valid_BT, (1, 0), value=True)
        if cfg.bf16_residual and torch.is_autocast_enabled(x.device.type):
            x = x.to(torch.bfloat16)  # every residual add then stays bf16
        T = x.shape[1]
        if cfg.positions < T:
            raise ValueError(f"window of {T} positions exceeds max_len {cfg.positions}")
        x = self.drop(x + self.pos_emb.weight[:T].to(x.dtype))
        mask = None
        if valid_BT is not None:
            mask = valid_BT[:, None, None, :]
            if cfg.causal:
                mask = mask & torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        for block in self.blocks:
            x = block(x, mask)
        return self.norm(x)

    def fit_beat_mlp_bins(self, features_NF: np.ndarray, seed: int = 0) -> bool:
        """Place the per-beat network's bin edges (`beat_mlp_bins`) at the quantiles of the
        training beats' neighbourhood rows, once: edges a model was saved with are kept.
        True if it placed them. Only the rows `quantile_edges` would draw are built (the same
        seeded draw, in the same order), so a pretraining corpus of millions of beats costs
        FIT_ROWS rows of memory, not a float copy of every beat's three neighbours."""
        from heartlm.model import piecewise

        bins = None if self.beat_mlp is None else getattr(self.beat_mlp, "bins", None)
        if bins is None or bool(bins.fitted):
            return False
        features = np.asarray(features_NF)
        n = len(features)
        beats = np.arange(n)
        if n > piecewise.FIT_ROWS:
            beats = np.random.default_rng(seed).choice(n, piecewise.FIT_ROWS, replace=False)
        around = np.stack([beats - 1, beats, beats + 1], axis=1)  # each drawn beat's window
        real = (around >= 0) & (around < n)
        with torch.no_grad():
            rows = torch.from_numpy(features[np.clip(around, 0, max(n - 1, 0))].astype(np.float32))
            view = self._beat_mlp_view(rows.to(bins.edges.device))
            near = beat_neighbourhood(view, torch.from_numpy(real).to(view.device))[:, 1]
        bins.fit(near.float().cpu().numpy(), seed)
        return True

    def _visible(self, features_BTF: Tensor | None) -> Tensor:
        """The feature rows as the model reads them: absolute columns zeroed under
        `relative_only` inputs."""
        if features_BTF is None:
            raise ValueError(f"the model takes {self.cfg.n_features} beat features per beat")
        features_BTF = features_BTF.to(self.feature_proj.weight.dtype)
        if self.cfg.absolute_columns:
            features_BTF = features_BTF.index_fill(-1, self.absolute_index, 0.0)
        return features_BTF

    def _beat_mlp_view(self, features_BTF: Tensor | None) -> Tensor:
        """The feature rows as the per-beat network reads them: `_visible`'s, with the
        network's own `beat_mlp_hidden` columns zeroed too."""
        features_BTF = self._visible(features_BTF)
        if self.cfg.beat_mlp_hidden:
            features_BTF = features_BTF.index_fill(-1, self.beat_mlp_hidden, 0.0)
        return features_BTF

    def _beat_mlp_logits(self, near_BTC: Tensor, h_BTD: Tensor) -> Tensor:
        """The per-beat network's logits from `beat_neighbourhood`'s rows and, with
        `beat_mlp_context`, the transformer's state, which joins after the bins."""
        network = self.beat_mlp
        if not self.cfg.beat_mlp_context:
            return network(near_BTC)
        encoded, first = near_BTC, 0
        if (bins := getattr(network, "bins", None)) is not None:
            encoded, first = bins(near_BTC), 1
        return network[first:](torch.cat([encoded, h_BTD.to(encoded.dtype)], dim=-1))

    def beat_codes(self, features_BTF: Tensor, valid_BT: Tensor | None) -> Tensor:
        """(B, T, padded vocab) logits of each beat's morphology code from the per-beat
        network's last hidden layer (`beat_codes`): what it reads of the beat and its two
        neighbours, never the transformer's state."""
        if self.beat_mlp is None or self.beat_code_head is None:
            raise ValueError("beat_codes needs a model with beat_mlp and beat_codes")
        near = beat_neighbourhood(self._beat_mlp_view(features_BTF), valid_BT)
        return self.beat_code_head(self.beat_mlp[:-1](near.to(self.beat_code_head.weight.dtype)))

    def forward(
        self,
        morph_BT: Tensor,
        rhythm_BT: Tensor,
        valid_BT: Tensor | None = None,
        head: str = "hidden",
        positions_BK: Tensor | None = None,
        features_BTF: Tensor | None = None,
        targets_BTF: Tensor | None = None,
        beat_features_BTF: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, ...]:
        """`head`'s output; given `beat_features_BTF` (a pretraining objective's beats as they
        are, before it hides any), the pair of that output and `beat_codes` of those beats:
        one forward, so DDP sees every trained parameter in a single graph."""
        out = self._head(morph_BT, rhythm_BT, valid_BT, head, positions_BK, features_BTF,
                         targets_BTF)  # fmt: skip
        if beat_features_BTF is None:
            return out
        return out, self.beat_codes(beat_features_BTF, valid_BT)

    def _head(
        self,
        morph_BT: Tensor,
        rhythm_BT: Tensor,
        valid_BT: Tensor | None,
        head: str,
        positions_BK: Tensor | None,
        features_BTF: Tensor | None,
        targets_BTF: Tensor | None,
    ) -> Tensor | tuple[Tensor, ...]:
        h = self.encode(morph_BT, rhythm_BT, valid_BT, features_BTF)
        if head == "hidden":
            return h
        if self.cfg.cls_token:
            cls_BD, h = h[:, 0], h[:, 1:]
        if head in ("mlm", "masked"):
            if positions_BK is not None:
                h = torch.gather(h, 1, positions_BK[..., None].expand(-1, -1, h.shape[-1]))
            if head == "mlm":
                return self.lm_head(h)
            if self.feature_head is None:
                raise ValueError("head 'masked' needs a model with beat features")
            return self.lm_head(h), self.feature_head(h)
        if head == "next":
            return self.lm_head(h)
        if head == "choice":  # the code logits, each position's query, each beat's key
            if self.choice_query is None or self.choice_key is None or targets_BTF is None:
                raise ValueError("head 'choice' needs a model with choice_critic and targets_BTF")
            key = self.choice_key(targets_BTF.to(self.choice_query.weight.dtype))
            return self.lm_head(h), self.choice_query(h), key
        if head in ("beat", "beat_parts"):
            if self.cfg.causal and self.beat_mlp is not None:
                raise ValueError(
                    "the per-beat network reads the beat after each one: a causal "
                    "model's beat head cannot use it (fine-tune it bidirectionally)"
                )
            if self.beat_mlp is None:
                if head == "beat_parts":
                    raise ValueError("head 'beat_parts' needs a model with beat_mlp")
                return self.beat_head(h)
            near = beat_neighbourhood(self._beat_mlp_view(features_BTF), valid_BT)
            parts = self.beat_head(h), self._beat_mlp_logits(near.to(h.dtype), h)
            # "beat_parts": the transformer's and the per-beat network's logits, whose sum is
            # "beat"'s (a fine-tuning loss on the network alone, --beat-mlp-loss)
            return parts if head == "beat_parts" else parts[0] + parts[1]
        if head == "window_beats":  # the window head on each beat; their valid mean is "window"
            return self.window_head(h)
        if head == "window":
            if self.cfg.cls_token:
                return self.window_head(cls_BD)
            return self.window_head(valid_mean(h, valid_BT))
        raise ValueError(f"unknown head {head!r}; one of {', '.join(HEADS)}")

    def num_params(self, embeddings: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())
        if not embeddings:
            n -= sum(m.weight.numel() for m in (self.morph_emb, self.rhythm_emb, self.pos_emb))
            if self.feature_proj is not None:
                n -= self.feature_proj.weight.numel()
            if self.stats_proj is not None:
                n -= self.stats_proj.weight.numel()
            if self.feature_emb is not None:
                n -= sum(p.numel() for p in self.feature_emb.parameters())
        return n


def load_pretrained(
    run_dir: str | Path, preset: str | None = None, vocab_size: int | None = None, **overrides: Any
) -> tuple[HeartLM, dict[str, Any]]:
    """The exported model of a run (training mode) and its config.json (`load_into`)."""
    return load_into(HeartLM, run_dir, preset, vocab_size, **overrides)
