"""--ema: the exponential moving average of the weights that validation reads and a run
exports (heartlm.train.ema, heartlm.train.loop)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from test_train import make_data, tiny

from heartlm.errors import HeartlmError
from heartlm.model import load_pretrained
from heartlm.train.callbacks import Callback
from heartlm.train.data import WindowSampler
from heartlm.train.distributed import DistEnv
from heartlm.train.ema import WeightAverage, ema_decay
from heartlm.train.loop import TrainConfig, check_ema, evaluate, train
from heartlm.train.objectives import MaskedBeats


class Trajectory(Callback):
    """The model's trained weights after every optimizer step."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.steps = model, []

    def on_step_end(self, step: int, rank: int) -> None:
        self.steps.append({n: p.detach().clone() for n, p in self.model.named_parameters()})


def by_hand(steps: list[dict[str, torch.Tensor]], start: dict[str, torch.Tensor], decay: float):
    average = {n: t.clone() for n, t in start.items()}
    for n, weights in enumerate(steps, start=1):
        d = ema_decay(decay, n)
        for name in average:
            average[name] = d * average[name] + (1 - d) * weights[name]
    return average


def test_the_decay_warms_up_then_holds_at_d():
    assert ema_decay(0.999, 1) == pytest.approx(2 / 11)
    assert ema_decay(0.999, 100) == pytest.approx(101 / 110)
    assert ema_decay(0.999, 10**6) == 0.999
    with pytest.raises(ValueError, match="--ema"):
        TrainConfig(steps=1, ema=1.0).validate()


def test_the_average_follows_only_trained_weights():
    data = make_data([40])
    model = tiny(data, 16)
    model.lm_head.weight.requires_grad_(False)
    average = WeightAverage(model, 0.5)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    average.update()  # decay min(0.5, 2/11): the average moves 9/11 of the way
    got = dict(average.module.named_parameters())
    w = model.blocks[0].qkv.weight
    assert torch.allclose(got["blocks.0.qkv.weight"], start["blocks.0.qkv.weight"] + 9 / 11)
    assert torch.equal(got["lm_head.weight"], start["lm_head.weight"])  # frozen: not averaged
    assert not got["blocks.0.qkv.weight"].requires_grad and w.requires_grad


def _run(tmp: Path, data, ema: float, **kw) -> tuple[object, Trajectory, dict]:
    model = tiny(data, 16)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    trajectory = Trajectory(model)
    cfg = TrainConfig(steps=kw.pop("steps", 6), batch=8, lr=1e-2, warmup_steps=0,
                      val_every=kw.pop("val_every", 0), ckpt_every=kw.pop("ckpt_every", 0),
                      ema=ema, **kw)  # fmt: skip
    sampler = WindowSampler(data, 16, 4, seed=0)
    val = WindowSampler(make_data([50], seed=3), 16, 16)
    result = train(cfg, model, MaskedBeats(data.vocab_size), sampler, val, tmp, DistEnv(),
                   callbacks=[trajectory])  # fmt: skip
    return result, trajectory, start


def test_a_run_exports_and_validates_the_average(tmp_path: Path):
    data = make_data([120, 90])
    result, trajectory, start = _run(tmp_path, data, 0.9)
    expected = by_hand(trajectory.steps, start, 0.9)
    exported, _ = load_pretrained(tmp_path)
    for name, weights in exported.named_parameters():
        assert torch.allclose(weights, expected[name], atol=1e-6), name
    final = trajectory.steps[-1]["blocks.0.qkv.weight"]
    assert not torch.allclose(exported.blocks[0].qkv.weight, final, atol=1e-4)
    # The run's last validation read the average, the model it exported.
    again = evaluate(exported.eval(), MaskedBeats(data.vocab_size),
                     WindowSampler(make_data([50], seed=3), 16, 16), 8, DistEnv(), 50,
                     contextlib.nullcontext)  # fmt: skip
    assert again["val_loss"] == pytest.approx(result.val_loss, rel=1e-5)


def test_a_resumed_run_continues_the_average_from_its_checkpoint(tmp_path: Path):
    data = make_data([120, 90])
    _run(tmp_path / "whole", data, 0.9)
    _run(tmp_path / "cut", data, 0.9, ckpt_every=2, stop_at=3)
    result, _, _ = _run(tmp_path / "cut", data, 0.9, ckpt_every=2, resume=True)
    assert result.step == 6
    whole, _ = load_pretrained(tmp_path / "whole")
    cut, _ = load_pretrained(tmp_path / "cut")
    for (name, a), b in zip(whole.named_parameters(), cut.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), name


def test_ema_is_refused_where_ranks_hold_shards():
    two = DistEnv(rank=0, world_size=2)
    check_ema(TrainConfig(steps=1, ema=0.99, backend="ddp"), two)
    check_ema(TrainConfig(steps=1, ema=0.0, backend="fsdp"), two)
    with pytest.raises(HeartlmError, match="--ema averages whole weights"):
        check_ema(TrainConfig(steps=1, ema=0.99, backend="fsdp"), two)


def test_the_best_validation_of_the_average_survives_a_resume(tmp_path: Path):
    """keep_best with --ema: every validation scores the average; a run cut and resumed
    exports the same best average as an uninterrupted one."""
    data = make_data([120, 90])
    best = {"keep_best": True, "val_every": 1}
    whole, _, _ = _run(tmp_path / "whole", data, 0.9, **best)
    _run(tmp_path / "cut", data, 0.9, stop_at=3, **best)
    cut, _, _ = _run(tmp_path / "cut", data, 0.9, resume=True, **best)
    assert (cut.best_step, cut.best_val_loss) == (whole.best_step, whole.best_val_loss)
    a, _ = load_pretrained(tmp_path / "whole")
    b, _ = load_pretrained(tmp_path / "cut")
    for (name, x), y in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.allclose(x, y, atol=1e-6), name


def test_a_resume_with_another_average_is_refused(tmp_path: Path):
    data = make_data([120, 90])
    _run(tmp_path, data, 0.9, ckpt_every=2, stop_at=2)
    with pytest.raises(HeartlmError, match=r"--ema 0\.9; resume with the same, not --ema 0\b"):
        _run(tmp_path, data, 0.0, ckpt_every=2, resume=True)
