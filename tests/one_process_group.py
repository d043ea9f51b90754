"""Checks that need a real (one-rank, gloo) process group, each run in a fresh interpreter by
tests/test_distributed.py: `python tests/one_process_group.py CASE TMP`. A process group and
the gloo threads of an earlier one shared one pytest process before, and 5 of about 150 local
runs of the suite hung there; a child process per case cannot inherit another's group, and
its parent ends it at a timeout."""

from __future__ import annotations

import copy
import os
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

from heartlm.model import HeartLM, model_config
from heartlm.train import distributed
from heartlm.train.config import ParallelConfig


def grouped_fsdp_units() -> None:
    """Four blocks in two FSDP2 units of two, resharded after forward, so each unit
    prefetches the next one in forward and the previous one in backward: the plain model's
    loss and gradients."""
    torch.manual_seed(0)
    cfg = model_config("tiny", vocab_size=40, rhythm_vocab_size=9, max_len=8, n_layers=4)
    plain = HeartLM(cfg)
    sharded = copy.deepcopy(plain)
    morph, rhythm = torch.randint(5, 40, (2, 8)), torch.randint(5, 9, (2, 8))
    p = ParallelConfig(fsdp_group_blocks=2, fsdp_reshard="always")
    assert [len(u) for u in distributed.fsdp_units(list(sharded.blocks), 2)] == [2, 2]
    sharded = distributed._fully_shard(sharded, False, None, False, p)
    losses = []
    for model in (plain, sharded):
        loss = model(morph, rhythm, head="next").float().pow(2).mean()
        loss.backward()
        losses.append(loss.item())
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-6, atol=0.0)
    for (name, a), (_, b) in zip(plain.named_parameters(), sharded.named_parameters(),
                                 strict=True):  # fmt: skip
        grad = b.grad.full_tensor() if hasattr(b.grad, "full_tensor") else b.grad
        torch.testing.assert_close(a.grad, grad, rtol=1e-5, atol=1e-7, msg=name)


def ddp_wrap() -> None:
    """torch 2.13 renamed DDP's broadcast_buffers and warns at every wrap, on every rank;
    either name must turn off the buffer collective at each forward."""
    model = HeartLM(model_config("tiny", vocab_size=40, rhythm_vocab_size=9, max_len=8))
    env = distributed.DistEnv(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        ddp = distributed._ddp(model, env, False, ParallelConfig())
    assert ddp.require_forward_param_sync is True
    assert getattr(ddp, "broadcast_buffers", False) is False
    assert getattr(ddp, "forward_sync_buffers", False) is False


CASES = {"grouped_fsdp_units": grouped_fsdp_units, "ddp_wrap": ddp_wrap}


def main(case: str, tmp: str) -> None:
    torch.set_num_threads(1)
    store = dist.FileStore(str(Path(tmp) / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        CASES[case]()
    finally:
        dist.destroy_process_group()
    # The case passed. Interpreter finalisation would still run the destructors of the
    # collective objects the case kept alive (DDP's reducer), and under load a gloo rank has
    # aborted there ("terminate called without an active exception", pytorch/pytorch#179291):
    # leave without it, as heartlm's torchrun workers do (heartlm/__main__.py).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(*sys.argv[1:])
