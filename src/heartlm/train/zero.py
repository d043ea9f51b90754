"""DeepSpeed ZeRO stages 1–3 around the plain model (`--backend deepspeed`, `heartlm[deepspeed]`).

What exists: the translation of heartlm's settings into a DeepSpeed config and the engine's
initialisation. What does not, yet: a trainer step that drives the engine (DeepSpeed owns
the optimizer, accumulation, clipping and bf16, so it would call `engine.backward(loss)`
and `engine.step()`); until then `--backend deepspeed` is refused with one line
(`heartlm.train.distributed.wrap_model`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from heartlm.errors import HeartlmError

INSTALL_HINT = "pip install 'heartlm[deepspeed]'"


@dataclass
class ZeroConfig:
    stage: int = 2
    """ZeRO stage: 1 shards optimizer state, 2 also gradients, 3 also parameters"""
    micro_batch_per_gpu: int = 8
    grad_accum: int = 1
    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    bf16: bool = True

    def validate(self) -> None:
        if self.stage not in (1, 2, 3):
            raise ValueError(f"--zero-stage must be 1, 2 or 3, got {self.stage}")
        if self.micro_batch_per_gpu < 1 or self.grad_accum < 1:
            raise ValueError("--batch and --grad-accum must be at least 1 for --backend deepspeed")


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
    """The DeepSpeed JSON config for `config` (the world size is DeepSpeed's to infer)."""
    config.validate()
    return {
        "train_micro_batch_size_per_gpu": config.micro_batch_per_gpu,
        "gradient_accumulation_steps": config.grad_accum,
        "gradient_clipping": config.grad_clip,
        "bf16": {"enabled": config.bf16},
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": config.lr,
                "betas": list(config.betas),
                "weight_decay": config.weight_decay,
            },
        },
        "zero_optimization": {
            "stage": config.stage,
            "overlap_comm": True,
            "contiguous_gradients": True,
            # Stage 3 gathers parameters only for the layer being computed.
            **({"stage3_gather_16bit_weights_on_model_save": True} if config.stage == 3 else {}),
        },
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


def initialize(model: Any, config: ZeroConfig) -> tuple[Any, Any]:
    """Wrap `model` in a DeepSpeed engine; returns (engine, optimizer).

    Call after `torch.distributed` is initialised from torchrun's environment (DeepSpeed
    reuses that process group).
    """
    deepspeed = require_deepspeed()
    params = [p for p in model.parameters() if p.requires_grad]
    engine, optimizer, _, _ = deepspeed.initialize(
        model=model, model_parameters=params, config=deepspeed_config(config)
    )
    return engine, optimizer


def wrap_model(model: Any, env: Any) -> Any:
    """What `train.distributed.wrap_model` calls for `--backend deepspeed`.

    A DeepSpeed engine replaces the optimizer step and backward as well as the module, so
    it cannot be handed back as a module to the DDP/FSDP loop; until the loop has a
    DeepSpeed step, say so clearly instead of training wrongly.
    """
    require_deepspeed()
    raise HeartlmError(
        "--backend deepspeed: DeepSpeed is installed, but the training loop does not drive a "
        "DeepSpeed engine yet (engine.backward / engine.step); use --backend fsdp for "
        "sharded parameters, gradients and optimizer state"
    )
