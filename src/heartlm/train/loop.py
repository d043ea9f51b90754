"""The training loop that pretrain and finetune compose: `train(cfg, model, objective, ...)`.

The step has no host syncs: losses and gradient norms stay on the device and are read
every `log_every` steps (one all-reduce for the whole window), so step times in
metrics.jsonl are averages over that window.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from heartlm.errors import HeartlmError
from heartlm.log import logger, progress
from heartlm.model.hlm import HeartLM
from heartlm.model.load import export_model
from heartlm.outdir import atomic_write_text
from heartlm.train import checkpoint as ckpt
from heartlm.train import stopsignal, zero
from heartlm.train.cudagraph import GraphedStep
from heartlm.train.data import Batch, WindowSampler, dataloader_batches
from heartlm.train.distributed import DistEnv, ParallelConfig, all_reduce_sum, wrap_model
from heartlm.train.flops import flops_per_token, peak_flops
from heartlm.train.launch import maybe_inject_fault
from heartlm.train.metrics import MetricsLogger, last_values
from heartlm.train.objectives import Objective
from heartlm.train.optim import (
    Schedule,
    build_adamw,
    device_lr,
    float_lr,
    scaled_lr,
    set_lr,
)
from heartlm.train.profile import Breakdown
from heartlm.train.steplog import DataWait, StepLog


@dataclass
class TrainConfig:
    steps: int | None = None
    """optimizer steps (or give epochs)"""
    epochs: float | None = None
    batch: int = 256
    """global batch in windows, over all ranks and micro-steps"""
    micro_batch: int | None = None
    """windows per device per forward; default: batch / world size"""
    lr: float = 3e-4
    lr_scale_batch: bool = False
    schedule: str = "cosine"
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    step_every: int = 1000
    step_gamma: float = 0.5
    exp_gamma: float = 0.999
    weight_decay: float = 0.1
    layer_decay: float = 1.0
    """< 1: layer-wise learning-rate decay (fine-tuning; see `build_adamw`)"""
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    val_every: int = 0
    val_batches: int | None = 50
    log_every: int = 10
    ckpt_every: int = 0
    keep_ckpts: int = 2
    seed: int = 0
    compile: bool | None = None
    """None: on for CUDA, off for CPU"""
    compile_mode: str | None = None
    compile_objective: bool = False
    """also compile masking and loss around the model (one graph per step)"""
    cudagraph: bool = False
    """CUDA, one process, device data path only: after GRAPH_WARMUP eager steps, replay
    the whole optimizer step (forward, backward, clipping, AdamW) as one CUDA graph"""
    sdpa: str = "auto"
    precision: str = "bf16"
    backend: str = "ddp"
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """the backend's levers (DDP buckets, gradient dtype, FSDP2 resharding, ZeRO stage)"""
    workers: int = 0
    """0: windows cut on the device; N > 0: a DataLoader with N workers"""
    prefetch: int = 2
    profile_steps: int = 0
    wandb: bool = False
    resume: bool = False
    stop_at: int | None = None
    """stop (with a checkpoint) after this step, as a time-limited allocation would"""
    final_save: bool = True
    """checkpoint and export weights at the end (benchmarks turn it off)"""
    keep_best: bool = False
    """export the weights of the validation with the lowest val_loss, not the last ones"""
    patience: int = 0
    """with keep_best: stop after this many validations without improvement (0: never)"""

    def validate(self) -> None:
        if (self.steps is None) == (self.epochs is None):
            raise ValueError("give exactly one of --steps and --epochs")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"--steps must be >= 1, not {self.steps}")
        if self.epochs is not None and self.epochs <= 0:
            raise ValueError(f"--epochs must be > 0, not {self.epochs}")
        if self.batch < 1:
            raise ValueError(f"--batch must be >= 1, not {self.batch}")
        if self.precision not in ("bf16", "fp32"):
            raise ValueError(f"--precision must be bf16 or fp32, not {self.precision!r}")
        if self.sdpa not in SDPA_BACKENDS:
            raise ValueError(f"--sdpa must be one of {', '.join(SDPA_BACKENDS)}")
        if self.log_every < 1:
            raise ValueError(f"--log-every must be >= 1, not {self.log_every}")
        if self.patience < 0:
            raise ValueError(f"--patience must be >= 0, not {self.patience}")
        if not 0.0 < self.layer_decay <= 1.0:
            raise ValueError(f"--layer-decay must be in (0, 1], not {self.layer_decay}")
        self.parallel.validate()
        self._validate_numbers()

    def _validate_numbers(self) -> None:
        """Numeric flags a run would only trip over later (NaN compares false: `not >`)."""
        positive = {"--lr": self.lr, "--step-gamma": self.step_gamma, "--exp-gamma": self.exp_gamma}
        at_least_0 = {
            "--warmup": self.warmup_steps,
            "--weight-decay": self.weight_decay,
            "--grad-clip": self.grad_clip,
            "--val-every": self.val_every,
            "--ckpt-every": self.ckpt_every,
            "--keep": self.keep_ckpts,
            "--workers": self.workers,
            "--profile-steps": self.profile_steps,
        }
        at_least_1 = {
            "--micro-batch": self.micro_batch,
            "--val-batches": self.val_batches,
            "--step-every": self.step_every,
            "--prefetch": self.prefetch,
            "--stop-at": self.stop_at,
        }
        for flag, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{flag} must be a positive number, not {value}")
        for flag, value in at_least_0.items():
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{flag} must be >= 0, not {value}")
        for flag, value in at_least_1.items():
            if value is not None and value < 1:
                raise ValueError(f"{flag} must be >= 1, not {value}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"--min-lr-ratio must be in [0, 1], not {self.min_lr_ratio}")

    def total_steps(self, steps_per_epoch: int) -> int:
        """Optimizer steps of the whole run (`steps`, or `epochs` of `steps_per_epoch`)."""
        if self.steps is not None:
            return self.steps
        return math.ceil(self.epochs * steps_per_epoch)


@dataclass
class TrainResult:
    step: int
    loss: float
    val_loss: float | None
    elapsed_s: float
    tokens_per_s: float
    mfu: float
    stopped_early: bool
    best_step: int | None = None
    best_val_loss: float | None = None
    interrupted: bool = False
    """stopped by SIGTERM / SIGUSR1 after a checkpoint (heartlm.train.stopsignal)"""


SDPA_BACKENDS = ("auto", "flash", "cudnn", "efficient", "math")


def check_cudagraph(cfg: TrainConfig, env: DistEnv) -> None:
    """Refuse `cudagraph` where the captured step could not be the real one."""
    why = None
    if env.device.type != "cuda":
        why = f"needs a CUDA device, not {env.device.type}"
    elif env.distributed:
        why = "runs one process only (no DDP / FSDP collectives in the graph)"
    elif cfg.workers > 0:
        why = "needs the device data path (--workers 0), not a DataLoader"
    if why:
        raise HeartlmError(f"--cudagraph {why}")


def resolve_batch(batch: int, micro_batch: int | None, world: int) -> tuple[int, int]:
    """(micro-batch per device, accumulation steps) for a global batch of `batch` windows."""
    if batch % world:
        raise HeartlmError(f"--batch {batch} is not divisible by the {world} processes")
    per_rank = batch // world
    micro = micro_batch or per_rank
    if micro < 1 or per_rank % micro:
        raise HeartlmError(
            f"--micro-batch {micro} does not divide the per-process batch {per_rank} "
            f"(--batch {batch} / {world} processes)"
        )
    return micro, per_rank // micro


def _sdpa_context(name: str, cuda: bool) -> Callable[[], contextlib.AbstractContextManager]:
    if name == "auto" or not cuda:
        return contextlib.nullcontext
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }[name]
    return lambda: sdpa_kernel(backend)


def evaluate(
    model: nn.Module,
    objective: Objective,
    sampler: WindowSampler,
    batch_size: int,
    env: DistEnv,
    max_batches: int | None,
    autocast: Callable[[], Any],
) -> dict[str, float]:
    """Exact loss over each held-out window once (summed over ranks)."""
    was_training = model.training
    model.eval()
    totals: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for batch in sampler.eval_batches(batch_size, env.rank, env.world_size, max_batches):
            with autocast():
                _, stats = objective(model, batch)
            for k, v in stats.items():
                totals[k] = totals.get(k, 0) + v.double()
    model.train(was_training)
    if not totals:
        return {}
    keys = sorted(totals)
    summed = all_reduce_sum(torch.stack([totals[k] for k in keys]), env).tolist()
    got = dict(zip(keys, summed, strict=True))
    count = max(got.get("count", 1.0), 1.0)
    out = {"val_loss": got["loss_sum"] / count}
    if "correct" in got:
        out["val_acc"] = got["correct"] / count
    return out


def _full_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's weights as CPU copies (a collective under FSDP; all ranks call it)."""
    if zero.is_engine(model):
        return zero.full_state(model)
    state = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


def train(
    cfg: TrainConfig,
    model: HeartLM,
    objective: Objective,
    train_sampler: WindowSampler,
    val_sampler: WindowSampler | None,
    run_dir: str | Path,
    env: DistEnv,
    meta: dict[str, Any] | None = None,
) -> TrainResult:
    """Train `model` on `train_sampler` windows with `objective`; writes into `run_dir`.

    `meta` (window, objective, vocab, codebook hash, ...) goes into checkpoints and the
    exported config.json; on resume it must match the checkpoint's.
    """
    cfg.validate()
    run_dir = Path(run_dir)
    if env.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
    cuda = env.device.type == "cuda"
    if cfg.cudagraph:
        check_cudagraph(cfg, env)
    micro, accum = resolve_batch(cfg.batch, cfg.micro_batch, env.world_size)
    steps_per_epoch = train_sampler.steps_per_epoch(cfg.batch)
    total = cfg.total_steps(steps_per_epoch)
    window = train_sampler.window
    meta = {
        "model": model.cfg.to_dict(),
        "window": window,
        "objective": objective.name,
        **(meta or {}),
    }
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(cfg.seed)

    model.to(env.device)
    model.use_heads(objective.heads)
    bf16 = cuda and cfg.precision == "bf16"
    compile_on = cuda if cfg.compile is None else cfg.compile
    wrapped = wrap_model(
        model,
        env,
        cfg.backend,
        compile_on,
        cfg.compile_mode,
        bf16,
        static_graph=accum == 1 and not compile_on,
        parallel=cfg.parallel,
    )
    lr = scaled_lr(cfg.lr, cfg.batch, cfg.lr_scale_batch)
    optimizer = build_adamw(
        wrapped,
        lr,
        cfg.weight_decay,
        cfg.betas,
        fused=cuda,
        capturable=cfg.cudagraph,
        layer_decay=cfg.layer_decay,
        n_layers=model.cfg.n_layers,
    )
    if cfg.backend == "deepspeed" and env.distributed:
        zero.check_supported(accum, cfg.resume)
        logger.info("--backend deepspeed: no checkpoints are written; the weights are exported")
        zcfg = zero.ZeroConfig(
            cfg.parallel.zero_stage, micro, cfg.grad_clip, cfg.parallel.grad_reduce == "bf16"
        )
        wrapped, optimizer = zero.initialize(wrapped, optimizer, zcfg, env.device)
    schedule = Schedule(
        lr,
        total,
        cfg.warmup_steps,
        cfg.schedule,
        cfg.min_lr_ratio,
        cfg.step_every,
        cfg.step_gamma,
        cfg.exp_gamma,
    )

    start = 0
    root = run_dir / "checkpoints"
    latest = ckpt.resume_point(root, env) if cfg.resume else None
    if latest is not None:
        ckpt.check_compatible(ckpt.read_meta(latest), meta, latest)
        start = ckpt.load_checkpoint(latest, wrapped, optimizer, verified=True)["step"]
        logger.info("resumed from %s (step %d)", latest, start)
    elif cfg.resume:
        logger.warning("%s: no checkpoint to resume from; starting at step 0", run_dir)
    if cfg.cudagraph:
        device_lr(optimizer, env.device)
    stop = min(total, cfg.stop_at) if cfg.stop_at else total

    metrics = MetricsLogger(
        run_dir,
        env.is_main,
        cfg.wandb,
        asdict(cfg),
        resume_step=start,
        restore=None if latest is None else latest / "metrics.jsonl",
    )
    fpt = flops_per_token(model.cfg, window, objective.predicted_per_window(window))
    peak = peak_flops(env.device)
    autocast = (
        # No cast cache under graph capture: cached casts would outlive the capture.
        (lambda: torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not cfg.cudagraph))
        if bf16
        else contextlib.nullcontext
    )
    sdpa = _sdpa_context(cfg.sdpa, cuda)
    ddp_sync = hasattr(wrapped, "no_sync")
    step_loss = functools.partial(objective, wrapped)
    if compile_on and cfg.compile_objective:
        step_loss = torch.compile(step_loss, mode=cfg.compile_mode)
    params = [p for p in wrapped.parameters() if p.requires_grad]

    loader: Iterator[Batch] | None = None
    if cfg.workers > 0:
        loader = dataloader_batches(
            train_sampler,
            start,
            micro,
            accum,
            env.rank,
            env.world_size,
            cfg.workers,
            cfg.prefetch,
            env.device,
        )

    def next_batch(step: int, m: int) -> Batch:
        if loader is not None:
            return next(loader)
        return train_sampler.batch(step, m, micro, accum, env.rank, env.world_size)

    def clip() -> torch.Tensor:
        if isinstance(optimizer, zero.ZeroOptimizer):  # DeepSpeed clips in its step
            return optimizer.clip_grad_norm_()
        grad_norm = torch.nn.utils.clip_grad_norm_(
            params, cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
        )
        return grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm

    def graph_step(batches: list[Batch]) -> tuple[torch.Tensor, torch.Tensor]:
        """`eager_step` for the CUDA graph: no DDP, no zero_grad, batches given."""
        loss_sum = torch.zeros((), device=env.device)
        for batch in batches:
            with autocast(), sdpa():
                loss, _ = step_loss(batch)
                (loss / accum).backward()
            loss_sum += loss.detach()
        grad_norm = clip()
        optimizer.step()
        return loss_sum / accum, grad_norm.detach()

    def eager_step(step: int) -> tuple[torch.Tensor, torch.Tensor, DataWait]:
        """One optimizer step: (mean loss, gradient norm, time waiting for data)."""
        loss_sum = torch.zeros((), device=env.device)
        wait = DataWait(cuda)
        for m in range(accum):
            with wait.span():
                batch = next_batch(step, m)
            sync = contextlib.nullcontext() if not ddp_sync or m == accum - 1 else wrapped.no_sync()
            with sync, autocast(), sdpa():
                loss, _ = step_loss(batch)
                (loss / accum).backward()
            loss_sum += loss.detach()
        grad_norm = clip()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss_sum / accum, grad_norm.detach(), wait

    graphed = (
        GraphedStep(graph_step, functools.partial(optimizer.zero_grad, set_to_none=True))
        if cfg.cudagraph
        else None
    )

    breakdown = Breakdown(
        cfg.profile_steps,
        start + min(5, max(0, stop - start - cfg.profile_steps)),
        cuda,
        run_dir if env.is_main else None,
    )
    steplog = StepLog(
        metrics, env, cfg.batch * window, fpt, peak, cfg.batch, train_sampler.n_windows
    )
    last: dict[str, Any] = {"loss": float("nan"), "val_loss": None, "tps": 0.0, "mfu": 0.0}
    if start:  # a resume past its last step still reports the run's final numbers
        last.update(last_values(run_dir / "metrics.jsonl") if env.is_main else {})
    best: tuple[int, float] | None = None
    best_state: dict[str, torch.Tensor] | None = None
    worse, early, done, interrupted = 0, False, start, False
    for step in progress(range(start, stop), total=stop - start, desc="train", unit="step"):
        breakdown.begin(step)
        step_lr = schedule(step)
        set_lr(optimizer, step_lr)
        if graphed is not None:
            wait = DataWait(cuda)
            with wait.span():
                batches = [next_batch(step, m) for m in range(accum)]
            mean_loss, grad_norm = graphed(batches)
        else:
            mean_loss, grad_norm, wait = eager_step(step)
        breakdown.end(step, wait)
        steplog.add(step + 1, step_lr, mean_loss, grad_norm, wait)

        done = step + 1
        val_due = val_sampler is not None and cfg.val_every and done % cfg.val_every == 0
        ckpt_due = (cfg.ckpt_every and done % cfg.ckpt_every == 0) or (
            done == stop and cfg.final_save
        )
        # One process can stop at any step; several stop together where they sync anyway.
        stop_asked = stopsignal.requested() is not None
        if (
            done % cfg.log_every == 0
            or val_due
            or ckpt_due
            or done == stop
            or (stop_asked and not env.distributed)
        ):
            final_val = done == total and val_sampler is not None
            validate = (
                (
                    lambda: evaluate(
                        wrapped, objective, val_sampler, micro, env, cfg.val_batches, autocast
                    )
                )
                if val_due or final_val
                else dict
            )
            summary = steplog.flush(validate, stop_asked)
            val = summary.pop("val")
            interrupted = summary.pop("stop")
            ckpt_due = ckpt_due or interrupted
            last.update(summary)
            if "val_loss" in val:
                last["val_loss"] = val["val_loss"]
                if cfg.keep_best and (best is None or val["val_loss"] < best[1]):
                    best, best_state, worse = (done, val["val_loss"]), _full_state(wrapped), 0
                elif cfg.keep_best:
                    worse += 1
                    early = cfg.patience > 0 and worse >= cfg.patience
        if ckpt_due and not zero.is_engine(wrapped):
            with float_lr(optimizer):
                ckpt.save_checkpoint(
                    root,
                    done,
                    wrapped,
                    optimizer,
                    meta,
                    env,
                    cfg.keep_ckpts,
                    files=[run_dir / "metrics.jsonl"],
                )
            steplog.restart_clock()  # checkpoint time is not step time
        maybe_inject_fault(done, env.rank)
        if interrupted:
            logger.info("stopped by a signal after step %d, checkpoint written", done)
            break
        if early:
            logger.info("no better val_loss in %d validations: stopping at step %d", worse, done)
            break

    if (done == total or early) and cfg.final_save:
        state = best_state if best_state is not None else _full_state(wrapped)
        if env.is_main:
            export_model(run_dir, state, model.cfg, {k: v for k, v in meta.items() if k != "model"})
    metrics.close()
    result = TrainResult(
        step=done,
        loss=last["loss"],
        val_loss=last["val_loss"],
        elapsed_s=time.perf_counter() - steplog.run_t0,
        tokens_per_s=last["tps"],
        mfu=last["mfu"],
        stopped_early=done < total,
        best_step=best[0] if best else None,
        best_val_loss=best[1] if best else None,
        interrupted=interrupted,
    )
    if env.is_main:
        atomic_write_text(run_dir / "result.json", json.dumps(asdict(result), indent=2) + "\n")
    return result
