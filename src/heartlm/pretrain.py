"""`heartlm pretrain TOKENS --out RUN`: pretrain the Heart Language Model on token shards."""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any

from heartlm.errors import HeartlmError
from heartlm.log import logger


def add_arguments(p: argparse.ArgumentParser) -> None:
    from heartlm.model.config import PRESETS
    from heartlm.train.distributed import add_parallel_arguments
    from heartlm.train.flags import add_device_arguments, add_optimizer_arguments
    from heartlm.train.launch import add_launch_arguments
    from heartlm.train.optim import SCHEDULES

    p.add_argument("tokens", metavar="TOKENS", help="token folder written by `heartlm tokenize`")
    p.add_argument("--out", required=True, metavar="RUN", help="run folder to write")
    g = p.add_argument_group("model and objective")
    g.add_argument("--preset", default="small", choices=list(PRESETS))
    g.add_argument("--objective", default="masked", choices=["masked", "next"])
    g.add_argument("--window", type=int, default=128, help="beats per window")
    g.add_argument("--stride", type=int, default=None, help="beats between windows (= window)")
    g.add_argument("--mask-prob", type=float, default=0.15, help="share of beats masked")
    g.add_argument(
        "--mask-mode",
        default="bert",
        choices=["bert", "mask"],
        help="bert: 80/10/10 MASK/random/kept; mask: all MASK",
    )
    g.add_argument("--label-smoothing", type=float, default=0.0)
    g.add_argument(
        "--feature-weight",
        type=float,
        default=1.0,
        help="masked objective: weight of reconstructing the masked beats' shape features "
        "(mean squared error, standardised units) beside the code's cross-entropy; 0 = off",
    )
    g.add_argument(
        "--skip-short",
        action="store_true",
        help="skip records shorter than --window instead of padding them",
    )
    g = p.add_argument_group("optimisation")
    add_optimizer_arguments(g, batch=256, warmup=100, weight_decay=0.1)
    length = g.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, default=None)
    length.add_argument("--epochs", type=float, default=None)
    g.add_argument(
        "--lr-scale-batch", action="store_true", help="scale --lr linearly with --batch / 256"
    )
    g.add_argument("--schedule", default="cosine", choices=list(SCHEDULES))
    g.add_argument("--min-lr-ratio", type=float, default=0.1, help="cosine floor / --lr")
    g.add_argument("--step-every", type=int, default=1000, help="step schedule: steps per decay")
    g.add_argument("--step-gamma", type=float, default=0.5, help="step schedule: decay factor")
    g.add_argument("--exp-gamma", type=float, default=0.999, help="exponential: decay per step")
    g.add_argument("--grad-clip", type=float, default=1.0, help="0 = no clipping")
    g.add_argument("--seed", type=int, default=0)
    g = p.add_argument_group("validation, logging, checkpoints")
    g.add_argument("--val-fraction", type=float, default=0.1, help="share of records held out")
    g.add_argument("--val-every", type=int, default=500, help="0 = only at the end")
    g.add_argument("--val-batches", type=int, default=50)
    g.add_argument("--log-every", type=int, default=10, help="steps between host syncs")
    g.add_argument("--ckpt-every", type=int, default=1000, help="0 = only at the end")
    g.add_argument("--keep", type=int, default=2, help="checkpoints to keep")
    g.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    g.add_argument("--overwrite", action="store_true", help="replace a run already in --out")
    g.add_argument(
        "--stop-at",
        type=int,
        default=None,
        help="stop with a checkpoint after this step (time-limited allocations)",
    )
    g.add_argument("--wandb", action="store_true", help="also log to W&B (WANDB_MODE=offline ok)")
    g.add_argument(
        "--final-save",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="checkpoint and export the weights at the end (benchmarks turn it off)",
    )
    g.add_argument(
        "--profile-steps",
        type=int,
        default=0,
        help="profile K steps after warm-up; writes RUN/breakdown.json",
    )
    g = p.add_argument_group("speed and parallelism")
    add_device_arguments(g)
    g.add_argument("--compile-mode", default=None, help="e.g. max-autotune-no-cudagraphs")
    g.add_argument(
        "--sdpa", default="auto", choices=["auto", "flash", "cudnn", "efficient", "math"]
    )
    g.add_argument(
        "--cudagraph",
        action="store_true",
        help="replay each optimizer step as one CUDA graph (CUDA, one process, --workers 0)",
    )
    g.add_argument("--backend", default="ddp", choices=["ddp", "fsdp", "deepspeed"])
    add_parallel_arguments(g)
    g.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds before a stuck rendezvous or collective fails",
    )
    g.add_argument(
        "--workers",
        type=int,
        default=0,
        help="0: windows cut on the device; N: DataLoader with N workers",
    )
    g.add_argument("--prefetch", type=int, default=2, help="DataLoader prefetch_factor")
    add_launch_arguments(p)


def _world_size(args: argparse.Namespace) -> int:
    """Processes the run will have: --nproc, or torchrun's WORLD_SIZE inside a worker."""
    if "LOCAL_RANK" in os.environ:
        return max(1, int(os.environ.get("WORLD_SIZE", "1") or 1))
    return max(1, getattr(args, "nproc", 1))


def _check_flags(args: argparse.Namespace) -> None:
    """The flags TrainConfig does not hold, and how the batch splits over the processes."""
    from heartlm.train.loop import resolve_batch

    if args.window < 1:
        raise HeartlmError(f"--window must be >= 1, not {args.window}")
    if args.stride is not None and args.stride < 1:
        raise HeartlmError(f"--stride must be >= 1, not {args.stride}")
    if not 0.0 <= args.val_fraction < 1.0:
        raise HeartlmError(f"--val-fraction must be in [0, 1), not {args.val_fraction}")
    if not 0.0 <= args.label_smoothing < 1.0:
        raise HeartlmError(f"--label-smoothing must be in [0, 1), not {args.label_smoothing}")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise HeartlmError(f"--timeout must be a positive number of seconds, not {args.timeout}")
    if getattr(args, "nproc", 1) < 1:
        raise HeartlmError(f"--nproc must be at least 1, got {args.nproc}")
    if args.overwrite and not args.final_save:
        # A staged run replaces the old one only once it exported its weights.
        raise HeartlmError("--overwrite needs the final save: drop --no-final-save")
    _, accum = resolve_batch(args.batch, args.micro_batch, _world_size(args))
    if args.backend == "deepspeed":
        from heartlm.train import zero

        zero.require_deepspeed()
        zero.check_supported(accum, args.resume)


def _resolve(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    """Load the tokens and validate every flag: (data, TrainConfig, objective, ModelConfig)."""
    from heartlm.model import model_config
    from heartlm.train.data import load_tokens
    from heartlm.train.distributed import parallel_from_args
    from heartlm.train.launch import is_elastic_restart
    from heartlm.train.loop import TrainConfig
    from heartlm.train.objectives import make_objective

    if args.wandb:
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise HeartlmError(
                "--wandb: wandb is not installed: pip install 'heartlm[wandb]'"
            ) from None
    if args.steps is None and args.epochs is None:
        args.steps = 1000
    _check_flags(args)
    data = load_tokens(args.tokens)
    cfg = TrainConfig(
        steps=args.steps,
        epochs=args.epochs,
        batch=args.batch,
        micro_batch=args.micro_batch,
        lr=args.lr,
        lr_scale_batch=args.lr_scale_batch,
        schedule=args.schedule,
        warmup_steps=args.warmup,
        min_lr_ratio=args.min_lr_ratio,
        step_every=args.step_every,
        step_gamma=args.step_gamma,
        exp_gamma=args.exp_gamma,
        weight_decay=args.weight_decay,
        grad_clip=args.grad_clip,
        val_every=args.val_every,
        val_batches=args.val_batches,
        log_every=args.log_every,
        ckpt_every=args.ckpt_every,
        keep_ckpts=args.keep,
        seed=args.seed,
        compile=args.compile,
        compile_mode=args.compile_mode,
        sdpa=args.sdpa,
        cudagraph=args.cudagraph,
        precision=args.precision,
        backend=args.backend,
        parallel=parallel_from_args(args),
        workers=args.workers,
        prefetch=args.prefetch,
        profile_steps=args.profile_steps,
        wandb=args.wandb,
        resume=args.resume or is_elastic_restart(),
        stop_at=args.stop_at,
        final_save=args.final_save,
    )
    try:
        cfg.validate()
        if args.feature_weight < 0:
            raise ValueError(f"--feature-weight must be >= 0, not {args.feature_weight}")
        objective = make_objective(
            args.objective,
            data.vocab_size,
            mask_prob=args.mask_prob,
            mode=args.mask_mode,
            label_smoothing=args.label_smoothing,
            seed=args.seed,
            feature_columns=data.shape_columns(),
            feature_weight=args.feature_weight,
        )
        mcfg = model_config(
            args.preset,
            vocab_size=data.vocab_size,
            rhythm_vocab_size=data.rhythm_vocab_size,
            n_features=data.n_features,
            max_len=args.window,
            causal=args.objective == "next",
        )
    except ValueError as exc:
        raise HeartlmError(str(exc)) from None
    lengths = data.record_lengths()
    if lengths.size and args.window > lengths.max():
        raise HeartlmError(
            f"--window {args.window} is longer than every record (longest: "
            f"{data.records[int(lengths.argmax())]}, {int(lengths.max())} beats)",
            args.tokens,
        )
    return data, cfg, objective, mcfg


def _expected_meta(args: argparse.Namespace, data: Any, mcfg: Any) -> dict[str, Any]:
    """What a checkpoint of this run records (train() adds the same keys)."""
    return {
        "model": mcfg.to_dict(),
        "window": args.window,
        "objective": args.objective,
        "codebook_hash": data.meta.get("codebook_hash"),
    }


def _nothing_to_do(
    plan: Any, cfg: Any, train_d: Any, args: argparse.Namespace, expected: dict[str, Any]
) -> str | None:
    """Why a --resume has nothing to train (the run reached its last step), or None.
    A damaged or incompatible checkpoint is refused here, before anything is written."""
    from heartlm.train import checkpoint as ckpt
    from heartlm.train.data import window_starts

    latest = ckpt.select_checkpoint(plan.checkpoints, quiet=True)
    if latest is None:
        return None
    meta = ckpt.read_meta(latest)
    ckpt.check_compatible(meta, expected, latest)
    n = window_starts(
        train_d.boundaries, args.window, args.stride or args.window, not args.skip_short
    )
    total = cfg.total_steps(-(-n[0].size // cfg.batch))
    target = min(total, cfg.stop_at or total)
    if meta["step"] < target:
        return None
    if target == total and not (plan.work / "model.safetensors").is_file():
        return None  # the export after the last checkpoint is still to be written
    if target < total:
        return f"already at step {meta['step']} (--stop-at {cfg.stop_at}): nothing to do"
    return (
        f"already finished at step {meta['step']} (--steps {total}): nothing to do; "
        "raise --steps to train further"
    )


def run(args: argparse.Namespace) -> int:
    from heartlm.outdir import check_separate
    from heartlm.train import rundir
    from heartlm.train.data import split_records
    from heartlm.train.launch import maybe_relaunch

    # Every flag, the tokens and the run folder are checked once here, before anything is
    # written and before any relaunch.
    data, cfg, objective, mcfg = _resolve(args)
    plan = rundir.plan_pretrain(args.out, cfg.resume, args.overwrite)
    check_separate(plan.out, [args.tokens])
    splits = split_records(data, args.val_fraction, args.seed)
    if cfg.resume:
        why = _nothing_to_do(plan, cfg, splits[0], args, _expected_meta(args, data, mcfg))
        if why:
            logger.info("%s: %s", plan.out, why)
            return 0

    def body() -> int:
        code = maybe_relaunch(args)
        return _train(args, plan, data, splits, cfg, objective, mcfg) if code is None else code

    return rundir.run_owned(plan, body)


def _train(
    args: argparse.Namespace, plan: Any, data: Any, splits: Any, cfg: Any, objective: Any, mcfg: Any
) -> int:
    """One process's part of the run (all of it without torchrun)."""
    import torch

    from heartlm.model import HeartLM
    from heartlm.runinfo import write_run_json
    from heartlm.train import stopsignal
    from heartlm.train.data import WindowSampler
    from heartlm.train.distributed import barrier, collective_errors, init_distributed, shutdown
    from heartlm.train.loop import train

    t0 = time.perf_counter()
    out = plan.work
    env = init_distributed(args.timeout, None if args.device == "auto" else args.device)
    ok = False
    try:
        barrier(env)  # the owner (rank 0) has prepared the folder
        train_d, val_d = splits
        pad = not args.skip_short
        train_s = WindowSampler(train_d, args.window, args.stride, args.seed, env.device, pad)
        val_s = None
        if val_d.records:
            try:
                val_s = WindowSampler(val_d, args.window, args.stride, args.seed, env.device, pad)
            except HeartlmError:
                logger.warning(
                    "no validation window fits --window %d; skipping validation", args.window
                )
        torch.manual_seed(args.seed)
        model = HeartLM(mcfg)
        info = {
            "vocab_size": data.vocab_size,
            "rhythm_vocab_size": data.rhythm_vocab_size,
            "codebook_hash": data.meta.get("codebook_hash"),
            "tokens": str(args.tokens),
            "fs": data.meta.get("fs"),
            "window_samples": data.meta.get("window_samples"),
            "val_records": val_d.records,
        }
        counts = {
            "train_records": len(train_d.records),
            "val_records": len(val_d.records),
            "train_windows": train_s.n_windows,
            "parameters": model.num_params(),
            "world_size": env.world_size,
        }
        if env.is_main:
            write_run_json(
                out,
                "pretrain",
                {"train": cfg, "model": mcfg},
                counts,
                extra={"tokens": str(args.tokens)},
            )
        logger.info(
            "%s preset, %.1f M parameters, %d training windows of %d beats, %d process(es)",
            args.preset,
            model.num_params() / 1e6,
            train_s.n_windows,
            args.window,
            env.world_size,
        )
        with stopsignal.handling(), collective_errors(env, args.timeout):
            result = train(cfg, model, objective, train_s, val_s, out, env, info)
        if env.is_main:
            write_run_json(
                out,
                "pretrain",
                {"train": cfg, "model": mcfg},
                counts,
                timings={"total": time.perf_counter() - t0, "train": result.elapsed_s},
                extra={"tokens": str(args.tokens), "result": result},
            )
        logger.info(
            "step %d: loss %.4f%s",
            result.step,
            result.loss,
            "" if result.val_loss is None else f", val_loss {result.val_loss:.4f}",
        )
        ok = True
    finally:
        if ok:  # after a failure, a process-group teardown could wait on the failed peers
            shutdown(env)
    if result.interrupted:
        logger.info("%s: stopped at step %d; continue with --resume", plan.out, result.step)
        return stopsignal.EXIT_STOPPED
    return 0
