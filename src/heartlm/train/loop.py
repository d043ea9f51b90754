"""The trainer that pretrain and finetune compose: `train(cfg, model, objective, ...)`.

`Trainer` holds one run: setup (device, wrapping, optimizer, resume, logging), one step
body for the eager and the CUDA-graph path, validation, checkpoints, the best validation
(`keep_best`) and callbacks (`heartlm.train.callbacks`); `fit` is the loop.

The step has no host syncs: losses and gradient norms stay on the device and are read
every `log_every` steps (one all-reduce for the whole window), so step times in
metrics.jsonl are averages over that window.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
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
from heartlm.train.callbacks import Callback
from heartlm.train.config import SDPA_BACKENDS, TrainConfig, resolve_batch
from heartlm.train.cudagraph import DDP_GRAPH_WARMUP, GRAPH_WARMUP, GraphedStep
from heartlm.train.data import Batch, WindowSampler, dataloader_batches
from heartlm.train.determinism import deterministic_kernels, deterministic_refusal
from heartlm.train.distributed import DistEnv, all_reduce_sum, wrap_model
from heartlm.train.ema import WeightAverage
from heartlm.train.flops import flops_per_token, peak_flops
from heartlm.train.gcsteps import StepCollector
from heartlm.train.metrics import MetricsLogger, last_values
from heartlm.train.objectives import Objective, objective_to
from heartlm.train.optim import Schedule, build_adamw, device_lr, float_lr, scaled_lr, set_lr
from heartlm.train.profile import PROFILE_AFTER, Breakdown
from heartlm.train.steplog import DataWait, StepLog

__all__ = ["SDPA_BACKENDS", "TrainConfig", "TrainResult", "Trainer", "resolve_batch", "train"]


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
    best: dict[str, float] | None = None
    """the best validation's metrics (`keep_best`), its step included"""
    interrupted: bool = False
    """stopped by SIGTERM / SIGUSR1 after a checkpoint (heartlm.train.stopsignal)"""
    exported: bool = False
    """model.safetensors and config.json were written (the run ended, `final_save`)"""


def check_cudagraph(cfg: TrainConfig, env: DistEnv) -> None:
    """Refuse `cudagraph` where the captured step could not be the real one."""
    why = None
    if env.device.type != "cuda":
        why = f"needs a CUDA device, not {env.device.type}"
    elif env.distributed and cfg.backend != "ddp":
        why = f"captures DDP's all-reduces, not --backend {cfg.backend}'s collectives"
    elif env.distributed and cfg.parallel.grad_reduce != "fp32":
        why = "under DDP reduces fp32 gradients only (no --grad-reduce bf16 comm hook)"
    elif cfg.workers > 0:
        why = "needs the device data path (--workers 0), not a DataLoader"
    if why:
        raise HeartlmError(f"--cudagraph {why}")


def check_ema(cfg: TrainConfig, env: DistEnv) -> None:
    """Refuse `ema` where each rank does not hold whole weights to average."""
    if cfg.ema > 0 and env.distributed and cfg.backend != "ddp":
        raise HeartlmError(f"--ema averages whole weights on every rank: --backend ddp, not "
                           f"{cfg.backend} (whose ranks hold shards)")  # fmt: skip


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
    if "beat_code_sum" in got:  # pretrain --beat-mlp: reported beside val_loss, not in it
        out["val_beat_code_loss"] = got["beat_code_sum"] / max(got["beat_code_count"], 1.0)
    return out


def _full_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's weights as CPU copies (a collective under FSDP; all ranks call it)."""
    if zero.is_engine(model):
        return zero.full_state(model)
    state = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


def train(cfg: TrainConfig, *args: Any, **kwargs: Any) -> TrainResult:
    """`Trainer(cfg, *args, **kwargs).fit()`: train `model` on `train_sampler` windows with
    `objective`, writing into `run_dir`; with `cfg.deterministic`, deterministic kernels only
    from the first weight on the device to the export."""
    with deterministic_kernels(cfg.deterministic):
        try:
            return Trainer(cfg, *args, **kwargs).fit()
        except RuntimeError as e:
            if cfg.deterministic and (why := deterministic_refusal(str(e))):
                raise HeartlmError(f"--deterministic: {why}") from e
            raise


class Trainer:
    """One training run; `fit()` runs it. Construction sets up everything, resume included."""

    def __init__(
        self,
        cfg: TrainConfig,
        model: HeartLM,
        objective: Objective,
        train_sampler: WindowSampler,
        val_sampler: WindowSampler | None,
        run_dir: str | Path,
        env: DistEnv,
        meta: dict[str, Any] | None = None,
        callbacks: Sequence[Callback] = (),
        shown_as: str | Path | None = None,
    ) -> None:
        """`meta` (window, objective, vocab, codebook hash, ...) goes into checkpoints and
        the exported config.json; on resume it must match the checkpoint's. `shown_as`: the
        folder the user named, in messages, where `run_dir` is where it is built (a staged
        `.RUN.partial`)."""
        cfg.validate()
        self.cfg, self.model, self.objective, self.env = cfg, model, objective, env
        self.train_sampler, self.val_sampler = train_sampler, val_sampler
        self.run_dir = Path(run_dir)
        self.shown_as = Path(shown_as) if shown_as is not None else self.run_dir
        self.callbacks = list(callbacks)
        if env.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.cuda = env.device.type == "cuda"
        if cfg.cudagraph:
            check_cudagraph(cfg, env)
        check_ema(cfg, env)
        self.micro, self.accum = resolve_batch(cfg.batch, cfg.micro_batch, env.world_size)
        self.total = cfg.total_steps(train_sampler.steps_per_epoch(cfg.batch))
        self.stop = min(self.total, cfg.stop_at) if cfg.stop_at else self.total
        self.meta = {"model": model.cfg.to_dict(), "window": train_sampler.window,
                     "objective": objective.name, "optimizer": cfg.optimizer_shape(),
                     **(meta or {})}  # fmt: skip
        self.best: dict[str, float] | None = None
        self.best_state: dict[str, torch.Tensor] | None = None
        self.worse, self.early, self.interrupted = 0, False, False
        self._build()
        latest = self._resume()
        self._logging(latest)
        self._step_functions()

    # --- setup ---------------------------------------------------------------------------

    def _build(self) -> None:
        """Device, seed, heads, wrapping (AC, compile, DDP / FSDP), AdamW, schedule."""
        cfg, env, model = self.cfg, self.env, self.model
        if self.cuda:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        torch.manual_seed(cfg.seed)
        model.to(env.device)
        objective_to(self.objective, env.device)
        model.use_heads(self.objective.heads)
        self.bf16 = self.cuda and cfg.precision == "bf16"
        self.compile_on = self.cuda if cfg.compile is None else cfg.compile
        self.average = WeightAverage(model, cfg.ema) if cfg.ema > 0 else None
        # the fused kernels are CUDA's; math runs anywhere
        self.attention = cfg.sdpa if self.cuda or cfg.sdpa == "math" else "auto"
        self._use_attention(self.attention)
        stage = cfg.parallel.zero_stage
        if cfg.backend == "deepspeed" and not zero.traceable(stage, env.distributed, self.bf16):
            if self.compile_on:
                why = "bf16 autocast" if stage < 3 else "placeholder weights"
                logger.info(
                    f"--zero-stage {stage} trains the module eagerly ({why}): compile is off"
                )
            self.compile_on = False
        # With cudagraph, DDP is built on the stream that will capture the step.
        self.capture_stream = torch.cuda.Stream() if cfg.cudagraph else None
        self.wrapped = wrap_model(
            model, env, cfg.backend, self.compile_on, cfg.compile_mode, self.bf16,
            static_graph=self.accum == 1 and not self.compile_on, ac=cfg.ac,
            parallel=cfg.parallel, init_stream=self.capture_stream,
        )  # fmt: skip
        if self.average is not None:  # DDP has broadcast rank 0's weights: every rank's start
            self.average.restart(0)
        lr = scaled_lr(cfg.lr, cfg.batch, cfg.lr_scale_batch)
        self.optimizer = build_adamw(
            self.wrapped, lr, cfg.weight_decay, cfg.betas, fused=self.cuda,
            capturable=cfg.cudagraph, layer_decay=cfg.layer_decay, n_layers=model.cfg.n_layers,
            heads_apart=cfg.head_first > 0,
        )  # fmt: skip
        self.head_steps = int(cfg.head_first * self.total)  # below the total: F < 1
        if cfg.head_first > 0 and self.head_steps == 0:
            raise HeartlmError(f"--head-first {cfg.head_first:g} of {self.total} steps is no "
                               "step: give a larger share or more steps")  # fmt: skip
        if cfg.backend == "deepspeed" and env.distributed:
            # The engine takes over this AdamW; its step stands behind self.optimizer.
            zero.check_supported(self.accum, cfg.resume)
            logger.info("--backend deepspeed: no checkpoints are written; the weights are exported")
            zcfg = zero.ZeroConfig(
                stage=cfg.parallel.zero_stage,
                micro_batch_per_gpu=self.micro,
                grad_clip=cfg.grad_clip,
                reduce_bf16=cfg.parallel.grad_reduce == "bf16",
                autocast_bf16=self.bf16,
            )
            self.wrapped, self.optimizer = zero.initialize(
                self.wrapped, self.optimizer, zcfg, env.device
            )
        self.schedule = Schedule(lr, self.total, cfg.warmup_steps, cfg.schedule,
                                 cfg.min_lr_ratio, cfg.step_every, cfg.step_gamma,
                                 cfg.exp_gamma)  # fmt: skip

    def _resume(self) -> Path | None:
        """Load the newest intact checkpoint when `cfg.resume`; sets `self.start`."""
        self.start = 0
        latest = ckpt.resume_point(self.checkpoints, self.env) if self.cfg.resume else None
        if latest is not None:
            ckpt.check_compatible(ckpt.read_meta(latest), self.meta, latest)
            self._restore_best(latest)
            meta = ckpt.load_checkpoint(latest, self.wrapped, self.optimizer, verified=True,
                                        average=self._average_state())  # fmt: skip
            self.start = meta["step"]
            self._resume_average(meta["average_loaded"], latest)
            logger.info("resumed from %s (step %d)", latest, self.start)
        elif self.cfg.resume and self.env.is_main:  # every rank got rank 0's answer
            logger.warning("%s: nothing to resume (no checkpoint); starting at step 0",
                           self.shown_as)  # fmt: skip
        if self.cfg.cudagraph:
            device_lr(self.optimizer, self.env.device)
        return latest

    def _restore_best(self, latest: Path) -> None:
        """keep_best across a resume: the best validation so far is in the checkpoint's
        meta, and its weights in the checkpoint of its step (kept by `save`)."""
        best = ckpt.read_meta(latest).get("best")
        if not self.cfg.keep_best or not best:
            return
        path = self.checkpoints / ckpt.step_name(best["step"])
        if not (path / "meta.json").is_file():
            logger.warning("%s: the best validation's checkpoint is gone; the best is "
                           "tracked from the resume on", path)  # fmt: skip
            return
        meta = ckpt.load_checkpoint(path, self.wrapped, self.optimizer, restore_rng=False,
                                    average=self._average_state())  # fmt: skip
        if self.average is not None and not meta["average_loaded"]:
            logger.warning("%s: holds no --ema average; the best is tracked from the resume "
                           "on", path)  # fmt: skip
            return
        self.best, self.best_state = best, self._weights()

    def _average_state(self) -> dict[str, torch.Tensor] | None:
        return None if self.average is None else self.average.state_dict()

    def _resume_average(self, loaded: bool, latest: Path) -> None:
        """The weight average continues from the checkpoint's, or starts at its weights."""
        if self.average is None:
            return
        if loaded:
            self.average.updates = self.start
        else:
            logger.warning("%s: holds no --ema average; it starts from these weights", latest)
            self.average.restart(self.start)

    def _weights(self) -> dict[str, torch.Tensor]:
        """What validation reads and the run exports: the average with `ema`, else the
        weights (CPU copies; a collective under FSDP)."""
        return _full_state(self.wrapped if self.average is None else self.average.module)

    def _logging(self, latest: Path | None) -> None:
        cfg, env = self.cfg, self.env
        self.metrics = MetricsLogger(
            self.run_dir, env.is_main, cfg.wandb, asdict(cfg), resume_step=self.start,
            restore=None if latest is None else latest / "metrics.jsonl",
        )  # fmt: skip
        window = self.train_sampler.window
        fpt = flops_per_token(self.model.cfg, window, self.objective.predicted_per_window(window))
        warm = min(PROFILE_AFTER, max(0, self.stop - self.start - cfg.profile_steps))
        self.breakdown = Breakdown(cfg.profile_steps, self.start + warm, self.cuda,
                                   self.run_dir if env.is_main else None)  # fmt: skip
        self.steplog = StepLog(self.metrics, env, cfg.batch * window, fpt,
                               peak_flops(env.device), cfg.batch,
                               self.train_sampler.n_windows)  # fmt: skip
        self.last: dict[str, Any] = {"loss": float("nan"), "val_loss": None, "tps": 0.0,
                                     "mfu": 0.0}  # fmt: skip
        if self.start:  # a resume past its last step still reports the run's final numbers
            self.last.update(last_values(self.run_dir / "metrics.jsonl") if env.is_main else {})

    def _step_functions(self) -> None:
        """Autocast, the loss (compiled with `compile_objective`), the
        batch source and, with `cudagraph`, the captured step."""
        cfg = self.cfg
        # No cast cache under graph capture: cached casts would outlive the capture.
        self.autocast: Callable[[], Any] = contextlib.nullcontext
        if self.bf16:
            self.autocast = functools.partial(
                torch.autocast, "cuda", dtype=torch.bfloat16, cache_enabled=not cfg.cudagraph
            )
        self.ddp_sync = hasattr(self.wrapped, "no_sync")
        # FSDP2: reduce-scatter (and reshard) only after the last micro-batch's backward.
        self.fsdp_sync = hasattr(self.wrapped, "set_requires_gradient_sync")
        self.step_loss = functools.partial(self.objective, self.wrapped)
        if self.compile_on and cfg.compile_objective:
            self.step_loss = torch.compile(self.step_loss, mode=cfg.compile_mode)
        self.params = [p for p in self.wrapped.parameters() if p.requires_grad]
        self.loader: Iterator[Batch] | None = None
        if cfg.workers > 0:
            env = self.env
            self.loader = dataloader_batches(
                self.train_sampler, self.start, self.micro, self.accum, env.rank,
                env.world_size, cfg.workers, cfg.prefetch, env.device,
            )  # fmt: skip
        zero = functools.partial(self.optimizer.zero_grad, set_to_none=True)
        self.graphed = None
        if self.capture_stream is not None:
            warmup = DDP_GRAPH_WARMUP if self.ddp_sync else GRAPH_WARMUP
            self.graphed = GraphedStep(self._step_body, zero, self.capture_stream, warmup)

    @property
    def checkpoints(self) -> Path:
        return self.run_dir / "checkpoints"

    # --- one optimizer step --------------------------------------------------------------

    def _next_batch(self, step: int, m: int) -> Batch:
        if self.loader is not None:
            return next(self.loader)
        env = self.env
        return self.train_sampler.batch(step, m, self.micro, self.accum, env.rank, env.world_size)

    def _fetch(self, step: int, wait: DataWait) -> Iterator[Batch]:
        """The step's micro-batches, each fetched just before its forward pass."""
        for m in range(self.accum):
            with wait.span():
                batch = self._next_batch(step, m)
            yield batch

    def _step_body(self, batches: Iterable[Batch]) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward and backward of every micro-batch (DDP and FSDP2 sync on the last), clip, AdamW:
        (mean loss, gradient norm), both on the device. The eager step and the CUDA graph
        run this same body (in the graph: one process, or DDP with its all-reduces)."""
        loss_sum = torch.zeros((), device=self.env.device)
        for m, batch in enumerate(batches):
            last = m == self.accum - 1
            defer = self.ddp_sync and not last
            sync = self.wrapped.no_sync() if defer else contextlib.nullcontext()
            if self.fsdp_sync and self.accum > 1:
                self.wrapped.set_requires_gradient_sync(last)
                self.wrapped.set_reshard_after_backward(last)
            with sync, self.autocast():
                loss, _ = self.step_loss(batch)
                (loss / self.accum).backward()
            loss_sum += loss.detach()
        clip = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
        if isinstance(self.optimizer, zero.ZeroOptimizer):  # DeepSpeed clips in its step
            grad_norm = self.optimizer.clip_grad_norm_()
        else:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, clip)
        if hasattr(grad_norm, "full_tensor"):  # a DTensor under FSDP
            grad_norm = grad_norm.full_tensor()
        self.optimizer.step()
        return loss_sum / self.accum, grad_norm.detach()

    def step(self, step: int) -> None:
        """Optimizer step `step` (0-based), logged on the device."""
        self.breakdown.begin(step)
        lr = self.schedule(step)
        set_lr(self.optimizer, lr, heads_only=step < self.head_steps)
        wait = DataWait(self.cuda)
        if self.graphed is not None:
            with wait.span():
                batches = [self._next_batch(step, m) for m in range(self.accum)]
            loss, grad_norm = self.graphed(batches)
        else:
            loss, grad_norm = self._step_body(self._fetch(step, wait))
            self.optimizer.zero_grad(set_to_none=True)
        if self.average is not None:
            self.average.update()
        self.breakdown.end(step, wait)
        self.steplog.add(step + 1, lr, loss, grad_norm, wait)

    # --- validation, best, checkpoints ---------------------------------------------------

    def _use_attention(self, name: str) -> None:
        """`--sdpa`'s kernel in the model (and its weight average): for the training steps;
        validation and what follows training run PyTorch's choice ("auto"), as a flash kernel
        takes no padding mask."""
        for model in (self.model, *([] if self.average is None else [self.average.module])):
            model.use_attention_kernel(name)

    def validate(self) -> dict[str, float]:
        """The objective's loss on the validation windows, plus the callbacks' metrics (of
        the weight average with `ema`)."""
        wrapped, model = self.wrapped, self.model
        if self.average is not None:
            wrapped = model = self.average.module
        was_training = model.training
        self._use_attention("auto")
        try:
            out = evaluate(wrapped, self.objective, self.val_sampler, self.micro, self.env,
                           self.cfg.val_batches, self.autocast)  # fmt: skip
            for callback in self.callbacks:
                out.update(callback.on_validation(model))
        finally:
            model.train(was_training)
            self._use_attention(self.attention)
        return out

    def _track_best(self, done: int, val: dict[str, float]) -> None:
        """keep_best: hold the weights of the best validation so far (ties go to the later
        step, with more training); count validations without improvement for `patience`."""
        if "val_loss" in val:
            self.last["val_loss"] = val["val_loss"]
        cfg = self.cfg
        if not cfg.keep_best or cfg.best_metric not in val:
            return
        score = val[cfg.best_metric]
        held = None if self.best is None else self.best[cfg.best_metric]
        better = held is None or (score < held if cfg.lower_is_better() else score > held)
        if better or score == held:
            self.best, self.best_state = {"step": done, **val}, self._weights()
        self.worse = 0 if better else self.worse + 1
        self.early = cfg.patience > 0 and self.worse >= cfg.patience

    def save(self, done: int) -> None:
        """A checkpoint after step `done` (all ranks); the best validation's is kept.
        None under DeepSpeed (heartlm.train.zero)."""
        if zero.is_engine(self.wrapped):
            return
        meta = {**self.meta, "best": self.best} if self.cfg.keep_best else self.meta
        protect = [self.best["step"]] if self.best else []
        with float_lr(self.optimizer):
            ckpt.save_checkpoint(
                self.checkpoints, done, self.wrapped, self.optimizer, meta, self.env,
                self.cfg.keep_ckpts, files=[self.run_dir / "metrics.jsonl"], protect=protect,
                average=self._average_state(),
            )  # fmt: skip
        self.steplog.restart_clock()  # checkpoint time is not step time

    # --- the loop ------------------------------------------------------------------------

    def _after_step(self, done: int) -> bool:
        """Log, validate, checkpoint and call back after step `done`; True to stop."""
        cfg, env = self.cfg, self.env
        has_val = self.val_sampler is not None
        val_due = has_val and bool(cfg.val_every) and done % cfg.val_every == 0
        validating = val_due or (has_val and done == self.total)
        ckpt_due = bool(cfg.ckpt_every and done % cfg.ckpt_every == 0)
        ckpt_due = ckpt_due or (done == self.stop and cfg.final_save)
        # One process can stop at any step; several stop together where they sync anyway.
        stop_asked = stopsignal.requested() is not None
        sync = done % cfg.log_every == 0 or val_due or ckpt_due or done == self.stop
        if sync or (stop_asked and not env.distributed):
            summary = self.steplog.flush(self.validate if validating else dict, stop_asked)
            val = summary.pop("val")
            self.interrupted = summary.pop("stop")
            self.last.update(summary)
            if val:
                self._track_best(done, val)
            # With keep_best every validation is a checkpoint, so a resume finds the best.
            ckpt_due = ckpt_due or self.interrupted or (cfg.keep_best and bool(val))
        if ckpt_due:
            self.save(done)
        for callback in self.callbacks:
            callback.on_step_end(done, env.rank)
        if self.interrupted:
            logger.info("stopped by a signal after step %d, checkpoint written", done)
        elif self.early:
            logger.info("no better %s in %d validations: stopping at step %d",
                        cfg.best_metric, self.worse, done)  # fmt: skip
        return self.interrupted or self.early

    def fit(self) -> TrainResult:
        done = self.start
        steps = range(self.start, self.stop)
        try:
            with StepCollector(self.cfg.gc_every) as collector:
                for step in progress(steps, total=len(steps), desc="train", unit="step"):
                    self.step(step)
                    done = step + 1
                    collector.after_step(done)
                    if self._after_step(done):
                        break
        except BaseException:
            if self.graphed is not None:
                self.graphed.release(sync=False)
            raise
        else:
            return self._finish(done)
        finally:
            self._use_attention("auto")

    def _finish(self, done: int) -> TrainResult:
        """Export the weights (the best validation's with keep_best) when the run ended,
        close the logs, write result.json."""
        if self.graphed is not None:
            logger.info("--cudagraph: %d of %d steps replayed the captured step",
                        self.graphed.replays, done - self.start)  # fmt: skip
            self.graphed.release()
        exported = (done == self.total or self.early) and self.cfg.final_save
        if exported:
            state = self.best_state if self.best_state is not None else self._weights()
            # fine-tuning's training records are for resuming; its finetune.json lists them
            info = {k: v for k, v in self.meta.items() if k not in ("model", "train_records")}
            if self.best is not None:
                info["best_step"] = self.best["step"]
            if self.env.is_main:
                export_model(self.run_dir, state, self.model.cfg, info)
        self.metrics.close()
        best = self.best
        result = TrainResult(
            step=done, loss=self.last["loss"], val_loss=self.last["val_loss"],
            elapsed_s=time.perf_counter() - self.steplog.run_t0,
            tokens_per_s=self.last["tps"], mfu=self.last["mfu"], stopped_early=done < self.total,
            best_step=best["step"] if best else None,
            best_val_loss=best.get("val_loss") if best else None,
            best=best, interrupted=self.interrupted, exported=exported,
        )  # fmt: skip
        if self.env.is_main:
            text = json.dumps(asdict(result), indent=2) + "\n"
            atomic_write_text(self.run_dir / "result.json", text)
        return result
