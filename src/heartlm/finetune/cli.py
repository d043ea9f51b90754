"""`heartlm finetune RUN --task beats|afib --data TOKENS --out FT`: settings and command."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from heartlm.ecg.labels import AAMI_CLASSES
from heartlm.errors import HeartlmError
from heartlm.inputs import CODES_HIDDEN, INPUTS
from heartlm.log import logger
from heartlm.model.config import MAX_BEAT_MLP_BINS, MAX_BEAT_MLP_DEPTH, check_dropout
from heartlm.settings import comma_list, field_defaults, setting
from heartlm.train.config import LaunchConfig, TrainConfig

if TYPE_CHECKING:
    from heartlm.train.rundir import RunPlan

TASKS = ("beats", "afib")
SELECT = ("f1", "loss")
TASK = "task and data"


def _engine_defaults() -> TrainConfig:
    """The engine's settings where fine-tuning differs from pretraining."""
    return TrainConfig(
        epochs=10.0, batch=64, warmup_steps=50, weight_decay=0.01, val_every=0,
        val_batches=None, ckpt_every=0, keep_best=True, best_metric="val_f1",
    )  # fmt: skip


def _check_loss_weight(flag: str, weight: float) -> None:
    """A loss term's weight: a finite number >= 0 (NaN and inf would make every loss NaN)."""
    if not (math.isfinite(weight) and weight >= 0.0):
        raise ValueError(f"{flag} must be a finite number >= 0, not {weight}")


@dataclass
class FinetuneConfig:
    run: Path | None = setting(positional=True, required=True, metavar="RUN")
    """pretrained run (from `heartlm pretrain`)"""
    data: Path | None = setting(required=True, metavar="TOKENS")
    """labelled token folder (from `heartlm tokenize` with RUN's codebook)"""
    out: Path | None = setting(required=True, metavar="FT")
    """run folder to write"""
    overwrite: bool = False
    """replace an existing FT"""
    task: str = setting("beats", choices=TASKS, group=TASK)
    """beats: per-beat AAMI class; afib: per-window AFIB vs not"""
    from_scratch: bool = setting(False, group=TASK)
    """RUN's architecture, random weights (the baseline)"""
    label_fraction: float = setting(1.0, metavar="F", group=TASK)
    """keep this seeded fraction of the training labels (beats, or afib windows)"""
    keep_labels_of: list[str] = setting(
        factory=list, parse=comma_list(str), metavar="DB,...", group=TASK
    )
    """beats, with --label-fraction: databases (token folders' `db` names, comma-separated)
    whose beats keep every label, e.g. synthetic patients, whose labels cost no annotator;
    the fraction is then drawn from the other records' labels"""
    records: list[str] | None = setting(None, metavar="NAME", group=TASK)
    """training records, NAME or DB/NAME (default: MIT-BIH DS1 and every labelled record
    of other databases)"""
    val_fraction: float = setting(0.2, group=TASK)
    """share of training records held out for validation and model selection"""
    window: int | None = setting(None, group=TASK)
    """beats per window (default 128 for beats, 32 for afib; at most RUN's max_len)"""
    stride: int | None = setting(None, group=TASK)
    """training window stride in beats (default window / 2)"""
    select: str = setting("f1", choices=SELECT, group=TASK)
    """exported weights: the best validation F1 (beats: macro F1 of the classes with >= 10
    validation beats; afib: window F1) or the lowest (class-weighted) validation loss; with
    --val-fraction 0 there is no validation and the last weights are exported"""
    max_class_weight: float = setting(20.0, group=TASK)
    """clip of the class weights"""
    class_weight_power: float = setting(0.5, metavar="A", group=TASK)
    """class weights (n / (K n_c))^A: 1 balanced, 0.5 square root, 0 none"""
    afib_beat_loss: float = setting(0.0, metavar="W", group=TASK)
    """afib only: add W x the window head's loss on each beat against its own rhythm (dense
    labels: a window of 32 beats teaches 32 decisions; --label-fraction keeps or drops a
    window's beats with it; the logged training loss includes this term)"""
    label_smoothing: float = setting(0.0, metavar="E", group=TASK)
    """training only: cross-entropy against targets smoothed by E (1 - E on the label, E
    spread over all classes), so the head is not pushed to saturate and its probabilities
    keep a usable range for a decision threshold; validation scores the plain loss"""
    morph_dropout: float = setting(0.0, metavar="P", group=TASK)
    """training only: replace this share of beats' morphology tokens by MASK"""
    dropout: float | None = setting(None, metavar="P", group=TASK)
    """the model's dropout while fine-tuning (default: the pretrained run's)"""
    local_stats: int | None = setting(None, metavar="N", group=TASK)
    """every beat also reads the mean and spread of each feature column over the N beats on
    each side of it and over the whole window (default: the pretrained run's; 0 off)"""
    beat_mlp: int | None = setting(None, metavar="WIDTH", group=TASK)
    """beats: a network WIDTH wide from each beat's visible feature columns and its two
    neighbours' adds its logits to the beat head's (default: the pretrained run's; 0 adds
    none to an encoder without one)"""
    beat_mlp_bins: int | None = setting(None, metavar="N", group=TASK)
    """beats: the per-beat network also reads each input column through a piecewise-linear
    encoding over N (2-256) quantile bins of the training beats (default: the pretrained
    run's; 0 off)"""
    beat_mlp_depth: int | None = setting(None, metavar="N", group=TASK)
    """beats: the per-beat network's hidden layers, each WIDTH wide (1-4; default: the
    pretrained run's, else 1)"""
    beat_mlp_context: bool = setting(False, group=TASK)
    """beats: the per-beat network also reads the transformer's state at each beat, so the
    rhythm the transformer sees reaches the network's own call (needs --beat-mlp WIDTH or a
    run fine-tuned with a per-beat network; not a network from `pretrain --beat-mlp`)"""
    beat_mlp_loss: float = setting(0.0, metavar="W", group=TASK)
    """beats, with a per-beat network: training only, add W x that network's own
    class-weighted cross-entropy (its logits alone), so that it learns to call a beat from
    the beat and its neighbours by itself, not only to correct the transformer's logits; the
    logged training loss includes this term, validation scores the sum's plain loss"""
    beat_encoder_loss: float = setting(0.0, metavar="W", group=TASK)
    """beats, with a per-beat network: training only, add W x the transformer's own
    class-weighted cross-entropy (the beat head's logits without the network's), the
    counterpart of --beat-mlp-loss: each of the sum's two parts also learns to call a beat by
    itself, so that neither leans on the other (gradient blending, Wang et al. 2020); the
    logged training loss includes this term, validation scores the sum's plain loss"""
    beat_mlp_loss_skip: list[str] = setting(
        factory=list, parse=comma_list(str), metavar="CLASS,...", group=TASK
    )
    """beats, with --beat-mlp-loss: AAMI classes (N, S, V, F, Q) that network's own loss
    leaves out, comma-separated (a list in a config file), e.g. S, which the rhythm around a
    beat tells rather than the beat itself (the sum's loss still counts them)"""
    inputs: str = setting("all", choices=INPUTS, group=TASK)
    """all: codes and every feature; no-heart-rate: all but the absolute heart rate;
    relative: only patient-relative features and rhythm (codes read as MASK, absolute shape
    and heart rate as zero); rhythm: of those only the RR and P-segment columns (AFIB); in
    training and at evaluation"""
    train: TrainConfig = setting(factory=_engine_defaults)
    launch: LaunchConfig = setting(factory=LaunchConfig)

    def inert_settings(self) -> dict[str, str]:
        """The objective settings that do nothing with these inputs, each with why (given,
        they are refused; pipeline.objective_settings leaves them out for a resume to
        compare)."""
        inert = {}
        if self.inputs in CODES_HIDDEN:
            inert["morph_dropout"] = (f"--morph-dropout hides codes and absolute shape columns, "
                                      f"which --inputs {self.inputs} hides from every beat "
                                      "already: it would change nothing")  # fmt: skip
        if self.label_fraction == 1.0:
            inert["keep_labels_of"] = ("--keep-labels-of keeps whole the labels of databases "
                                       "that --label-fraction 1 keeps whole "
                                       "anyway")  # fmt: skip
        if self.class_weight_power == 0:
            inert["max_class_weight"] = ("--max-class-weight clips class weights, which "
                                         "--class-weight-power 0 sets to 1 for every "
                                         "class")  # fmt: skip
        return inert

    def validate(self) -> None:
        self.train.validate()
        self.launch.validate()
        self.train.check_overwrite(self.overwrite)
        if self.window is not None and self.window < 1:
            raise ValueError(f"--window must be >= 1, not {self.window}")
        if self.stride is not None and self.stride < 1:
            raise ValueError(f"--stride must be >= 1, not {self.stride}")
        if not 0.0 < self.label_fraction <= 1.0:
            raise ValueError(f"--label-fraction must be in (0, 1], not {self.label_fraction}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"--val-fraction must be in [0, 1), not {self.val_fraction}")
        if self.train.patience and self.val_fraction == 0:
            raise ValueError("--patience stops on the validation score: it needs validation "
                             "records (--val-fraction > 0)")  # fmt: skip
        if not 0.0 <= self.class_weight_power <= 1.0:
            raise ValueError(
                f"--class-weight-power must be in [0, 1], not {self.class_weight_power}"
            )
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"--label-smoothing must be in [0, 1), not {self.label_smoothing}")
        if not 0.0 <= self.morph_dropout < 1.0:
            raise ValueError(f"--morph-dropout must be in [0, 1), not {self.morph_dropout}")
        inert = self.inert_settings()
        for name, default in field_defaults(type(self), inert).items():
            if getattr(self, name) != default:
                raise ValueError(inert[name])
        if self.keep_labels_of and self.task != "beats":
            raise ValueError("--keep-labels-of keeps beat labels: only with --task beats")
        _check_loss_weight("--afib-beat-loss", self.afib_beat_loss)
        if self.afib_beat_loss > 0.0 and self.task != "afib":
            raise ValueError("--afib-beat-loss needs --task afib")
        _check_loss_weight("--beat-mlp-loss", self.beat_mlp_loss)
        if self.beat_mlp_loss > 0.0 and self.task != "beats":
            raise ValueError("--beat-mlp-loss trains the per-beat network: only with --task beats")
        _check_loss_weight("--beat-encoder-loss", self.beat_encoder_loss)
        if self.beat_encoder_loss > 0.0 and self.task != "beats":
            raise ValueError("--beat-encoder-loss is a beat-class loss: only with --task beats")
        if self.beat_mlp_loss_skip and not self.beat_mlp_loss > 0.0:
            raise ValueError("--beat-mlp-loss-skip leaves classes out of --beat-mlp-loss: "
                             "give --beat-mlp-loss W > 0 too")  # fmt: skip
        if unknown := [c for c in self.beat_mlp_loss_skip if c not in AAMI_CLASSES]:
            raise ValueError(f"--beat-mlp-loss-skip takes AAMI classes "
                             f"({', '.join(AAMI_CLASSES)}), not {', '.join(unknown)}")  # fmt: skip
        if set(self.beat_mlp_loss_skip) >= set(AAMI_CLASSES):
            raise ValueError("--beat-mlp-loss-skip leaves every class out: no loss is left")
        # one spelling per set of classes: a resume compares them
        self.beat_mlp_loss_skip = [c for c in AAMI_CLASSES if c in self.beat_mlp_loss_skip]
        if self.train.head_first > 0 and self.from_scratch:
            raise ValueError("--head-first holds the encoder still; with --from-scratch it "
                             "would hold random weights")  # fmt: skip
        if not self.max_class_weight >= 1.0:  # also NaN
            raise ValueError("--max-class-weight must be >= 1")
        if self.dropout is not None:
            check_dropout(self.dropout)
        if self.local_stats is not None and self.local_stats < 0:
            raise ValueError(f"--local-stats must be >= 0, not {self.local_stats}")
        if self.beat_mlp is not None and self.beat_mlp < 0:
            raise ValueError(f"--beat-mlp must be >= 0, not {self.beat_mlp}")
        if self.beat_mlp and self.task != "beats":
            raise ValueError("--beat-mlp feeds the beat head: only with --task beats")
        if self.beat_mlp_bins is not None and (self.beat_mlp_bins < 0 or self.beat_mlp_bins == 1):
            raise ValueError(f"--beat-mlp-bins must be 0 or at least 2, not {self.beat_mlp_bins}")
        if self.beat_mlp_bins is not None and self.beat_mlp_bins > MAX_BEAT_MLP_BINS:
            raise ValueError(f"--beat-mlp-bins must be at most {MAX_BEAT_MLP_BINS}, "
                             f"not {self.beat_mlp_bins}")  # fmt: skip
        if self.beat_mlp_bins and self.task != "beats":
            raise ValueError("--beat-mlp-bins feeds the beat head: only with --task beats")
        if self.beat_mlp_depth is not None and not 1 <= self.beat_mlp_depth <= MAX_BEAT_MLP_DEPTH:
            raise ValueError(f"--beat-mlp-depth must be between 1 and {MAX_BEAT_MLP_DEPTH}, "
                             f"not {self.beat_mlp_depth}")  # fmt: skip
        if self.beat_mlp_depth is not None and self.task != "beats":
            raise ValueError("--beat-mlp-depth shapes the beat head's network: only with --task "
                             "beats")  # fmt: skip
        if self.beat_mlp_depth not in (None, 1) and self.beat_mlp == 0:
            raise ValueError("--beat-mlp-depth counts the per-beat network's layers: not with "
                             "--beat-mlp 0")  # fmt: skip
        if self.beat_mlp_context and self.task != "beats":
            raise ValueError("--beat-mlp-context feeds the beat head's network: only with "
                             "--task beats")  # fmt: skip
        if self.beat_mlp_context and self.beat_mlp == 0:
            raise ValueError("--beat-mlp-context feeds the per-beat network: not with "
                             "--beat-mlp 0")  # fmt: skip
        if self.beat_mlp_bins and self.beat_mlp == 0:
            raise ValueError("--beat-mlp-bins encodes the per-beat network's inputs: not with "
                             "--beat-mlp 0")  # fmt: skip
        for flag, value, allowed in (("--task", self.task, TASKS),
                                     ("--select", self.select, SELECT),
                                     ("--inputs", self.inputs, INPUTS)):  # fmt: skip
            if value not in allowed:
                raise ValueError(f"{flag} must be one of {', '.join(allowed)}, not {value!r}")


Config = FinetuneConfig


def run(cfg: FinetuneConfig) -> int:
    from heartlm.labelled.lineage import FINETUNE_INFO
    from heartlm.outdir import check_separate
    from heartlm.train import rundir
    from heartlm.train.launch import is_elastic_restart, maybe_relaunch

    cfg.train.require_packages()
    cfg.train.resume = cfg.train.resume or is_elastic_restart()
    # The engine selects the exported weights by --select (TrainConfig.keep_best).
    cfg.train.keep_best = True
    cfg.train.best_metric = "val_f1" if cfg.select == "f1" else "val_loss"
    try:
        cfg.validate()
    except ValueError as exc:
        raise HeartlmError(str(exc)) from None
    plan = rundir.plan_finetune(cfg.out, cfg.train.resume, cfg.overwrite, FINETUNE_INFO)
    check_separate(plan.out, [cfg.run, cfg.data])
    if plan.finished:
        logger.info("%s: already finished: nothing to do", plan.out)
        return 0

    def body() -> int:
        code = maybe_relaunch(cfg.launch)
        return _finetune(cfg, plan) if code is None else code

    return rundir.run_owned(plan, body)


def _finetune(cfg: FinetuneConfig, plan: RunPlan) -> int:
    from heartlm.finetune.pipeline import finetune
    from heartlm.train.stopsignal import EXIT_STOPPED

    info = finetune(cfg, plan.out)
    if info.get("stopped"):
        logger.info("%s: stopped; continue with %s", plan.out, plan.continue_with)
    return EXIT_STOPPED if info.get("interrupted") else 0
