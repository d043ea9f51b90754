"""The training engine's settings: `TrainConfig` (the loop) and `LaunchConfig` (processes).

pretrain and finetune both hold these two sections, so every engine flag, its default and
its help is written here once (`heartlm.settings` makes the flags); a command changes only
the defaults it needs (finetune: batch 64, warm-up 50, ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from heartlm.errors import HeartlmError
from heartlm.model.hlm import ATTENTION_KERNELS
from heartlm.settings import check_seed, field_defaults, setting

SCHEDULES = ("cosine", "step", "exponential", "constant")
BACKENDS = ("ddp", "fsdp", "deepspeed")
SDPA_BACKENDS = ("auto", *ATTENTION_KERNELS)
STATIC_GRAPH = ("auto", "on", "off")
GRAD_REDUCE = ("fp32", "bf16")
RESHARD = ("auto", "always", "never")
# Below this many parameters the gathered bf16 weights of every block fit beside the
# activations, and FSDP2 resharding would only add an all-gather per block to backward.
RESHARD_FROM_PARAMS = 1_000_000_000
DDP_BUCKET_MB = 100.0
"""`--ddp-bucket-mb`'s default, not DDP's 25: under torch.compile DDP splits the graph at every
bucket, and on 2 x H100 (`base`, weak, compiled) 25-MiB buckets gave 0.917 / 0.926 weak
efficiency at windows 128 / 1024, 100-MiB buckets 0.955 / 0.957, one repeat each
(benchmarks/README.md)."""
FSDP_UNIT_PARAMS = 100_000_000
"""`--fsdp-group-blocks 0` (auto): FSDP2 units of up to this many block parameters. Each unit
costs host time per step (hooks, collectives to issue); on 2 x H100, `base` (85 M in its 12
blocks) went from 0.56 weak efficiency with a unit per block to 0.77 with 4 blocks per unit
and 0.92 with all 12 in one (benchmarks/README.md)."""
AC_MODES = ("none", "full", "selective")
DEVICES = ("auto", "cpu", "cuda")

OPT = "optimisation"
LOG = "validation, logging, checkpoints"
SPEED = "speed and parallelism"
LAUNCH = "launch"


@dataclass
class ParallelConfig:
    """Levers of data parallelism, to measure rather than assume (docs/distributed.md)."""

    ddp_bucket_mb: float = setting(DDP_BUCKET_MB, group=SPEED)
    """DDP gradient bucket size, MiB (bucket_cap_mb); compiled graphs split there too"""
    ddp_bucket_view: bool = setting(True, group=SPEED)
    """DDP gradient_as_bucket_view: gradients live in the all-reduce buckets (no copy)"""
    ddp_static_graph: str = setting("auto", choices=STATIC_GRAPH, group=SPEED)
    """DDP static_graph (auto: on for an uncompiled step without accumulation)"""
    grad_reduce: str = setting("fp32", choices=GRAD_REDUCE, group=SPEED)
    """dtype gradients travel in; bf16: DDP bf16_compress_hook, FSDP2 reduce_dtype, DeepSpeed
    the nn.Linear gradients (with --precision bf16; else communication_data_type); weights
    and AdamW stay fp32"""
    fsdp_reshard: str = setting("auto", choices=RESHARD, group=SPEED)
    """FSDP2 reshard_after_forward of the blocks (auto: from 1 B parameters; never: less
    communication, more memory)"""
    fsdp_group_blocks: int = setting(0, metavar="K", group=SPEED)
    """FSDP2: K consecutive blocks gathered and reduced as one unit (fewer, larger collectives
    and hooks per step; more memory held at once); 0: units of up to 100 M parameters"""
    nccl_max_ctas: int = setting(0, metavar="N", group=SPEED)
    """NCCL: at most N thread blocks (one SM each) per collective (NCCL_MAX_CTAS); 0: NCCL's
    choice. Fewer leave more SMs to the backward pass that the all-reduce overlaps"""
    zero_stage: int = setting(2, choices=(1, 2, 3), group=SPEED)
    """DeepSpeed ZeRO stage with --backend deepspeed: 1 shards optimizer state, 2 also
    gradients, 3 also weights"""

    def validate(self) -> None:
        for flag, value, allowed in (
            ("--ddp-static-graph", self.ddp_static_graph, STATIC_GRAPH),
            ("--grad-reduce", self.grad_reduce, GRAD_REDUCE),
            ("--fsdp-reshard", self.fsdp_reshard, RESHARD),
            ("--zero-stage", self.zero_stage, (1, 2, 3)),
        ):
            if value not in allowed:
                names = ", ".join(map(str, allowed))
                raise ValueError(f"{flag} must be one of {names}, not {value!r}")
        if self.fsdp_group_blocks < 0:
            raise ValueError(f"--fsdp-group-blocks must be >= 0, not {self.fsdp_group_blocks}")
        if self.nccl_max_ctas < 0:
            raise ValueError(f"--nccl-max-ctas must be >= 0, not {self.nccl_max_ctas}")
        if not (math.isfinite(self.ddp_bucket_mb) and self.ddp_bucket_mb > 0):
            raise ValueError(f"--ddp-bucket-mb must be a positive number, not {self.ddp_bucket_mb}")


@dataclass
class TrainConfig:
    steps: int | None = setting(None, group=OPT, exclusive="length")
    """optimizer steps (or give --epochs)"""
    epochs: float | None = setting(None, group=OPT, exclusive="length")
    """passes over the training windows (or give --steps)"""
    batch: int = setting(256, group=OPT)
    """global batch in windows, over all ranks and micro-steps"""
    micro_batch: int | None = setting(None, group=OPT)
    """windows per device per forward, accumulated to --batch (default: batch / processes)"""
    lr: float = setting(3e-4, group=OPT)
    """peak learning rate"""
    lr_scale_batch: bool = setting(False, group=OPT)
    """scale --lr linearly with --batch / 256"""
    schedule: str = setting("cosine", choices=SCHEDULES, group=OPT)
    """learning-rate schedule after the warm-up"""
    warmup_steps: int = setting(100, flag="--warmup", group=OPT)
    """linear warm-up steps"""
    min_lr_ratio: float = setting(0.1, group=OPT)
    """cosine floor / --lr"""
    step_every: int = setting(1000, group=OPT)
    """step schedule: steps per decay"""
    step_gamma: float = setting(0.5, group=OPT)
    """step schedule: decay factor"""
    exp_gamma: float = setting(0.999, group=OPT)
    """exponential schedule: decay per step"""
    weight_decay: float = setting(0.1, group=OPT)
    """AdamW weight decay (matrices only)"""
    layer_decay: float = setting(1.0, metavar="D", group=OPT)
    """layer-wise learning-rate decay: block i of L learns at D^(L-i) of --lr, the
    embeddings at D^(L+1), the heads at --lr (1: off)"""
    head_first: float = setting(0.0, metavar="F", group=OPT)
    """fine-tuning: this share of the steps (rounded down), from the first, trains the heads
    only (the encoder's rate is 0), then every layer learns (linear probing, then
    fine-tuning: LP-FT; 0: off)"""
    ema: float = setting(0.0, metavar="D", group=OPT)
    """validate and export an exponential moving average of the weights, decay D per step
    (min(D, (1 + n) / (10 + n)) at step n, so a short run forgets its start; 0: off)"""
    betas: tuple[float, float] = setting((0.9, 0.95), cli=False)
    """AdamW betas"""
    grad_clip: float = setting(1.0, group=OPT)
    """clip of the global gradient norm; 0 = no clipping"""
    seed: int = setting(0, group=OPT)
    """seed of initialisation, record split, data order and masks"""
    val_every: int = setting(500, group=LOG)
    """steps between validations; 0 = only at the end (finetune: once per epoch)"""
    val_batches: int | None = setting(50, group=LOG)
    """validation loss batches at most (none: every validation window; finetune's F1, which
    --select f1 exports by, always reads every window)"""
    log_every: int = setting(10, group=LOG)
    """steps between host syncs, where metrics rows are written"""
    ckpt_every: int = setting(1000, group=LOG)
    """steps between checkpoints; 0 = only at the end (and at each validation with keep_best)"""
    keep_ckpts: int = setting(2, flag="--keep", group=LOG)
    """checkpoints to keep (0: all); the best validation's is kept besides"""
    resume: bool = setting(False, group=LOG)
    """continue from the latest checkpoint"""
    stop_at: int | None = setting(None, group=LOG)
    """stop with a checkpoint after this step (time-limited allocations)"""
    wandb: bool = setting(False, group=LOG)
    """also log to W&B (WANDB_MODE=offline ok)"""
    profile_steps: int = setting(0, metavar="K", group=LOG)
    """profile K steps after warm-up; writes RUN/breakdown.json"""
    keep_best: bool = setting(False, cli=False)
    """export the weights of the best validation (`best_metric`), not the last ones"""
    best_metric: str = setting("val_loss", cli=False)
    """what keep_best compares: a *loss is best lowest, anything else (val_f1) highest"""
    patience: int = setting(0, metavar="K", group=LOG)
    """stop after K validations without a better one, exporting the best (pretrain: needs
    --export best; finetune: validation records); 0 = never"""
    final_save: bool = setting(True, group=LOG)
    """checkpoint and export the weights at the end (benchmarks turn it off)"""
    precision: str = setting("bf16", choices=("bf16", "fp32"), group=SPEED)
    """bf16 autocast on CUDA (CPU always runs fp32)"""
    compile: bool | None = setting(None, group=SPEED)
    """torch.compile (default: on for CUDA, off for CPU)"""
    compile_mode: str | None = setting(None, group=SPEED)
    """torch.compile mode, e.g. max-autotune-no-cudagraphs"""
    compile_objective: bool = setting(False, cli=False)
    """also compile masking and loss around the model (one graph per step)"""
    sdpa: str = setting("auto", choices=SDPA_BACKENDS, group=SPEED)
    """attention kernel (auto: PyTorch's choice)"""
    cudagraph: bool = setting(False, group=SPEED)
    """replay each optimizer step as one CUDA graph (CUDA, one process or DDP with fp32
    gradient reduction, --workers 0)"""
    deterministic: bool = setting(False, group=SPEED)
    """only deterministic kernels (PyTorch's deterministic algorithms, cuDNN without
    autotuning, a fixed cuBLAS workspace): the same seed and flags give the same weights on
    the same kind of machine; slower, and an operation without a deterministic kernel stops
    the run, naming it"""
    ac: str = setting("none", choices=AC_MODES, group=SPEED)
    """activation checkpointing of each block: none; full (recompute the block in backward);
    selective (keep matmul and attention outputs, recompute norms and activations)"""
    backend: str = setting("ddp", choices=BACKENDS, group=SPEED)
    """data parallelism over the processes"""
    parallel: ParallelConfig = setting(factory=ParallelConfig)
    workers: int = setting(0, group=SPEED)
    """0: windows cut on the device; N: a DataLoader with N workers"""
    prefetch: int = setting(2, group=SPEED)
    """DataLoader prefetch_factor"""
    gc_every: int = setting(0, metavar="N", group=SPEED)
    """0: Python's automatic garbage collection; N: off while training, and every rank
    collects after every N steps at once, so no rank's collection stalls a collective"""

    def validate(self) -> None:
        check_seed(self.seed)
        if (self.steps is None) == (self.epochs is None):
            raise ValueError("give exactly one of --steps and --epochs")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"--steps must be >= 1, not {self.steps}")
        if self.epochs is not None and not (math.isfinite(self.epochs) and self.epochs > 0):
            raise ValueError(f"--epochs must be a finite number > 0, not {self.epochs}")
        if self.batch < 1:
            raise ValueError(f"--batch must be >= 1, not {self.batch}")
        for flag, value, allowed in (
            ("--precision", self.precision, ("bf16", "fp32")),
            ("--sdpa", self.sdpa, SDPA_BACKENDS),
            ("--schedule", self.schedule, SCHEDULES),
            ("--backend", self.backend, BACKENDS),
            ("--ac", self.ac, AC_MODES),
        ):
            if value not in allowed:
                raise ValueError(f"{flag} must be one of {', '.join(allowed)}, not {value!r}")
        if self.log_every < 1:
            raise ValueError(f"--log-every must be >= 1, not {self.log_every}")
        if self.gc_every < 0:
            raise ValueError(f"--gc-every must be >= 0, not {self.gc_every}")
        if self.patience < 0:
            raise ValueError(f"--patience must be >= 0, not {self.patience}")
        if not 0.0 < self.layer_decay <= 1.0:
            raise ValueError(f"--layer-decay must be in (0, 1], not {self.layer_decay}")
        if not 0.0 <= self.head_first < 1.0:
            raise ValueError(f"--head-first must be in [0, 1), not {self.head_first}")
        if not 0.0 <= self.ema < 1.0:  # also NaN
            raise ValueError(f"--ema must be in [0, 1), not {self.ema}")
        default_prefetch = field_defaults(type(self), ("prefetch",))["prefetch"]
        if self.prefetch != default_prefetch and not self.workers:
            raise ValueError("--prefetch is the DataLoader's: it needs --workers N > 0 "
                             "(--workers 0 cuts windows on the device)")  # fmt: skip
        if self.compile_mode is not None and self.compile is False:
            raise ValueError("--compile-mode with --no-compile: nothing is compiled")
        self.parallel.validate()
        self._validate_numbers()

    def optimizer_shape(self) -> dict[str, float]:
        """The settings a resume must keep: those that shape AdamW's parameter groups (a
        checkpoint's optimizer state does not fit other groups) and the weight average
        (the checkpoint's average, and the best validation scored on it, were made with it)."""
        return {"layer_decay": self.layer_decay, "head_first": self.head_first, "ema": self.ema}

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
        shaping = {"min_lr_ratio": "cosine", "step_every": "step", "step_gamma": "step",
                   "exp_gamma": "exponential"}  # fmt: skip
        defaults = field_defaults(type(self), shaping)
        for name, schedule in shaping.items():
            if getattr(self, name) != defaults[name] and self.schedule != schedule:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag} shapes the {schedule} schedule, not --schedule "
                                 f"{self.schedule}: it would change nothing")  # fmt: skip

    def check_overwrite(self, overwrite: bool) -> None:
        """A staged (--overwrite) run replaces the old one only once it exported its weights."""
        if overwrite and not self.final_save:
            raise ValueError("--overwrite needs the final save: drop --no-final-save")

    def require_packages(self) -> None:
        """Refuse settings whose optional package is not installed, before anything runs."""
        if self.backend == "deepspeed":
            from heartlm.train.zero import require_deepspeed

            require_deepspeed()
        if self.wandb:
            try:
                import wandb  # noqa: F401
            except ImportError:
                raise HeartlmError(
                    "--wandb: wandb is not installed: pip install 'heartlm[wandb]'"
                ) from None

    def total_steps(self, steps_per_epoch: int) -> int:
        """Optimizer steps of the whole run (`steps`, or `epochs` of `steps_per_epoch`)."""
        if self.steps is not None:
            return self.steps
        return math.ceil(self.epochs * steps_per_epoch)

    def lower_is_better(self) -> bool:
        return self.best_metric.endswith("loss")


@dataclass
class LaunchConfig:
    """Where the processes run and how they find each other."""

    device: str = setting("auto", choices=DEVICES, group=SPEED)
    """auto: CUDA when there is one"""
    timeout: float = setting(600.0, group=SPEED)
    """seconds before a stuck rendezvous or collective fails"""
    nproc: int = setting(1, metavar="N", group=LAUNCH)
    """start N processes on this node under torchrun (one per GPU; CPU: gloo)"""
    max_restarts: int = setting(0, metavar="R", group=LAUNCH)
    """with --nproc: restart the whole group up to R times after a lost rank; training
    resumes from the last checkpoint"""
    rdzv_timeout: int = setting(300, metavar="S", group=LAUNCH)
    """seconds to wait for all processes to join before giving up"""

    def validate(self) -> None:
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            raise ValueError(f"--timeout must be a positive number of seconds, not {self.timeout}")
        if self.nproc < 1:
            raise ValueError(f"--nproc must be at least 1, got {self.nproc}")
        if self.max_restarts < 0:
            raise ValueError(f"--max-restarts must be >= 0, got {self.max_restarts}")


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
