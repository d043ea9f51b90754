"""Process group setup from torchrun's environment, and wrapping the model for DDP or FSDP2.

Order of wrapping (as torchtitan): activation checkpointing, compile, then DDP /
`fully_shard` (per unit of blocks, then root).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import inspect
import itertools
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from heartlm.errors import HeartlmError
from heartlm.log import logger
from heartlm.runtime import pick_device, ranks
from heartlm.train.config import (
    AC_MODES,
    BACKENDS,
    FSDP_UNIT_PARAMS,
    RESHARD_FROM_PARAMS,
    ParallelConfig,
)


@dataclass(frozen=True)
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str = ""  # the process-group backend, "" when not distributed

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def init_distributed(
    timeout_s: float = 600.0, device: str | None = None, nccl_max_ctas: int = 0
) -> DistEnv:
    """Join the process group torchrun describes (`heartlm.runtime.ranks`, MASTER_*).

    `device`: "auto" (or None: CUDA when available), "cuda" or "cpu"; each process takes
    the GPU of its local rank. A rendezvous or collective that cannot complete within
    `timeout_s` fails with an error instead of hanging. `nccl_max_ctas` (> 0) caps the SMs
    each NCCL collective takes (`nccl_environment`).
    """
    here = ranks()
    dev = pick_device(device, here.local_rank)
    use_cuda = dev.type == "cuda"
    if use_cuda:
        torch.cuda.set_device(dev)
    if here.world_size <= 1:
        return DistEnv(0, 1, 0, dev, "")
    backend = "nccl" if use_cuda else "gloo"
    if use_cuda:
        os.environ.update(nccl_environment(nccl_max_ctas))
    try:
        dist.init_process_group(
            backend,
            timeout=dt.timedelta(seconds=timeout_s),
            device_id=dev if use_cuda else None,
        )
    except Exception as exc:  # rendezvous failures come as several error types
        raise HeartlmError(
            f"could not join the process group (rank {here.rank} of {here.world_size}, "
            f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}) "
            f"within --timeout {timeout_s:g} s: {exc}"
        ) from None
    return DistEnv(here.rank, here.world_size, here.local_rank, dev, backend)


def nccl_environment(max_ctas: int) -> dict[str, str]:
    """The NCCL variables `--nccl-max-ctas` sets; NCCL reads them when this process creates
    its first communicator, after `init_process_group`."""
    return {"NCCL_MAX_CTAS": str(max_ctas)} if max_ctas > 0 else {}


# How gloo reports a peer that never came or went away (NCCL raises DistBackendError).
_PEER_LOST = ("Timed out", "timed out", "Connection closed by peer", "Connection reset")


@contextlib.contextmanager
def collective_errors(env: DistEnv, timeout_s: float) -> Iterator[None]:
    """A collective that fails because another rank failed, stopped or hung becomes one
    line naming this rank and --timeout, instead of a traceback."""
    try:
        yield
    except RuntimeError as exc:  # DistBackendError is a RuntimeError too
        text = str(exc)
        lost = isinstance(exc, dist.DistBackendError) or any(m in text for m in _PEER_LOST)
        if not env.distributed or not lost:
            raise
        detail = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
        raise HeartlmError(
            f"rank {env.rank}: a collective did not complete (--timeout {timeout_s:g} s): "
            f"another process failed, stopped or hung ({detail.split('] ')[-1][:200]})"
        ) from None


def shutdown(env: DistEnv) -> None:
    """Destroy the process group once every rank got here: the barrier completes only after
    every collective this rank enqueued before it (gloo waits for its prior work), so no
    backend thread still holds one when the group goes. A gloo rank once aborted at exit
    ("terminate called without an active exception") after FSDP2 training had finished."""
    if env.distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def barrier(env: DistEnv) -> None:
    if env.distributed:
        dist.barrier()


def broadcast_int(value: int, env: DistEnv) -> int:
    """Rank 0's `value` on every rank."""
    if not env.distributed:
        return value
    t = torch.tensor([value], dtype=torch.int64, device=env.device)
    dist.broadcast(t, src=0)
    return int(t.item())


def all_reduce_sum(t: torch.Tensor, env: DistEnv) -> torch.Tensor:
    if env.distributed:
        dist.all_reduce(t)
    return t


def wrap_model(
    model: nn.Module,
    env: DistEnv,
    backend: str = "ddp",
    compile: bool = False,
    compile_mode: str | None = None,
    bf16: bool = False,
    static_graph: bool = False,
    ac: str = "none",
    parallel: ParallelConfig | None = None,
    init_stream: torch.cuda.Stream | None = None,
) -> nn.Module:
    """Activation checkpointing, compile, then wrap for data parallelism. Returns the
    module to call and train.

    `static_graph` (DDP, with `ddp_static_graph` auto): True only when every step runs the
    same graph without `no_sync` accumulation. With `deepspeed` the plain module (compiled
    where `heartlm.train.zero.traceable`) comes back: `heartlm.train.zero.initialize` wraps
    it with its optimizer. `init_stream`: DDP is built on it (the stream that will capture
    the whole step as a CUDA graph, `heartlm.train.cudagraph`).
    """
    apply_ac(model, ac)
    if backend not in BACKENDS:
        raise HeartlmError(f"--backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    p = parallel or ParallelConfig()
    if backend == "deepspeed":
        from heartlm.train.zero import require_deepspeed

        require_deepspeed()
    if backend == "fsdp" and env.distributed:
        return _fully_shard(model, compile, compile_mode, bf16, p)
    if compile:
        model.compile(mode=compile_mode)
    if backend == "ddp" and env.distributed:
        if init_stream is None:
            return _ddp(model, env, static_graph, p)
        init_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(init_stream):
            ddp = _ddp(model, env, static_graph, p)
        torch.cuda.current_stream().wait_stream(init_stream)
        return ddp
    if backend == "fsdp":
        logger.debug("--backend fsdp with one process: training the plain module")
    return model


def _no_buffer_sync() -> dict[str, bool]:
    """DDP's flag that turns off the buffer broadcast at each forward: HeartLM's only buffer
    is a constant column index, the same on every rank, so it would be a collective per step
    for nothing. torch 2.13 renamed it (`forward_sync_buffers`) and warns at every wrap, on
    every rank, when the old name is used; the GPU machines' torch 2.11 knows only the old."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    renamed = "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters
    return {"forward_sync_buffers" if renamed else "broadcast_buffers": False}


def _ddp(model: nn.Module, env: DistEnv, static_auto: bool, p: ParallelConfig) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [env.device.index] if env.device.type == "cuda" else None
    static = static_auto if p.ddp_static_graph == "auto" else p.ddp_static_graph == "on"
    ddp = DDP(
        model,
        device_ids=ids,
        bucket_cap_mb=p.ddp_bucket_mb,
        gradient_as_bucket_view=p.ddp_bucket_view,
        find_unused_parameters=False,
        static_graph=static,
        **_no_buffer_sync(),
    )
    if p.grad_reduce == "bf16":
        # Gradients are cast to bf16 for the all-reduce and back into the fp32 buckets, so
        # the weights and AdamW keep their fp32 master copy; only the wire is bf16.
        hook = default_hooks.bf16_compress_hook if env.backend == "nccl" else _bf16_on_gloo
        ddp.register_comm_hook(None, hook)
    return ddp


def _bf16_on_gloo(state, bucket):  # no annotations: DDP checks them as objects, not strings
    """torch's bf16_compress_hook itself; DDP refuses it by name unless NCCL runs it, and
    gloo all-reduces bf16 as well (the CPU tests)."""
    return default_hooks.bf16_compress_hook(state, bucket)


def fsdp_units(blocks: list[nn.Module], per_unit: int) -> list[list[nn.Module]]:
    """Consecutive blocks in FSDP2 units of `per_unit` (0: the fewest units of about
    FSDP_UNIT_PARAMS each, all of one count of blocks but perhaps the last)."""
    if not blocks:
        return []
    if per_unit == 0:
        total = sum(t.numel() for block in blocks for t in block.parameters())
        per_unit = math.ceil(len(blocks) / max(1, math.ceil(total / FSDP_UNIT_PARAMS)))
    return [blocks[i : i + per_unit] for i in range(0, len(blocks), per_unit)]


def _fully_shard(
    model: nn.Module, compile: bool, compile_mode: str | None, bf16: bool, p: ParallelConfig
) -> nn.Module:
    """FSDP2 per unit of blocks (`fsdp_units`), then the root: bf16 all-gather under
    autocast, reduce in `grad_reduce`, each block compiled on its own (graphs end where its
    collectives are)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    reduce = torch.bfloat16 if p.grad_reduce == "bf16" else torch.float32
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None, reduce_dtype=reduce)
    n_params = sum(t.numel() for t in model.parameters())
    reshard = p.fsdp_reshard == "always" or (
        p.fsdp_reshard == "auto" and n_params >= RESHARD_FROM_PARAMS
    )
    blocks = list(model.blocks)  # type: ignore[attr-defined]
    groups = fsdp_units(blocks, p.fsdp_group_blocks)
    for group in groups:
        if compile:
            for block in group:
                block.compile(mode=compile_mode)
        fully_shard(group if len(group) > 1 else group[0], mp_policy=mp,
                    reshard_after_forward=reshard)  # fmt: skip
    # The root's weights (embeddings, heads) are used first and last: never resharded.
    fully_shard(model, mp_policy=mp, reshard_after_forward=False)
    # Gather the next unit's weights while this one computes (else FSDP2 waits for the
    # CPU to reach it); in backward only resharded weights are gathered again. A unit of
    # several blocks is entered through its first block in forward, its last in backward.
    for group, nxt in itertools.pairwise(groups):
        group[0].set_modules_to_forward_prefetch([nxt[0]])
        if reshard:
            nxt[-1].set_modules_to_backward_prefetch([group[-1]])
    return model


def _selective_policy(ctx: object, op: object, *args: object, **kwargs: object) -> object:
    from torch.utils.checkpoint import CheckpointPolicy

    # A functional random op (dropout; on CUDA also attention with dropout) is saved: a
    # recomputation that skipped one of them (a saved attention) would shift the RNG offset
    # and every later dropout would draw other masks than the forward did. In-place ones
    # (the CPU's math attention draws with bernoulli_) cannot be cached; they are redrawn
    # from the restored RNG state, in order, as nothing random before them is skipped.
    random = torch.Tag.nondeterministic_seeded in getattr(op, "tags", ())
    keep = op in _SAVED or (random and not op._schema.is_mutable)  # type: ignore[attr-defined]
    return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE


_aten = torch.ops.aten
# Selective checkpointing keeps what is expensive to recompute (matmuls and attention) and
# what is random (dropout), and recomputes the cheap, memory-hungry rest (norms, GELU,
# residual adds).
_SAVED = {
    _aten.mm.default,
    _aten.addmm.default,
    _aten.bmm.default,
    _aten._scaled_dot_product_flash_attention.default,
    _aten._scaled_dot_product_efficient_attention.default,
    _aten._scaled_dot_product_cudnn_attention.default,
    _aten._scaled_dot_product_flash_attention_for_cpu.default,
}


def apply_ac(model: nn.Module, mode: str) -> None:
    """Activation checkpointing of each transformer block, from outside the model.

    `full`: a block keeps only its input and recomputes everything in backward. `selective`:
    it keeps its matmul, attention and dropout outputs and recomputes the rest. The
    block's `forward` is wrapped in place, so parameter names, state dicts and checkpoints
    are the same with and without it. RNG state is restored for the recomputation, so
    dropout draws the same masks: gradients equal those without checkpointing.
    """
    if mode not in AC_MODES:
        raise HeartlmError(f"--ac must be one of {', '.join(AC_MODES)}, not {mode!r}")
    if mode == "none":
        return
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    def context() -> object:
        return create_selective_checkpoint_contexts(_selective_policy)

    extra = {"context_fn": context} if mode == "selective" else {}
    for block in model.blocks:  # type: ignore[attr-defined]
        forward = block.forward

        def checkpointed(*args: object, _forward=forward) -> object:
            return checkpoint(_forward, *args, use_reentrant=False, **extra)

        block.forward = checkpointed
