"""Activation checkpointing from outside the model (`--ac`): same losses and gradients, less
memory on a GPU."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
import torch
from tinydata import TINY, make_tokens

from heartlm.cli import main
from heartlm.model import HeartLM, model_config
from heartlm.shards import NUM_SPECIAL
from heartlm.train.distributed import apply_ac


def _loss_and_grads(mode: str, device: str = "cpu", preset: str = "tiny", window: int = 16):
    torch.manual_seed(0)
    model = HeartLM(model_config(preset, vocab_size=45, max_len=window, dropout=0.1)).to(device)
    names = list(model.state_dict())
    apply_ac(model, mode)
    assert list(model.state_dict()) == names  # checkpoints and exports look the same
    g = torch.Generator().manual_seed(1)
    morph = torch.randint(NUM_SPECIAL, 45, (4, window), generator=g).to(device)
    rhythm = torch.randint(NUM_SPECIAL, 8, (4, window), generator=g).to(device)
    torch.manual_seed(2)  # dropout draws the same masks in the recomputation
    loss = model(morph, rhythm, head="mlm").float().logsumexp(-1).mean()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_checkpointed_blocks_give_the_same_loss_and_gradients(mode):
    loss, grads = _loss_and_grads("none")
    loss_ac, grads_ac = _loss_and_grads(mode)
    assert torch.equal(loss, loss_ac)
    assert grads.keys() == grads_ac.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ac[name], grad, rtol=1e-6, atol=1e-7, msg=name)


def test_ac_flag_trains_to_the_same_losses(tmp_path: Path):
    tokens = make_tokens(tmp_path / "tokens")
    losses = {}
    for mode in ("none", "full"):
        run = tmp_path / mode
        assert main(["pretrain", str(tokens), "--out", str(run), *TINY, "--steps", "3",
                     "--ac", mode]) == 0  # fmt: skip
        rows = (run / "metrics.jsonl").read_text().splitlines()
        losses[mode] = [json.loads(r)["loss"] for r in rows]
    assert losses["full"] == pytest.approx(losses["none"], rel=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["full", "selective"])
def test_checkpointing_on_a_gpu_saves_memory_and_keeps_gradients(mode):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")

    def peak(ac: str):
        gc.collect()  # the last model (its blocks' wrapped forwards form a reference cycle)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()  # what the last call's results still hold
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, grads = _loss_and_grads(ac, "cuda", preset="base", window=512)
        return loss, grads, torch.cuda.max_memory_allocated() - start

    loss, grads, mem = peak("none")
    loss_ac, grads_ac, mem_ac = peak(mode)
    assert mem_ac < mem
    torch.testing.assert_close(loss_ac, loss)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ac[name], grad, rtol=2e-2, atol=1e-4, msg=name)


def test_selective_policy_keeps_matmuls_and_draws_and_recomputes_the_rest():
    """A saved attention on CUDA consumes RNG that its recomputation would skip: every
    functional random op is saved too, so later dropouts draw the forward's masks."""
    from torch.utils.checkpoint import CheckpointPolicy

    from heartlm.train.distributed import _selective_policy

    aten = torch.ops.aten
    saved = (aten.mm.default, aten._scaled_dot_product_flash_attention.default,
             aten.native_dropout.default)  # fmt: skip
    redone = (aten.gelu.default, aten.native_layer_norm.default, aten.bernoulli_.float)
    assert all(_selective_policy(None, op) == CheckpointPolicy.MUST_SAVE for op in saved)
    assert all(_selective_policy(None, op) == CheckpointPolicy.PREFER_RECOMPUTE for op in redone)
