"""DeepSpeed ZeRO stages 1–3 around the plain model (`--backend deepspeed --zero-stage N`).

An optional extra (`pip install 'heartlm[deepspeed]'`, DeepSpeed >= 0.19, no compiled
DeepSpeed ops needed). heartlm keeps its own AdamW (handed to DeepSpeed as a client
optimizer, so the parameter groups, weight decay and learning-rate schedule are the ones
DDP uses), its fp32 weights and its bf16 autocast: ZeRO changes only where gradients,
optimizer state and (stage 3) weights live. The loop calls `loss.backward()` as with DDP
(DeepSpeed hooks the model's outputs to reduce gradients during backward), then
`ZeroOptimizer.step()`, which is the engine's step: reduce, clip to `grad_clip`, AdamW on
each rank's partition.

Not supported, and refused where asked for: gradient accumulation (the loop's micro-steps
would each be a DeepSpeed boundary) and checkpoints (DeepSpeed's optimizer partitions are
not in heartlm's resharding checkpoint format); the final weights are exported.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
from torch import nn

from heartlm.errors import HeartlmError

INSTALL_HINT = "pip install 'heartlm[deepspeed]'"


@dataclass
class ZeroConfig:
    stage: int = 2
    """ZeRO stage: 1 shards optimizer state, 2 also gradients, 3 also parameters"""
    micro_batch_per_gpu: int = 8
    grad_clip: float = 1.0
    """0: no clipping"""
    reduce_bf16: bool = False
    """reduce gradients in bf16 instead of fp32: the nn.Linear ones under autocast_bf16 (and,
    under ZeRO-3, gather those weights in bf16), else all of them (communication_data_type)"""
    autocast_bf16: bool = False
    """the loop's forward runs under bf16 autocast: DeepSpeed must keep it (see deepspeed_config)"""

    def validate(self) -> None:
        if self.stage not in (1, 2, 3):
            raise ValueError(f"--zero-stage must be 1, 2 or 3, not {self.stage}")
        if self.micro_batch_per_gpu < 1:
            raise ValueError("--batch must give at least one window per GPU")


def require_deepspeed() -> ModuleType:
    """Import DeepSpeed, or fail with one line saying how to get it."""
    try:
        import deepspeed
    except ImportError as exc:
        raise HeartlmError(
            f"--backend deepspeed: DeepSpeed is not installed ({exc.msg}); {INSTALL_HINT}"
        ) from None
    return deepspeed


def deepspeed_config(config: ZeroConfig) -> dict[str, Any]:
    """The DeepSpeed config for `config` (the world size is DeepSpeed's to infer)."""
    config.validate()
    return {
        "train_micro_batch_size_per_gpu": config.micro_batch_per_gpu,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": config.grad_clip,
        "communication_data_type": "bf16" if config.reduce_bf16 else "fp32",
        # heartlm's own torch AdamW; ZeRO partitions its state like DeepSpeed's FusedAdam's.
        "zero_allow_untested_optimizer": True,
        "zero_optimization": {
            "stage": config.stage,
            "overlap_comm": True,
            "contiguous_gradients": True,
        },
        # DeepSpeed switches off an autocast it did not configure itself, so the forward would
        # run in fp32 (2.5x the compute of DDP's step, twice the memory: 4 x H100, 2026-11-26).
        # With it on, each gradient is reduced in its parameter's "comm dtype": bf16 for the
        # modules listed here (ZeRO-3 also gathers their weights in bf16), fp32 for the rest
        # (communication_data_type no longer applies).
        "torch_autocast": {
            "enabled": config.autocast_bf16,
            "dtype": "bfloat16",
            "lower_precision_safe_modules": ["torch.nn.Linear"] if config.reduce_bf16 else [],
        },
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


def traceable(stage: int, distributed: bool, autocast_bf16: bool = False) -> bool:
    """Whether the module DeepSpeed trains across processes may be compiled.

    - Never under ZeRO-3: every weight becomes an empty placeholder that hooks gather around
      each module's forward, and dynamo fails on them (a fake-tensor error on the GPUs).
    - Not under ZeRO-1/2 with bf16 autocast: the compiled forward fails on 2 x H100 with
      CUBLAS_STATUS_EXECUTION_FAILED and "misaligned address" at 256 windows of 128 beats
      per GPU (DeepSpeed 0.19.8, torch 2.11, 2026-11-26), while eager runs with the same
      flags train (benchmarks/README.md). The engine keeps its weights as views into flat
      buffers at arbitrary element offsets; the compiled kernels do not expect that.
    """
    if not distributed:
        return True
    return stage < 3 and not autocast_bf16


def check_supported(accum: int, resume: bool) -> None:
    """Refuse what `--backend deepspeed` cannot do, before anything is trained."""
    if accum > 1:
        raise HeartlmError(
            "--backend deepspeed: gradient accumulation (--micro-batch below the per-GPU "
            "batch) is not supported; give each GPU its whole batch, or use ddp / fsdp"
        )
    if resume:
        raise HeartlmError(
            "--backend deepspeed writes no checkpoints, so there is nothing to --resume; "
            "use --backend ddp or fsdp for resumable runs"
        )


class ZeroOptimizer:
    """The engine's step behind the few optimizer calls the loop makes.

    `param_groups` are the client AdamW's (the loop sets the learning rate there);
    `clip_grad_norm_` hands out the tensor that `step` fills with the gradient norm
    DeepSpeed computed (before clipping), as `torch.nn.utils.clip_grad_norm_` returns it.
    """

    def __init__(self, engine: Any, device: torch.device) -> None:
        self.engine, self.device = engine, device
        self.norm: torch.Tensor | None = None

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.engine.optimizer.param_groups

    def clip_grad_norm_(self) -> torch.Tensor:
        self.norm = torch.zeros((), device=self.device)
        return self.norm

    def step(self) -> None:
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        if self.norm is not None and norm is not None:
            self.norm.copy_(torch.as_tensor(norm, dtype=torch.float32))
        self.norm = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """The engine's step has cleared the gradients already."""


def initialize(
    model: nn.Module, optimizer: torch.optim.Optimizer, config: ZeroConfig, device: torch.device
) -> tuple[nn.Module, ZeroOptimizer]:
    """Wrap `model` and its AdamW in a DeepSpeed engine: (engine, the loop's optimizer).

    Call after `torch.distributed` is initialised from torchrun's environment (DeepSpeed
    reuses that process group).
    """
    deepspeed = require_deepspeed()
    engine, *_ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=deepspeed_config(config)
    )
    if not getattr(engine, "_support_torch_style_backward", False):
        raise HeartlmError(
            f"--backend deepspeed: DeepSpeed {deepspeed.__version__} does not support "
            "loss.backward() on its engine; heartlm needs DeepSpeed >= 0.19"
        )
    return engine, ZeroOptimizer(engine, device)


def is_engine(model: nn.Module) -> bool:
    return hasattr(model, "zero_optimization_stage")


def full_state(engine: Any) -> dict[str, torch.Tensor]:
    """The whole model's weights as CPU copies (stage 3 gathers them: all ranks call)."""
    import deepspeed

    module = engine.module
    params = list(module.parameters())
    with deepspeed.zero.GatheredParameters(params, enabled=engine.zero_optimization_stage() == 3):
        return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}
