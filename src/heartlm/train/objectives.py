"""Training objectives: `objective(model, batch) -> (mean loss, dict of device sums)`.

An objective returns the mean loss to backpropagate and *sums* ("loss_sum", "count",
optionally "correct") so that evaluation aggregates exactly over batches and ranks.
Randomness (which beats are masked) is a hash of (seed, window key, beat index), so it
does not depend on the number of ranks, on micro-batching or on resuming.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from heartlm.shards import MASK, NUM_SPECIAL, PAD
from heartlm.train.data import Batch

IGNORE = -100
FORECASTS = ("forecast", "contrastive")
"""The objectives that predict the next beat's features from what came before (`NextBeat`)."""


class Objective(Protocol):
    name: str
    heads: tuple[str, ...]

    def __call__(self, model: nn.Module, batch: Batch) -> tuple[Tensor, dict[str, Tensor]]: ...

    def predicted_per_window(self, window: int) -> int:
        """How many positions per window run through the vocabulary head (for FLOPs)."""
        ...


# Eager even inside a compiled objective (`compile_objective`): Triton (torch 2.11, H100)
# fails to compile this 32-bit hash's bit ops on int64 tensors; the graph breaks here and
# the rest of masking and the loss still compile. Integer maths: identical either way.
@torch.compiler.disable
def hash_uniform(seed: int, key_B: Tensor, n: int, salt: int = 0) -> Tensor:
    """Uniform [0, 1) floats of shape (B, n), a pure function of (seed, key, column, salt)."""
    m32 = 0xFFFFFFFF
    x = (key_B[:, None] * 0x9E3779B1 + torch.arange(n, device=key_B.device) * 0x85EBCA77) & m32
    x = (x ^ ((seed * 0xC2B2AE3D + salt * 0x27D4EB2F + 0x165667B1) & m32)) & m32
    for mult in (0x7FEB352D, 0x846CA68B):  # a 32-bit integer hash finaliser
        x = ((x ^ (x >> 16)) * mult) & m32
    x = x ^ (x >> 16)
    return (x >> 8).float() / float(1 << 24)


def vocab_loss(
    logits: Tensor, labels: Tensor, vocab_size: int, label_smoothing: float
) -> tuple[Tensor, dict[str, Tensor]]:
    """Cross-entropy over the real vocabulary (padded logits left out), as mean and sums."""
    # The padded logits are cut off, not set to -inf: label smoothing puts mass on every
    # class, and a -inf logit would make the loss infinite.
    logits = logits[..., :vocab_size].float()
    flat, target = logits.reshape(-1, vocab_size), labels.reshape(-1)
    loss_sum = F.cross_entropy(
        flat, target, ignore_index=IGNORE, reduction="sum", label_smoothing=label_smoothing
    )
    keep = target != IGNORE
    count = keep.sum()
    correct = ((flat.argmax(-1) == target) & keep).sum()
    loss = loss_sum / count.clamp_min(1)
    return loss, {"loss_sum": loss_sum.detach(), "count": count, "correct": correct}


def hide_features(
    features_BTF: Tensor | None, hide_BT: Tensor, columns: Tensor | None
) -> Tensor | None:
    """Zero (the standardised mean) the shape columns of the hidden beats' features."""
    if features_BTF is None or columns is None:
        return features_BTF
    hide_BTF = hide_BT[..., None] & columns.to(features_BTF.device)
    return features_BTF.masked_fill(hide_BTF, 0.0)


def weigh_code_loss(
    loss: Tensor, sums: dict[str, Tensor], weight: float
) -> tuple[Tensor, dict[str, Tensor]]:
    """The code's cross-entropy times `weight`; no accuracy where the code head is unused."""
    sums = {**sums, "loss_sum": weight * sums["loss_sum"]}
    if weight == 0:
        del sums["correct"]
    return weight * loss, sums


def add_feature_loss(
    loss: Tensor,
    sums: dict[str, Tensor],
    predicted_BKF: Tensor,
    target_BKF: Tensor,
    columns: Tensor,
    labels_BK: Tensor,
    weight: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """`weight` x the squared error of the predicted `columns` (standardised units, averaged
    over the columns) at the positions with a label, added to the loss and its sums."""
    cols = columns.to(predicted_BKF.device)
    err_BK = ((predicted_BKF.float() - target_BKF) ** 2 * cols).sum(-1) / cols.sum().clamp_min(1)
    mse_sum = torch.where(labels_BK != IGNORE, err_BK, torch.zeros_like(err_BK)).sum()
    loss = loss + weight * mse_sum / sums["count"].clamp_min(1)
    return loss, {**sums, "loss_sum": sums["loss_sum"] + weight * mse_sum.detach()}


CHOICE_TEMPERATURE = 0.1
"""`contrastive`: the temperature of the critic's cosine similarities, as SimCLR and MoCo
use for theirs."""
_NOT_A_CANDIDATE = -1e9
"""A finite logit for non-candidates: a row with none (a padded position) stays finite."""


def next_beat_choice(query_BTC: Tensor, key_BTC: Tensor, candidates_BT: Tensor) -> Tensor:
    """(B, T, T) fp32 logits: the cosine similarity of position t's query and beat j's key,
    over CHOICE_TEMPERATURE, where j is a candidate: a real beat of the same window after t
    (the beats up to t the query has read: it could rule them out without predicting
    anything); computed outside autocast."""
    with torch.autocast(query_BTC.device.type, enabled=False):
        q = F.normalize(query_BTC.float(), dim=-1)
        k = F.normalize(key_BTC.float(), dim=-1)
        logits = torch.bmm(q, k.transpose(1, 2)) / CHOICE_TEMPERATURE
        T = candidates_BT.shape[1]
        later = torch.ones(T, T, dtype=torch.bool, device=logits.device).triu(1)
        return logits.masked_fill(~(candidates_BT[:, None, :] & later), _NOT_A_CANDIDATE)


def add_choice_loss(
    loss: Tensor,
    sums: dict[str, Tensor],
    query_BTC: Tensor,
    key_BTC: Tensor,
    real_BT: Tensor,
    weight: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """`weight` x the cross-entropy of picking beat t+1 among the window's later real beats
    from position t's query (`next_beat_choice`), added to the loss and its sums; `correct`
    becomes how often the next beat scores highest. Labelled where beat t+1 is real: the
    positions the code's cross-entropy counts (`count`)."""
    logits_BTT = next_beat_choice(query_BTC, key_BTC, real_BT)
    T = real_BT.shape[1]
    following = torch.arange(1, T + 1, device=real_BT.device).clamp(max=T - 1).expand_as(real_BT)
    has_next = F.pad(real_BT[:, 1:], (0, 1), value=False)
    labels_BT = torch.where(has_next, following, IGNORE)
    flat, target = logits_BTT.reshape(-1, T), labels_BT.reshape(-1)
    choice_sum = F.cross_entropy(flat, target, ignore_index=IGNORE, reduction="sum")
    correct = ((flat.argmax(-1) == target) & (target != IGNORE)).sum()
    loss = loss + weight * choice_sum / sums["count"].clamp_min(1)
    sums = {**sums, "loss_sum": sums["loss_sum"] + weight * choice_sum.detach(), "correct": correct}
    return loss, sums


def beat_code_inputs(weight: float, batch: Batch) -> dict[str, Tensor]:
    """The model's keyword for `beat_codes` logits of the batch's beats as they are (none
    where `weight` is 0 or the beats carry no features)."""
    if weight > 0 and batch.features is not None:
        return {"beat_features_BTF": batch.features}
    return {}


def add_beat_code_loss(
    loss: Tensor,
    sums: dict[str, Tensor],
    codes_BTV: Tensor | None,
    batch: Batch,
    vocab_size: int,
    weight: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """`weight` x the mean cross-entropy of the per-beat network naming each real beat's own
    code (`HeartLM.beat_codes`), added to the loss to backpropagate. Its sum and count go
    apart (`beat_code_sum`, `beat_code_count`: the validation's `val_beat_code_loss`, a mean
    over the real beats), and loss_sum stays the objective's own, so `--export best` and
    `--patience` choose the transformer's step by its objective: on held-out patients the
    network's code loss is lowest at the first validation (step 100) and then rises (their
    codes are partly their own), while `next`'s is lowest at 300-400 (benchmarks/README.md,
    round 68)."""
    if codes_BTV is None:
        return loss, sums
    real = _real_beats(batch)
    labels = torch.where(real, batch.morph.long(), IGNORE)
    mean, code = vocab_loss(codes_BTV, labels, vocab_size, 0.0)
    parts = {"beat_code_sum": code["loss_sum"], "beat_code_count": code["count"]}
    return loss + weight * mean, {**sums, **parts}


def forward_with_codes(
    model: nn.Module, asked: dict[str, Tensor], *args: Any, **kwargs: Any
) -> tuple[Any, Tensor | None]:
    """The model's output for `args`, `kwargs` and its `beat_codes` logits where `asked`
    (`beat_code_inputs`) holds the beats to name, else None."""
    out = model(*args, **kwargs, **asked)
    return out if asked else (out, None)


def _real_beats(batch: Batch) -> Tensor:
    real = batch.morph >= NUM_SPECIAL
    return real if batch.valid is None else real & batch.valid


@dataclass
class MaskedBeats:
    """Masked-beat modelling: round(mask_prob * W) beats per window are predicted.

    mode "bert": of the chosen beats 80 % become MASK, 10 % a random token, 10 % stay;
    mode "mask": all become MASK. Only real beats (not padding or special tokens) are
    chosen while a window has enough of them; picks beyond that carry no label.

    With beat features, a beat whose token was replaced also loses its shape columns
    (`feature_columns`, a bool mask over the feature columns), and `feature_weight` > 0 adds
    their reconstruction (mean squared error, standardised units) to the loss: the model
    must predict the continuous shape and patient-relative deviation, not only the code.
    """

    vocab_size: int
    mask_prob: float = 0.15
    mode: str = "bert"
    label_smoothing: float = 0.0
    seed: int = 0
    gather_head: bool = True
    """run the vocabulary head only at the chosen beats (False: everywhere, then pick)"""
    feature_columns: Tensor | None = None
    feature_weight: float = 0.0
    code_weight: float = 1.0
    """weight of the code's cross-entropy (0: only the features are predicted)"""
    hide_rhythm: bool = False
    """a replaced beat's rhythm token is MASK too (when its RR columns are hidden)"""
    span: int = 1
    """beats are chosen in aligned runs of this many (1: one by one)"""
    beat_code_weight: float = 0.0
    """weight of the per-beat network naming each beat's own code from its inputs
    (`add_beat_code_loss`; 0: off, the model needs `beat_codes` otherwise)"""
    name: str = "masked"
    heads: tuple[str, ...] = ("mlm",)

    def __post_init__(self) -> None:
        if not 0.0 < self.mask_prob < 1.0:
            raise ValueError(f"--mask-prob must be in (0, 1), not {self.mask_prob}")
        if self.mode not in ("bert", "mask"):
            raise ValueError(f"--mask-mode must be bert or mask, not {self.mode!r}")
        if self.span < 1:
            raise ValueError(f"--mask-span must be >= 1, not {self.span}")
        if self.feature_weight > 0 and self.feature_columns is not None:
            self.heads = ("mlm", "masked")  # the reconstruction head learns too
        if self.beat_code_weight > 0:
            self.heads = (*self.heads, "beat_codes")

    def n_masked(self, window: int) -> int:
        if self.span == 1:
            return max(1, round(self.mask_prob * window))
        runs = window // self.span
        return self.span * min(runs, max(1, round(self.mask_prob * window / self.span)))

    def predicted_per_window(self, window: int) -> int:
        return self.n_masked(window) if self.gather_head else window

    def mask(self, batch: Batch) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """(masked input, chosen positions (B, K), labels (B, K) with IGNORE, features with the
        replaced beats' `feature_columns` hidden)."""
        B, W = batch.morph.shape
        k = self.n_masked(W)
        real = _real_beats(batch)
        if self.span == 1:
            score = hash_uniform(self.seed, batch.key, W, salt=1) + (~real).float() * 2.0
            positions = score.topk(k, dim=1, largest=False).indices  # (B, K)
        else:  # whole runs of `span` beats, runs with padding last
            runs = W // self.span
            padding = (~real[:, : runs * self.span]).reshape(B, runs, self.span).float()
            score = hash_uniform(self.seed, batch.key, runs, salt=1) + padding.mean(-1) * 2.0
            first = score.topk(k // self.span, dim=1, largest=False).indices * self.span
            offsets = torch.arange(self.span, device=first.device)
            positions = (first[..., None] + offsets).reshape(B, k)
        picked_real = torch.gather(real, 1, positions)
        labels = torch.gather(batch.morph, 1, positions).long()
        labels = torch.where(picked_real, labels, IGNORE)
        u = hash_uniform(self.seed, batch.key, k, salt=2)
        if self.mode == "bert":
            rand_tok = NUM_SPECIAL + (
                hash_uniform(self.seed, batch.key, k, salt=3) * (self.vocab_size - NUM_SPECIAL)
            ).long().clamp_max(self.vocab_size - NUM_SPECIAL - 1)
            new = torch.where(u < 0.8, MASK, torch.where(u < 0.9, rand_tok, labels))
        else:
            new = torch.full_like(labels, MASK)
        new = torch.where(picked_real, new, torch.gather(batch.morph, 1, positions).long())
        morph = batch.morph.scatter(1, positions, new.to(batch.morph.dtype))
        replaced = torch.zeros_like(real).scatter(1, positions, picked_real & (new != labels))
        features = hide_features(batch.features, replaced, self.feature_columns)
        return morph, positions, labels, features

    def __call__(self, model: nn.Module, batch: Batch) -> tuple[Tensor, dict[str, Tensor]]:
        morph, positions, labels, features = self.mask(batch)
        reconstruct = self.feature_weight > 0 and features is not None
        rhythm = batch.rhythm
        if self.hide_rhythm:  # the beats whose token was replaced
            rhythm = torch.where(morph != batch.morph, MASK, rhythm)
        asked = beat_code_inputs(self.beat_code_weight, batch)
        if self.gather_head:
            out, codes = forward_with_codes(
                model, asked, morph, rhythm, batch.valid,
                head="masked" if reconstruct else "mlm", positions_BK=positions,
                features_BTF=features,
            )  # fmt: skip
            logits, recon_BKF = out if reconstruct else (out, None)
        else:
            logits, codes = forward_with_codes(
                model, asked, morph, rhythm, batch.valid, head="next", features_BTF=features
            )
            logits = torch.gather(logits, 1, positions[..., None].expand(-1, -1, logits.shape[-1]))
            recon_BKF = None
        loss, sums = vocab_loss(logits, labels, self.vocab_size, self.label_smoothing)
        loss, sums = weigh_code_loss(loss, sums, self.code_weight)
        loss, sums = add_beat_code_loss(loss, sums, codes, batch, self.vocab_size,
                                        self.beat_code_weight)  # fmt: skip
        if recon_BKF is None:
            return loss, sums
        idx = positions[..., None].expand(-1, -1, batch.features.shape[-1])
        target_BKF = torch.gather(batch.features, 1, idx).float()
        return add_feature_loss(loss, sums, recon_BKF, target_BKF, self.feature_columns, labels,
                                self.feature_weight)  # fmt: skip


@dataclass
class NextBeat:
    """Next-beat prediction with a causal model: beat t+1 from beats <= t.

    `next` predicts the next beat's code. `forecast` (`feature_weight` > 0) also regresses
    the next beat's `feature_columns` (mean squared error, standardised units): its RR
    intervals and P wave with `--feature-target all`, so the model learns what rhythm to
    expect, which a premature or irregular beat then departs from. `contrastive` reads what
    `forecast` reads and, instead of regressing the next beat's features, learns to pick the
    real next beat out of the window's later real beats (contrastive predictive coding with
    negatives from the same window): a query from position t's state and a key from each
    beat's `feature_columns` (a small MLP; the model's `choice_critic`), scored by their
    cosine similarity (`next_beat_choice`). A regression aims at the mean next beat, which in
    an irregular rhythm is no beat at all; the learnt critic can score any next beat the past
    makes likely. Its accuracy (`val_acc`) is the choice's, not the code's. `code_weight` 0
    predicts only the features (the codes are partly patient-specific). A forecast reads no
    `lookahead_columns` (`heartlm.inputs.FORECAST_INPUTS` says why), no rhythm token (each
    bins the RR after its beat too) and no code (made from a window that can hold the next
    beat's onset): they would hand it what it is asked to predict.
    """

    vocab_size: int
    label_smoothing: float = 0.0
    feature_columns: Tensor | None = None
    feature_weight: float = 0.0
    code_weight: float = 1.0
    lookahead_columns: Tensor | None = None
    beat_code_weight: float = 0.0
    """weight of the per-beat network naming each beat's own code from its inputs
    (`add_beat_code_loss`; 0: off, the model needs `beat_codes` otherwise)"""
    contrastive: bool = False
    name: str = "next"
    heads: tuple[str, ...] = ("next",)

    def __post_init__(self) -> None:
        if self.contrastive and not self.forecasts:
            raise ValueError("a contrastive forecast needs feature_columns and feature_weight > 0")
        if self.forecasts:
            self.heads = ("mlm", "choice") if self.contrastive else ("mlm", "masked")
        if self.beat_code_weight > 0:
            self.heads = (*self.heads, "beat_codes")

    @property
    def forecasts(self) -> bool:
        """Whether the next beat's features are predicted too (`forecast`)."""
        return self.feature_weight > 0 and self.feature_columns is not None

    def predicted_per_window(self, window: int) -> int:
        return window

    def __call__(self, model: nn.Module, batch: Batch) -> tuple[Tensor, dict[str, Tensor]]:
        forecast = self.forecasts and batch.features is not None
        morph, rhythm, features = batch.morph, batch.rhythm, batch.features
        if forecast:
            everywhere = torch.ones_like(batch.morph, dtype=torch.bool)
            features = hide_features(features, everywhere, self.lookahead_columns)
            rhythm = torch.where(rhythm != PAD, MASK, rhythm)  # UNK too: it marks a gap after
            morph = torch.where(morph >= NUM_SPECIAL, MASK, morph)
        asked = beat_code_inputs(self.beat_code_weight, batch)
        if forecast and self.contrastive:
            targets = hide_features(batch.features, everywhere, ~self.feature_columns)
            (logits, query, key), codes = forward_with_codes(
                model, asked, morph, rhythm, batch.valid, head="choice", features_BTF=features,
                targets_BTF=targets,
            )  # fmt: skip
        else:
            out, codes = forward_with_codes(
                model, asked, morph, rhythm, batch.valid,
                head="masked" if forecast else "next", features_BTF=features,
            )  # fmt: skip
            logits, recon_BTF = out if forecast else (out, None)
        real = _real_beats(batch)
        labels = torch.where(real, batch.morph.long(), IGNORE)
        labels = F.pad(labels[:, 1:], (0, 1), value=IGNORE)
        loss, sums = vocab_loss(logits, labels, self.vocab_size, self.label_smoothing)
        if forecast:
            loss, sums = weigh_code_loss(loss, sums, self.code_weight)
        loss, sums = add_beat_code_loss(loss, sums, codes, batch, self.vocab_size,
                                        self.beat_code_weight)  # fmt: skip
        if not forecast:
            return loss, sums
        if self.contrastive:
            return add_choice_loss(loss, sums, query, key, real, self.feature_weight)
        target_BTF = F.pad(batch.features[:, 1:].float(), (0, 0, 0, 1))
        return add_feature_loss(loss, sums, recon_BTF, target_BTF, self.feature_columns, labels,
                                self.feature_weight)  # fmt: skip


def objective_to(objective: object, device: torch.device) -> None:
    """Move the objective's constant tensors (feature columns, class weights) to `device`
    once, so that no step copies them from the host: such a copy costs a transfer each step,
    and a CUDA graph cannot capture one (`--cudagraph`)."""
    for name, value in vars(objective).items():
        if isinstance(value, Tensor):
            setattr(objective, name, value.to(device))


def make_objective(name: str, vocab_size: int, **kwargs: object) -> Objective:
    if name == "masked":
        return MaskedBeats(vocab_size, **kwargs)  # type: ignore[arg-type]
    if name in ("next", *FORECASTS):  # the masked objective's settings do not apply
        accepted = {f.name for f in fields(NextBeat)} - {"name", "heads", "contrastive"}
        kwargs = {key: value for key, value in kwargs.items() if key in accepted}
        if name == "next":  # the code alone, as before `forecast` existed
            kwargs = {**kwargs, "feature_weight": 0.0, "code_weight": 1.0}
        elif kwargs.get("lookahead_columns") is None:
            raise ValueError("a forecast needs its lookahead_columns (heartlm.inputs)")
        kwargs["contrastive"] = name == "contrastive"
        return NextBeat(vocab_size, name=name, **kwargs)  # type: ignore[arg-type]
    raise ValueError(f"--objective must be masked, next, {' or '.join(FORECASTS)}, not {name!r}")
