"""Process group setup from torchrun's environment, and wrapping the model for DDP or FSDP2.

Order of wrapping (as torchtitan): compile, then DDP / `fully_shard` (per block, then root).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import itertools
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from heartlm.errors import HeartlmError
from heartlm.log import logger

BACKENDS = ("ddp", "fsdp", "deepspeed")


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


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise HeartlmError(f"environment variable {name}={value!r} is not an integer") from None


def init_distributed(timeout_s: float = 600.0, device: str | None = None) -> DistEnv:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*).

    `device`: "cuda", "cpu" or None (CUDA when available). A rendezvous or collective that
    cannot complete within `timeout_s` fails with an error instead of hanging.
    """
    rank, world = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)
    local_rank = _env_int("LOCAL_RANK", 0)
    use_cuda = torch.cuda.is_available() if device is None else device == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise HeartlmError("--device cuda: no CUDA device is available")
    if use_cuda:
        n_dev = torch.cuda.device_count()
        if local_rank >= n_dev:
            raise HeartlmError(
                f"{_env_int('LOCAL_WORLD_SIZE', world)} processes on this node but only "
                f"{n_dev} GPUs: use --nproc {n_dev} or fewer"
            )
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    if world <= 1:
        return DistEnv(0, 1, 0, dev, "")
    backend = "nccl" if use_cuda else "gloo"
    try:
        dist.init_process_group(
            backend,
            timeout=dt.timedelta(seconds=timeout_s),
            device_id=dev if use_cuda else None,
        )
    except Exception as exc:  # rendezvous failures come as several error types
        raise HeartlmError(
            f"could not join the process group (rank {rank} of {world}, "
            f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}) "
            f"within --timeout {timeout_s:g} s: {exc}"
        ) from None
    return DistEnv(rank, world, local_rank, dev, backend)


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
    if env.distributed and dist.is_initialized():
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


STATIC_GRAPH = ("auto", "on", "off")
GRAD_REDUCE = ("fp32", "bf16")
RESHARD = ("auto", "always", "never")
# Below this many parameters the gathered bf16 weights of every block fit beside the
# activations, and resharding would only add an all-gather per block to backward.
RESHARD_FROM_PARAMS = 1_000_000_000


def _lever(default: Any, help: str, choices: tuple | None = None) -> Any:
    return field(default=default, metadata={"help": help, "choices": choices})


@dataclass
class ParallelConfig:
    """Levers of data parallelism, to measure rather than assume (docs/distributed.md).
    Each field is the flag of its name (`--ddp-bucket-mb`), its metadata the flag's help."""

    ddp_bucket_mb: float = _lever(
        25.0, "DDP gradient bucket size, MiB (bucket_cap_mb); compiled graphs split there too"
    )
    ddp_bucket_view: bool = _lever(
        True, "DDP gradient_as_bucket_view: gradients live in the buckets (no copy)"
    )
    ddp_static_graph: str = _lever(
        "auto", "DDP static_graph (auto: on for an uncompiled step without accumulation)",
        STATIC_GRAPH,
    )  # fmt: skip
    grad_reduce: str = _lever(
        "fp32", "dtype gradients travel in; bf16: DDP bf16_compress_hook, FSDP2 reduce_dtype, "
        "DeepSpeed communication_data_type (weights and AdamW stay fp32)", GRAD_REDUCE,
    )  # fmt: skip
    fsdp_reshard: str = _lever(
        "auto", "FSDP2 reshard_after_forward of the blocks (auto: from 1 B parameters; never: "
        "less communication, more memory)", RESHARD,
    )  # fmt: skip
    zero_stage: int = _lever(
        2, "DeepSpeed ZeRO stage with --backend deepspeed: 1 shards optimizer state, 2 also "
        "gradients, 3 also weights", (1, 2, 3),
    )  # fmt: skip

    def validate(self) -> None:
        for f in fields(self):
            value, allowed = getattr(self, f.name), f.metadata["choices"]
            if allowed and value not in allowed:
                flag, names = "--" + f.name.replace("_", "-"), ", ".join(map(str, allowed))
                raise ValueError(f"{flag} must be one of {names}, not {value!r}")
        if not (math.isfinite(self.ddp_bucket_mb) and self.ddp_bucket_mb > 0):
            raise ValueError(f"--ddp-bucket-mb must be a positive number, not {self.ddp_bucket_mb}")


def add_parallel_arguments(g: argparse._ArgumentGroup) -> None:
    """One flag per ParallelConfig field, help and choices from its metadata."""
    for f in fields(ParallelConfig):
        flag, kind = "--" + f.name.replace("_", "-"), f.metadata
        if f.type in (bool, "bool"):
            g.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default,
                           help=kind["help"])  # fmt: skip
            continue
        convert = {"float": float, "int": int, "str": str}[str(f.type)]
        g.add_argument(flag, type=convert, default=f.default, choices=kind["choices"],
                       help=f"{kind['help']} ({f.default})")  # fmt: skip


def parallel_from_args(args: argparse.Namespace) -> ParallelConfig:
    return ParallelConfig(**{f.name: getattr(args, f.name) for f in fields(ParallelConfig)})


def wrap_model(
    model: nn.Module,
    env: DistEnv,
    backend: str = "ddp",
    compile: bool = False,
    compile_mode: str | None = None,
    bf16: bool = False,
    static_graph: bool = False,
    parallel: ParallelConfig | None = None,
) -> nn.Module:
    """Compile, then wrap for data parallelism. Returns the module to call and train.

    `static_graph` (DDP, with `ddp_static_graph` auto): True only when every step runs the
    same graph without `no_sync` accumulation. With `deepspeed` the compiled plain module
    comes back: `heartlm.train.zero.initialize` wraps it with its optimizer.
    """
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
        return _ddp(model, env, static_graph, p)
    if backend == "fsdp":
        logger.debug("--backend fsdp with one process: training the plain module")
    return model


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


def _fully_shard(
    model: nn.Module, compile: bool, compile_mode: str | None, bf16: bool, p: ParallelConfig
) -> nn.Module:
    """FSDP2 per block, then the root: bf16 all-gather under autocast, reduce in
    `grad_reduce`, each block compiled on its own (graphs end where its collectives are)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    reduce = torch.bfloat16 if p.grad_reduce == "bf16" else torch.float32
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None, reduce_dtype=reduce)
    n_params = sum(t.numel() for t in model.parameters())
    reshard = p.fsdp_reshard == "always" or (
        p.fsdp_reshard == "auto" and n_params >= RESHARD_FROM_PARAMS
    )
    blocks = list(model.blocks)  # type: ignore[attr-defined]
    for block in blocks:
        if compile:
            block.compile(mode=compile_mode)
        fully_shard(block, mp_policy=mp, reshard_after_forward=reshard)
    # The root's weights (embeddings, heads) are used first and last: never resharded.
    fully_shard(model, mp_policy=mp, reshard_after_forward=False)
    # Gather the next block's weights while this one computes (else FSDP2 waits for the
    # CPU to reach it); in backward only resharded weights are gathered again.
    for block, nxt in itertools.pairwise(blocks):
        block.set_modules_to_forward_prefetch([nxt])
        if reshard:
            nxt.set_modules_to_backward_prefetch([block])
    return model
