"""Fine-tuning objectives for the training engine: per-beat AAMI classes and per-window AFIB.

Both follow `heartlm.train.objectives.Objective`: return the mean loss to backpropagate and
device sums (`loss_sum`, `count`, `correct`) so validation aggregates exactly. Neither
syncs with the host.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from heartlm.labelled.windows import AFIB, AFIB_MIN_FRACTION, IGNORE, UNKNOWN_RHYTHM
from heartlm.model.hlm import valid_mean
from heartlm.shards import MASK
from heartlm.train.objectives import hash_uniform, hide_features

# Salt of the label-dropping coin, so it is independent of any other use of hash_uniform.
_KEEP_SALT = 6


def _weighted_loss(
    logits_NC: Tensor, target_N: Tensor, weight_C: Tensor, smoothing: float = 0.0
) -> tuple[Tensor, dict[str, Tensor]]:
    """Class-weighted cross-entropy over targets >= 0 (against targets smoothed by
    `smoothing`): the mean to backpropagate, and the device sums (`loss_sum`, `count`,
    `correct`) that validation aggregates exactly."""
    labelled = target_N >= 0
    safe = target_N.clamp(min=0)
    nll = F.cross_entropy(logits_NC.float(), safe, reduction="none", label_smoothing=smoothing)
    weight = weight_C.to(logits_NC.device)
    loss_sum = torch.where(labelled, nll * weight[safe], torch.zeros_like(nll)).sum()
    count = labelled.sum()
    correct = ((logits_NC.argmax(-1) == target_N) & labelled).sum()
    return loss_sum / count.clamp(min=1), {"loss_sum": loss_sum, "count": count, "correct": correct}


def _training_only(model, smoothing: float) -> float:
    """Label smoothing while training; validation scores the plain cross-entropy, so its
    losses stay comparable across runs with and without it."""
    return smoothing if model.training else 0.0


def drop_morphology(model, batch, p: float, columns: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """In training only: replace a random share `p` of the real beats' morphology tokens by
    MASK (the pretraining mask token) and zero their absolute shape features (`columns`), so
    the head cannot lean on a record's exact beats and must use the patient-relative
    features, rhythm and context (a regulariser against memorising patients). Returns
    (tokens, features)."""
    if p <= 0.0 or not model.training:
        return batch.morph, batch.features
    drop = torch.rand(batch.morph.shape, device=batch.morph.device) < p
    if batch.valid is not None:
        drop = drop & batch.valid
    return batch.morph.masked_fill(drop, MASK), hide_features(batch.features, drop, columns)


def afib_targets(rhythm_label_BT: Tensor, valid_BT: Tensor | None) -> Tensor:
    """(B,) window labels by the AFIB rule of `heartlm.labelled.windows` (1, 0, or IGNORE)."""
    real = rhythm_label_BT >= 0
    if valid_BT is not None:
        real = real & valid_BT
    known = real & (rhythm_label_BT != UNKNOWN_RHYTHM)
    n_real = real.sum(dim=1)
    n_afib = (real & (rhythm_label_BT == AFIB)).sum(dim=1)
    label = (n_afib >= AFIB_MIN_FRACTION * n_real).long()
    return torch.where(known.any(dim=1), label, torch.full_like(label, IGNORE))


def beat_afib_targets(
    rhythm_label_BT: Tensor, valid_BT: Tensor | None, labelled_B: Tensor
) -> Tensor:
    """(B, T) per-beat AFIB targets (1, 0, or IGNORE) inside the labelled windows: IGNORE for
    pads and beats of unknown rhythm."""
    known = (rhythm_label_BT >= 0) & (rhythm_label_BT != UNKNOWN_RHYTHM) & labelled_B[:, None]
    if valid_BT is not None:
        known = known & valid_BT
    target = (rhythm_label_BT == AFIB).long()
    return torch.where(known, target, torch.full_like(target, IGNORE))


def keep_window(key_B: Tensor, fraction: float, seed: int) -> Tensor:
    """Seeded coin per window stream position (the same on any number of ranks): True for
    about `fraction` of windows."""
    return hash_uniform(seed, key_B.long(), 1, salt=_KEEP_SALT)[:, 0] < fraction


def keep_table(sampler, n_positions: int, fraction: float, seed: int) -> Tensor:
    """(n_positions,) bool: whether training stream position p carries its window's label.

    A seeded `fraction` of the sampler's windows is kept once, and each position looks up
    the window it holds (the sampler's per-epoch permutation), so --label-fraction F means
    the same F of the windows in every epoch rather than a fresh coin per epoch (which would
    show nearly every window's label over many epochs)."""
    n = sampler.n_windows
    g = torch.Generator().manual_seed(seed * 7919 + _KEEP_SALT)
    keep_window_id = torch.zeros(n, dtype=torch.bool)
    keep_window_id[torch.randperm(n, generator=g)[: max(1, round(fraction * n))]] = True
    epochs = -(-n_positions // n)
    order = torch.cat([sampler.permutation(e).cpu() for e in range(epochs)])[:n_positions]
    return keep_window_id[order]


class BeatClasses:
    """Per-beat AAMI class with a per-token head; class-weighted cross-entropy.

    Weights come from the training labels (`heartlm.labelled.windows.class_weights`); unlabelled
    or padded beats (AAMI -1) give no loss but are still context for the encoder.
    """

    name = "beats"
    heads = ("beat",)

    def __init__(
        self,
        class_weights: Sequence[float],
        morph_dropout: float = 0.0,
        shape_columns: Tensor | None = None,
        label_smoothing: float = 0.0,
        mlp_loss: float = 0.0,
        mlp_skip: Sequence[int] = (),
        encoder_loss: float = 0.0,
    ) -> None:
        self.weight = torch.tensor(list(class_weights), dtype=torch.float32)
        self.morph_dropout = morph_dropout
        self.shape_columns = shape_columns
        self.label_smoothing = label_smoothing
        self.mlp_loss = mlp_loss
        self.mlp_skip = torch.tensor(list(mlp_skip), dtype=torch.long)  # objective_to moves it
        self.encoder_loss = encoder_loss

    def __call__(self, model, batch) -> tuple[Tensor, dict[str, Tensor]]:
        """The class-weighted loss of the beat head, plus in training `mlp_loss` x the
        per-beat network's own (--beat-mlp-loss), without the beats of the class codes
        `mlp_skip` (--beat-mlp-loss-skip), and `encoder_loss` x the transformer's own
        (--beat-encoder-loss); the device sums are the beat head's."""
        morph, features = drop_morphology(model, batch, self.morph_dropout, self.shape_columns)
        parts = (self.mlp_loss > 0.0 or self.encoder_loss > 0.0) and model.training
        out = model(morph, batch.rhythm, valid_BT=batch.valid,
                    head="beat_parts" if parts else "beat", features_BTF=features)  # fmt: skip
        target_BT = batch.aami
        if batch.valid is not None:
            target_BT = target_BT.masked_fill(~batch.valid, IGNORE)
        target = target_BT.reshape(-1)
        smoothing = _training_only(model, self.label_smoothing)

        def loss_of(logits_BTC: Tensor, target: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
            logits = logits_BTC.reshape(-1, logits_BTC.shape[-1])
            return _weighted_loss(logits, target, self.weight, smoothing)

        if not parts:
            return loss_of(out, target)
        encoder_BTC, network_BTC = out
        loss, sums = loss_of(encoder_BTC + network_BTC, target)
        if self.mlp_loss > 0.0:
            own = target
            if self.mlp_skip.numel():
                own = target.masked_fill(torch.isin(target, self.mlp_skip), IGNORE)
            loss = loss + self.mlp_loss * loss_of(network_BTC, own)[0]
        if self.encoder_loss > 0.0:
            loss = loss + self.encoder_loss * loss_of(encoder_BTC, target)[0]
        return loss, sums

    def predicted_per_window(self, window: int) -> int:
        return 0  # no vocabulary projection; the 5-way head is negligible in FLOPs


class AfibWindows:
    """Per-window AFIB vs not from the window head; class-weighted cross-entropy.

    `label_fraction` < 1 keeps the label of a seeded fraction of windows. `keep_by_position`
    (bool, one entry per training stream position, from `keep_table`) makes the choice a
    property of the window, so the same windows are labelled in every epoch; without it
    (validation, or no table) the coin is drawn per stream position.

    `beat_loss` > 0 adds, with that weight, the same head's cross-entropy on every beat of a
    labelled window against the beat's own rhythm (AFIB or not): the window's logits are the
    mean of its beats' (the head is linear after a mean pool), so each window then teaches
    32 decisions instead of one. Validation scores the window alone.
    """

    name = "afib"
    heads = ("window",)

    def __init__(
        self,
        class_weights: Sequence[float],
        label_fraction: float = 1.0,
        seed: int = 0,
        morph_dropout: float = 0.0,
        keep_by_position: Tensor | None = None,
        shape_columns: Tensor | None = None,
        beat_loss: float = 0.0,
        label_smoothing: float = 0.0,
    ) -> None:
        self.weight = torch.tensor(list(class_weights), dtype=torch.float32)
        self.beat_loss = beat_loss
        self.label_smoothing = label_smoothing
        self.label_fraction = label_fraction
        self.seed = seed
        self.morph_dropout = morph_dropout
        self.keep_by_position = keep_by_position
        self.shape_columns = shape_columns

    def __call__(self, model, batch) -> tuple[Tensor, dict[str, Tensor]]:
        morph, features = drop_morphology(model, batch, self.morph_dropout, self.shape_columns)
        dense = self.beat_loss > 0.0 and model.training
        logits = model(
            morph,
            batch.rhythm,
            valid_BT=batch.valid,
            head="window_beats" if dense else "window",
            features_BTF=features,
        )
        # The head is linear: the mean of the beats' logits is the head on the pooled beats.
        logits_BC = valid_mean(logits.float(), batch.valid) if dense else logits
        target_B = afib_targets(batch.rhythm_label, batch.valid)
        if self.label_fraction < 1.0:
            keep = keep_window(batch.key, self.label_fraction, self.seed)
            table = self.keep_by_position
            if table is not None:
                table = self.keep_by_position = table.to(batch.key.device)
                inside = batch.key < table.numel()
                keep = torch.where(inside, table[batch.key.clamp(max=table.numel() - 1)], keep)
            target_B = torch.where(keep, target_B, torch.full_like(target_B, IGNORE))
        smoothing = _training_only(model, self.label_smoothing)
        loss, sums = _weighted_loss(logits_BC, target_B, self.weight, smoothing)
        if not dense:
            return loss, sums
        target_BT = beat_afib_targets(batch.rhythm_label, batch.valid, target_B >= 0)
        beats, _ = _weighted_loss(logits.flatten(0, 1), target_BT.flatten(), self.weight,
                                  smoothing)  # fmt: skip
        return loss + self.beat_loss * beats, sums

    def predicted_per_window(self, window: int) -> int:
        return 0
