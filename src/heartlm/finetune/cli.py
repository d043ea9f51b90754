"""`heartlm finetune RUN --task beats|afib --data TOKENS --out FT`: the command-line face."""

from __future__ import annotations

import argparse
from pathlib import Path

from heartlm.errors import HeartlmError
from heartlm.log import logger

DEFAULT_EPOCHS = 10.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    from heartlm.train.flags import add_device_arguments, add_optimizer_arguments
    from heartlm.train.launch import add_launch_arguments

    p.add_argument("run", type=Path, metavar="RUN", help="pretrained run (from `heartlm pretrain`)")
    p.add_argument(
        "--task",
        default="beats",
        choices=["beats", "afib"],
        help="beats: AAMI class per beat; afib: AFIB vs not per window",
    )
    p.add_argument(
        "--data",
        type=Path,
        required=True,
        metavar="TOKENS",
        help="labelled token folder (from `heartlm tokenize` with RUN's codebook)",
    )
    p.add_argument("--out", type=Path, required=True, metavar="FT", help="run folder to write")
    p.add_argument(
        "--from-scratch",
        action="store_true",
        help="RUN's architecture, random weights (the baseline)",
    )
    p.add_argument(
        "--label-fraction",
        type=float,
        default=1.0,
        metavar="F",
        help="keep a seeded fraction F of the training labels (default 1)",
    )
    p.add_argument(
        "--records",
        nargs="+",
        metavar="NAME",
        help="training records, NAME or DB/NAME (default: MIT-BIH DS1 and every "
        "labelled record of other databases)",
    )
    p.add_argument(
        "--val-fraction",
        type=float,
        default=0.2,
        help="share of training records held out for early stopping (default 0.2)",
    )
    p.add_argument(
        "--window",
        type=int,
        default=None,
        help="beats per window (default 128 for beats, 32 for afib; at most RUN's max_len)",
    )
    p.add_argument("--stride", type=int, default=None, help="training stride (default window/2)")
    g = p.add_argument_group("optimisation")
    length = g.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, default=None)
    length.add_argument(
        "--epochs",
        type=float,
        default=None,
        help=f"passes over the training windows (default {DEFAULT_EPOCHS:g})",
    )
    add_optimizer_arguments(g, batch=64, warmup=50, weight_decay=0.01)
    g.add_argument(
        "--val-every",
        type=int,
        default=0,
        help="steps between validations (default: once per epoch)",
    )
    g.add_argument("--log-every", type=int, default=10)
    g.add_argument(
        "--max-class-weight",
        type=float,
        default=20.0,
        help="clip of the balanced class weights (default 20)",
    )
    g.add_argument(
        "--select",
        default="f1",
        choices=["f1", "loss"],
        help="exported checkpoint: best validation F1 (default) or lowest validation loss",
    )
    g.add_argument(
        "--class-weight-power",
        type=float,
        default=0.5,
        metavar="A",
        help="class weights (n/(K*n_c))^A: 1 balanced, 0.5 square root, 0 none (default 0.5)",
    )
    g.add_argument(
        "--morph-dropout",
        type=float,
        default=0.0,
        metavar="P",
        help="training only: replace this share of beats' morphology tokens by MASK (default 0)",
    )
    g.add_argument(
        "--dropout",
        type=float,
        default=None,
        metavar="P",
        help="the model's dropout while fine-tuning (default: the pretrained run's)",
    )
    g.add_argument(
        "--inputs",
        default="all",
        choices=["all", "relative"],
        help="relative: the model sees only patient-relative features and rhythm (codes and "
        "absolute beat shape hidden), in training and at evaluation (default all)",
    )
    g.add_argument(
        "--layer-decay",
        type=float,
        default=1.0,
        metavar="D",
        help="layer-wise learning-rate decay: block i of L learns at D^(L-i) of --lr, the "
        "embeddings at D^(L+1), the head at --lr (default 1: off)",
    )
    g.add_argument("--seed", type=int, default=0)
    add_device_arguments(g)
    g.add_argument("--overwrite", action="store_true", help="replace an existing FT")
    g.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run from its last checkpoint",
    )
    g.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds before a stuck rendezvous or collective fails",
    )
    add_launch_arguments(p)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from heartlm.finetune.lineage import FINETUNE_INFO
    from heartlm.finetune.pipeline import FinetuneConfig
    from heartlm.outdir import check_separate
    from heartlm.train import rundir
    from heartlm.train.launch import is_elastic_restart, maybe_relaunch
    from heartlm.train.loop import TrainConfig

    if args.steps is None and args.epochs is None:
        args.epochs = DEFAULT_EPOCHS
    try:
        cfg = FinetuneConfig(
            task=args.task,
            window=args.window,
            stride=args.stride,
            label_fraction=args.label_fraction,
            val_fraction=args.val_fraction,
            records=args.records,
            from_scratch=args.from_scratch,
            max_class_weight=args.max_class_weight,
            morph_dropout=args.morph_dropout,
            dropout=args.dropout,
            inputs=args.inputs,
            class_weight_power=args.class_weight_power,
            select=args.select,
            seed=args.seed,
            device=None if args.device == "auto" else args.device,
            overwrite=args.overwrite,
            timeout_s=args.timeout,
        )
        cfg.validate()
        tcfg = TrainConfig(
            steps=args.steps,
            epochs=args.epochs,
            batch=args.batch,
            micro_batch=args.micro_batch,
            lr=args.lr,
            warmup_steps=args.warmup,
            weight_decay=args.weight_decay,
            layer_decay=args.layer_decay,
            val_every=args.val_every,
            log_every=args.log_every,
            seed=args.seed,
            compile=args.compile,
            precision=args.precision,
            resume=args.resume or is_elastic_restart(),
        )
        tcfg.validate()
    except ValueError as exc:
        raise HeartlmError(str(exc)) from None
    if args.val_every < 0:
        raise HeartlmError("--val-every must be >= 0")
    plan = rundir.plan_finetune(args.out, tcfg.resume, args.overwrite, FINETUNE_INFO)
    check_separate(plan.out, [args.run, args.data])
    if plan.finished:
        logger.info("%s: already finished: nothing to do", plan.out)
        return 0

    def body() -> int:
        code = maybe_relaunch(args)
        return _finetune(args, plan.out, cfg, tcfg) if code is None else code

    return rundir.run_owned(plan, body)


def _finetune(args: argparse.Namespace, out: Path, cfg: object, tcfg: object) -> int:
    from heartlm.finetune.pipeline import finetune
    from heartlm.train.stopsignal import EXIT_STOPPED

    info = finetune(args.run, args.data, out, cfg, tcfg)
    if info.get("interrupted"):
        logger.info("%s: stopped; continue with --resume", out)
        return EXIT_STOPPED
    return 0
