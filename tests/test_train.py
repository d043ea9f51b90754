"""The training engine on CPU: windows, sharding, masking, schedules, learning, resume, CLI."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from heartlm.cli import main
from heartlm.errors import HeartlmError
from heartlm.model import HeartLM, model_config
from heartlm.pretrain import VAL_RISE, validation_rise
from heartlm.shards import MASK, NUM_SPECIAL, PAD
from heartlm.tokens.writer import write_tokens as write_token_folder
from heartlm.train import loop
from heartlm.train.data import TokenData, WindowSampler, dataloader_batches, load_tokens
from heartlm.train.determinism import CUBLAS_WORKSPACE, deterministic_kernels
from heartlm.train.distributed import DistEnv
from heartlm.train.loop import TrainConfig, resolve_batch, train
from heartlm.train.metrics import REQUIRED_FIELDS, read_metrics
from heartlm.train.objectives import IGNORE, MaskedBeats, NextBeat, objective_to
from heartlm.train.optim import Schedule, build_adamw, device_lr, float_lr, host_lr, set_lr

N_CODES = 24


def make_data(lengths: list[int], seed: int = 0, record_tokens: bool = False) -> TokenData:
    """Records whose tokens follow an arithmetic pattern (learnable from neighbours);
    with `record_tokens`, every beat of record r is token NUM_SPECIAL + r instead."""
    rng = np.random.default_rng(seed)
    morph = []
    for r, n in enumerate(lengths):
        if record_tokens:
            morph.append(np.full(n, NUM_SPECIAL + r))
        else:
            step, base = int(rng.integers(1, 4)), int(rng.integers(0, N_CODES))
            morph.append(NUM_SPECIAL + (base + step * np.arange(n)) % N_CODES)
    morph = np.concatenate(morph).astype(np.int32)
    n = morph.size
    vocab = NUM_SPECIAL + max(N_CODES, len(lengths) if record_tokens else 0)
    return TokenData(
        morph=morph,
        rhythm=(NUM_SPECIAL + np.arange(n) % 3).astype(np.int32),
        aami=np.zeros(n, np.int8),
        rhythm_label=np.ones(n, np.int8),
        boundaries=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        records=[f"r{i}" for i in range(len(lengths))],
        vocab_size=vocab,
        rhythm_vocab_size=NUM_SPECIAL + 3,
    )


def write_tokens(folder: Path, data: TokenData) -> Path:
    """`data` as a token folder, through the one writer (features: a random stand-in)."""
    folder.mkdir(parents=True)
    b = data.boundaries
    records = [
        {"name": name, "db": "synth", "start": int(b[i]), "n_beats": int(b[i + 1] - b[i])}
        for i, name in enumerate(data.records)
    ]
    features = data.features
    if features is None:
        features = np.random.default_rng(0).standard_normal((int(b[-1]), 3)).astype(np.float16)
    streams = {
        "morph": data.morph,
        "rhythm": data.rhythm,
        "aami": data.aami,
        "rhythm_label": data.rhythm_label,
        "features": features,
        "boundaries": b,
    }
    meta = {
        "vocab_size": data.vocab_size,
        "rhythm_vocab_size": data.rhythm_vocab_size,
        "features": ["beat_pc0", "qrs_corr", "rr_prev_local"][: features.shape[1]],
        "fs": 360,
        "window_samples": 256,
    }
    write_token_folder(folder, streams, records, meta)
    return folder


def tiny(data: TokenData, window: int, **kw: object) -> HeartLM:
    torch.manual_seed(0)
    return HeartLM(
        model_config(
            "tiny",
            vocab_size=data.vocab_size,
            rhythm_vocab_size=data.rhythm_vocab_size,
            max_len=window,
            **kw,
        )
    )


def test_windows_stay_in_one_record_and_cover_each_window_once_per_epoch_on_two_ranks():
    data = make_data([50, 7, 33, 64, 20], record_tokens=True)
    s = WindowSampler(data, window=16, stride=8, seed=3, pad_short=True)
    micro, accum, world = 3, 2, 2
    seen = []
    for step in range(s.steps_per_epoch(micro * accum * world) + 1):
        for rank in range(world):
            for m in range(accum):
                b = s.batch(step, m, micro, accum, rank, world)
                valid = b.valid if b.valid is not None else torch.ones_like(b.morph, dtype=bool)
                for row, ok, key in zip(b.morph, valid, b.key.tolist(), strict=True):
                    tokens = row[ok].unique()
                    assert tokens.numel() == 1, "a window crossed a record boundary"
                    assert (row[~ok] == PAD).all()
                    seen.append((key, int(tokens)))
    keys = sorted(k for k, _ in seen)
    assert keys == list(range(len(keys))), "ranks overlap or leave gaps in the stream"
    first_epoch = [(k, t) for k, t in seen if k < s.n_windows]
    # A record of n >= 16 beats yields 1 + (n - 16) // 8 windows; shorter ones one padded.
    per_record = [1 + (n - 16) // 8 if n >= 16 else 1 for n in (50, 7, 33, 64, 20)]
    counts = np.bincount([t - NUM_SPECIAL for _, t in first_epoch], minlength=5)
    assert counts.tolist() == per_record


def test_eval_batches_give_every_window_once_across_ranks():
    data = make_data([40, 40, 25], record_tokens=True)
    s = WindowSampler(data, window=10, seed=0)
    keys = []
    for rank in range(2):
        for b in s.eval_batches(batch_size=3, rank=rank, world=2):
            assert b.morph.shape == (3, 10)
            real = (b.morph >= NUM_SPECIAL).any(1)
            keys += (b.key[real] - (1 << 40)).tolist()
    assert sorted(keys) == list(range(s.n_windows))


def test_window_longer_than_every_record_is_refused():
    data = make_data([30, 45])
    with pytest.raises(HeartlmError, match=r"--window 64.*longest: r1, 45 beats"):
        WindowSampler(data, window=64, pad_short=False)


def test_dataloader_path_gives_the_same_batches_as_the_device_path():
    data = make_data([40, 9, 30])
    s = WindowSampler(data, window=12, stride=5, seed=1)
    loader = dataloader_batches(s, 2, 4, 2, 1, 2, workers=0, prefetch=2, device=torch.device("cpu"))
    for step in (2, 3):
        for m in range(2):
            a, b = s.batch(step, m, 4, 2, 1, 2), next(loader)
            for field in ("morph", "rhythm", "aami", "rhythm_label", "valid", "key"):
                assert torch.equal(getattr(a, field), getattr(b, field)), field


def test_masked_positions_and_labels_line_up():
    data = make_data([100, 12])
    s = WindowSampler(data, window=40, seed=0)
    obj = MaskedBeats(vocab_size=data.vocab_size, mask_prob=0.15, mode="bert", seed=7)
    masked_tokens, n_picked = 0, 0
    for step in range(4):
        b = s.batch(step, 0, 3, 1, 0, 1)
        morph, pos, labels, _ = obj.mask(b)
        assert pos.shape == (3, 6)  # round(0.15 * 40)
        real = b.valid & (b.morph >= NUM_SPECIAL)
        picked = torch.zeros_like(real).scatter(1, pos, True)
        for i in range(3):
            k = min(6, int(real[i].sum()))
            assert int((picked[i] & real[i]).sum()) == k, "padding picked while beats remain"
        ok = labels != IGNORE
        assert torch.equal(labels[ok], torch.gather(b.morph, 1, pos).long()[ok])
        assert torch.equal(morph[~picked], b.morph[~picked]), "unmasked beats changed"
        masked_tokens += int((torch.gather(morph, 1, pos)[ok] == MASK).sum())
        n_picked += int(ok.sum())
    assert 0.6 < masked_tokens / n_picked < 0.95  # about 80 % become MASK
    b = s.batch(0, 0, 3, 1, 0, 1)
    again = obj.mask(b)
    assert torch.equal(again[0], obj.mask(b)[0]), "masking must be a function of the keys"


def test_masked_spans_are_aligned_runs_of_real_beats():
    data = make_data([100, 12])
    s = WindowSampler(data, window=40, seed=0)
    one = MaskedBeats(vocab_size=data.vocab_size, seed=7)
    obj = MaskedBeats(vocab_size=data.vocab_size, seed=7, span=4)
    assert obj.n_masked(40) == 8  # round(0.15 * 40 / 4) runs of 4
    assert MaskedBeats(20, mask_prob=0.99, span=4).n_masked(11) == 8  # at most 2 whole runs
    for step in range(4):
        b = s.batch(step, 0, 3, 1, 0, 1)
        _, pos, labels, _ = obj.mask(b)
        runs = pos.reshape(3, 2, 4)
        assert (runs[..., 0] % 4 == 0).all() and (runs.diff(dim=-1) == 1).all()
        real = b.valid & (b.morph >= NUM_SPECIAL)
        for i in range(3):  # a run holding padding only once the real runs are used up
            whole = int(real[i].reshape(10, 4).all(-1).sum())
            assert int((labels[i] != IGNORE).sum()) >= 4 * min(2, whole)
        assert torch.equal(pos, obj.mask(b)[1]), "masking must be a function of the keys"
    assert torch.equal(one.mask(b)[1], MaskedBeats(data.vocab_size, seed=7, span=1).mask(b)[1])
    with pytest.raises(ValueError, match="--mask-span must be >= 1"):
        MaskedBeats(20, span=0)


def test_next_beat_labels_are_the_following_beat():
    data = make_data([30])
    model = tiny(data, 8, causal=True)
    b = WindowSampler(data, window=8).batch(0, 0, 2, 1, 0, 1)
    seen = {}

    def spy(morph, rhythm, valid, head, features_BTF=None):
        seen["head"] = head
        return model(morph, rhythm, valid, head=head)

    with torch.no_grad():
        loss, stats = NextBeat(data.vocab_size)(spy, b)
    assert seen["head"] == "next" and int(stats["count"]) == 2 * 7
    assert math.isfinite(loss.item())


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("step", [0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 0.5, 0.5]),
        ("exponential", [0.25, 0.5, 0.75, 1.0, 1.0, 0.9, 0.81, 0.729]),
        ("constant", [0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0]),
    ],
)
def test_lr_schedules_warm_up_then_decay(kind: str, expected: list[float]):
    sched = Schedule(
        1.0, total_steps=8, warmup_steps=4, kind=kind, step_every=2, step_gamma=0.5, exp_gamma=0.9
    )
    assert [sched(s) for s in range(8)] == pytest.approx(expected)


def test_a_schedule_setting_of_another_schedule_is_refused():
    """Each decay setting shapes one schedule; given with another it would change nothing."""
    for kind, flag, value in (
        ("step", "min_lr_ratio", 0.0),
        ("cosine", "step_every", 5),
        ("exponential", "step_gamma", 0.9),
        ("cosine", "exp_gamma", 0.9),
    ):
        with pytest.raises(ValueError, match=f"--{flag.replace('_', '-')} shapes the"):
            TrainConfig(steps=1, schedule=kind, **{flag: value}).validate()
    TrainConfig(steps=1, schedule="step", step_every=5, step_gamma=0.9).validate()
    TrainConfig(steps=1, schedule="cosine", min_lr_ratio=0.0).validate()


def test_speed_settings_that_would_not_act_are_refused():
    """--prefetch sets the DataLoader's prefetch factor, which --workers 0 has no DataLoader
    for; --compile-mode with --no-compile compiles nothing."""
    with pytest.raises(ValueError, match="--prefetch is the DataLoader's"):
        TrainConfig(steps=1, prefetch=4).validate()
    TrainConfig(steps=1, prefetch=4, workers=2).validate()
    with pytest.raises(ValueError, match="--compile-mode with --no-compile"):
        TrainConfig(steps=1, compile=False, compile_mode="max-autotune").validate()
    TrainConfig(steps=1, compile_mode="max-autotune").validate()  # on by default on CUDA


def test_cosine_schedule_ends_at_the_floor():
    sched = Schedule(2.0, total_steps=104, warmup_steps=4, kind="cosine", min_lr_ratio=0.1)
    assert sched(3) == pytest.approx(2.0)
    assert sched(54) == pytest.approx(0.2 + 1.8 * 0.5)
    assert sched(104) == pytest.approx(0.2)
    assert all(sched(s) >= sched(s + 1) for s in range(4, 104))


def test_batch_resolution_and_bad_micro_batch():
    assert resolve_batch(256, None, 4) == (64, 1)
    assert resolve_batch(256, 16, 4) == (16, 4)
    with pytest.raises(HeartlmError, match="--micro-batch 24"):
        resolve_batch(256, 24, 4)


def _run(
    tmp: Path, data: TokenData, steps: int, batch: int = 8, device: str = "cpu", **kw: object
) -> list[dict]:
    window = 16
    cfg = TrainConfig(
        steps=steps,
        batch=batch,
        lr=3e-3,
        warmup_steps=10,
        log_every=10,
        weight_decay=0.0,
        val_every=0,
        ckpt_every=kw.pop("ckpt_every", 0),
        **kw,
    )
    obj = MaskedBeats(vocab_size=data.vocab_size, seed=0)
    sampler = WindowSampler(data, window, 4, seed=0, device=device)
    train(cfg, tiny(data, window), obj, sampler, None, tmp, DistEnv(device=torch.device(device)))
    return read_metrics(tmp)


def test_tiny_model_learns_a_synthetic_corpus(tmp_path: Path):
    data = make_data([120, 90, 200, 150, 80])
    rows = _run(tmp_path, data, 150, batch=16)
    assert set(REQUIRED_FIELDS) <= rows[0].keys()
    first = np.mean([r["loss"] for r in rows[:5]])
    last = np.mean([r["loss"] for r in rows[-10:]])
    assert first > 2.5 and last < 0.5 * first
    assert (tmp_path / "model.safetensors").is_file()


def test_accumulation_matches_the_full_batch(tmp_path: Path):
    data = make_data([120, 90, 200])
    full = [r["loss"] for r in _run(tmp_path / "a", data, 10)]
    accum = [r["loss"] for r in _run(tmp_path / "b", data, 10, micro_batch=2)]
    assert accum == pytest.approx(full, rel=1e-4)


def test_resume_logs_the_same_losses_as_an_uninterrupted_run(tmp_path: Path):
    data = make_data([120, 90, 200, 150])
    whole = _run(tmp_path / "whole", data, 200)
    _run(tmp_path / "split", data, 200, ckpt_every=50, stop_at=100)
    assert not (tmp_path / "split" / "model.safetensors").exists()
    resumed = _run(tmp_path / "split", data, 200, ckpt_every=50, resume=True)
    assert [r["step"] for r in resumed] == list(range(1, 201))
    assert [r["loss"] for r in resumed] == [r["loss"] for r in whole]
    assert [r["grad_norm"] for r in resumed] == [r["grad_norm"] for r in whole]


def test_pretrain_cli_runs_refuses_a_used_folder_and_a_changed_vocab(tmp_path: Path, capsys):
    tokens = write_tokens(tmp_path / "tok", make_data([60, 50, 40, 70]))
    run = tmp_path / "run"
    args = [
        "pretrain",
        str(tokens),
        "--out",
        str(run),
        "--preset",
        "tiny",
        "--window",
        "16",
        "--batch",
        "4",
        "--steps",
        "6",
        "--log-every",
        "3",
        "--ckpt-every",
        "3",
        "--val-every",
        "3",
        "--warmup",
        "2",
    ]
    assert main(args) == 0
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == list(range(1, 7))
    assert "val_loss" in rows[2] and "val_loss" in rows[5]
    assert json.loads((run / "config.json").read_text())["vocab_size"] == 29
    assert main(args) == 2
    assert "already holds a run" in capsys.readouterr().err
    bigger = make_data([60, 50, 40, 70])
    bigger.vocab_size = 40
    args[1] = str(write_tokens(tmp_path / "tok2", bigger))
    assert main([*args, "--resume", "--steps", "9"]) == 2
    assert "checkpoint vocabulary is 29 tokens, the tokens have 40" in capsys.readouterr().err
    out3 = str(tmp_path / "r3")
    short = ["pretrain", str(tokens), "--out", out3, "--preset", "tiny", "--window", "200"]
    assert main(short) == 2
    assert "--window 200 is longer than every record" in capsys.readouterr().err
    assert not (tmp_path / "r3" / "metrics.jsonl").exists()
    loaded = load_tokens(tokens)
    assert (loaded.vocab_size, loaded.n_beats) == (29, 220)
    assert loaded.records == ["r0", "r1", "r2", "r3"]


def test_pretrain_patience_stops_after_validations_without_a_lower_loss(tmp_path: Path, capsys):
    tokens = write_tokens(tmp_path / "tok", make_data([60, 50, 40, 70, 55]))
    # A rate too small to move a weight: every validation repeats the first one's loss
    flags = "--preset tiny --window 16 --batch 4 --steps 30 --val-every 3 --warmup 1 --lr 1e-12"
    base = ["pretrain", str(tokens), *flags.split(), "--val-fraction", "0.4"]
    assert main([*base, "--out", str(tmp_path / "last"), "--patience", "2"]) == 2
    assert "--patience stops on the validation loss: it needs --export best" in (
        capsys.readouterr().err
    )
    assert (
        main([*base, "--out", str(tmp_path / "neg"), "--export", "best", "--patience", "-1"]) == 2
    )
    assert "--patience must be >= 0" in capsys.readouterr().err
    assert not (tmp_path / "last").exists() and not (tmp_path / "neg").exists()
    run = tmp_path / "early"
    assert main([*base, "--out", str(run), "--export", "best", "--patience", "2"]) == 0
    checks = [r["val_loss"] for r in read_metrics(run) if "val_loss" in r]
    assert len(set(checks)) == 1, "the rate moved the weights: the test's premise fails"
    result = json.loads((run / "result.json").read_text())
    # the first validation (step 3), then two that are no lower: stopped at step 9
    assert (result["step"], result["stopped_early"], len(checks)) == (9, True, 3)
    assert (run / "model.safetensors").is_file()
    capsys.readouterr()
    assert main([*base, "--out", str(run), "--export", "best", "--patience", "2", "--resume"]) == 0
    assert "already stopped at step 9" in capsys.readouterr().err
    assert len([r for r in read_metrics(run) if "val_loss" in r]) == 3, "nothing trained again"
    assert main([*base, "--out", str(run), "--export", "best", "--resume"]) == 0  # patience 0
    assert json.loads((run / "result.json").read_text())["step"] == 30, "on to the last step"


def test_pretrain_export_best_writes_the_lowest_validation_loss_s_weights(
    tmp_path: Path, capsys, monkeypatch
):
    from safetensors.torch import load_file

    tokens = write_tokens(tmp_path / "tok", make_data([60, 50, 40, 70, 55]))
    # A high rate: validation loss jumps about, so the best step is often not the last one
    # (test_keep_best_exports_the_best_validation_and_patience_stops checks the weights).
    flags = "--preset tiny --window 16 --batch 4 --steps 12 --val-every 3 --warmup 1 --lr 0.3"
    base = ["pretrain", str(tokens), *flags.split(), "--schedule", "constant"]
    assert main([*base, "--out", str(tmp_path / "none"), "--export", "best",
                 "--val-fraction", "0"]) == 2  # fmt: skip
    assert "--export best needs validation records" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()
    alone = write_tokens(tmp_path / "alone", make_data([60]))  # nothing left to hold out
    assert main([*base[:1], str(alone), *base[2:], "--out", str(tmp_path / "one"),
                 "--export", "best"]) == 2  # fmt: skip
    assert "--export best: no validation window" in capsys.readouterr().err
    assert not (tmp_path / "one").exists()
    run = tmp_path / "best"
    assert main([*base, "--out", str(run), "--export", "best", "--val-fraction", "0.4"]) == 0
    checks = {r["step"]: r["val_loss"] for r in read_metrics(run) if "val_loss" in r}
    assert sorted(checks) == [3, 6, 9, 12]
    result = json.loads((run / "result.json").read_text())
    lowest = min(checks.values())
    assert result["best_step"] == max(s for s, v in checks.items() if v == lowest)  # ties: later
    last = tmp_path / "last"
    capsys.readouterr()
    assert main([*base, "--out", str(last), "--val-fraction", "0.4"]) == 0
    assert json.loads((last / "result.json").read_text())["best_step"] is None
    # Exported last, the run says so where its validation loss rose past VAL_RISE.
    rose = validation_rise(last)
    err = capsys.readouterr().err
    assert rose in err if rose else "--export best exports" not in err
    # Whether this tiny run's validation loss rises depends on CPU numerics (lr 0.3 is
    # chaotic), so the sentence is given: the run prints what validation_rise says of its own
    # metrics (validation_rise itself: test_validation_rise_is_reported_past_its_threshold_only).
    seen: list[list[float]] = []

    def says_it_rose(folder: Path) -> str:
        seen.append([r["val_loss"] for r in read_metrics(folder) if "val_loss" in r])
        return "validation loss rose (test)"

    monkeypatch.setattr("heartlm.pretrain.validation_rise", says_it_rose)
    nine = tmp_path / "nine"
    assert main([*base, "--out", str(nine), "--val-fraction", "0.4", "--steps", "9"]) == 0
    assert "validation loss rose (test)" in capsys.readouterr().err
    assert [len(losses) for losses in seen] == [3]  # read once, with the run's 3 validations
    monkeypatch.undo()
    for run_dir, other in ((last, "best"), (run, "last")):  # the best is kept from the start
        more = [*base, "--steps", "15", "--resume", "--out", str(run_dir)]
        assert main([*more, "--val-fraction", "0.4", "--export", other]) == 2
        assert "was started with --export" in capsys.readouterr().err
    weights = [load_file(folder / "model.safetensors") for folder in (run, last)]
    same = all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert same == (result["best_step"] == 12)  # the same run up to the export


def test_validation_rise_is_reported_past_its_threshold_only(tmp_path: Path):
    def curve(*losses: float) -> Path:
        run = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        run.mkdir()
        rows = [{"step": 100 * (i + 1), "loss": 1.0, "val_loss": v} for i, v in enumerate(losses)]
        rows.insert(1, {"step": 150, "loss": 1.0})  # a training row without validation
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return run

    said = validation_rise(curve(3.0, 2.5, 2.6, 3.3))  # round 15's shape: lowest, then up
    assert said is not None and "lowest at step 200 (2.5)" in said and "3.3 at step 400" in said
    assert validation_rise(curve(3.0, 2.5, 2.5 * (1 + VAL_RISE))) is None  # within the rise
    assert validation_rise(curve(3.0, 2.8, 2.5)) is None  # still falling: the last is best
    assert validation_rise(curve(2.0)) is None  # one validation: nothing to compare
    damaged = curve(3.0, 2.5, 3.3)
    with (damaged / "metrics.jsonl").open("a") as f:
        f.write("{not json\n")
    assert validation_rise(damaged) is None  # advice only: never fails a finished run


def test_resume_keeps_the_objective_it_was_trained_with(tmp_path: Path, capsys):
    tokens = write_tokens(tmp_path / "tok", make_data([60, 50, 40, 70]))
    run = tmp_path / "run"
    args = ["pretrain", str(tokens), "--out", str(run), "--preset", "tiny", "--window", "16",
            "--batch", "4", "--steps", "4", "--ckpt-every", "2", "--val-every", "0"]  # fmt: skip
    assert main(args) == 0
    before = (run / "metrics.jsonl").read_bytes()
    more = [*args[:-6], "--steps", "6", "--ckpt-every", "2", "--val-every", "0", "--resume"]
    assert main([*more, "--code-weight", "0.5"]) == 2
    said = capsys.readouterr().err
    assert "trained with another objective (--code-weight 1.0 -> 0.5)" in said
    assert main([*more, "--mask-span", "2"]) == 2
    assert "(--mask-span 1 -> 2)" in capsys.readouterr().err
    assert main([*more, "--dropout", "0.1"]) == 2
    assert "checkpoint model has dropout=0.0, this run 0.1" in capsys.readouterr().err
    assert (run / "metrics.jsonl").read_bytes() == before
    assert main(more) == 0  # the same objective resumes
    assert max(r["step"] for r in read_metrics(run)) == 6


def test_label_smoothing_leaves_the_padded_vocabulary_out_of_the_loss():
    from heartlm.train.objectives import vocab_loss

    torch.manual_seed(0)
    logits = torch.randn(2, 3, 8)  # a vocabulary of 5 padded to 8
    labels = torch.tensor([[0, 4, IGNORE], [2, 1, 3]])
    loss, sums = vocab_loss(logits, labels, 5, label_smoothing=0.1)
    expected = torch.nn.functional.cross_entropy(
        logits[..., :5].reshape(-1, 5), labels.reshape(-1), ignore_index=IGNORE,
        label_smoothing=0.1,
    )  # fmt: skip
    assert torch.isfinite(loss) and loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert sums["count"] == 5


def test_gc_every_collects_at_fixed_steps_with_the_automatic_collector_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import gc

    calls: list[tuple[int, bool]] = []
    collect = gc.collect

    def counting(generation: int = 2) -> int:
        calls.append((generation, gc.isenabled()))
        return collect(generation)

    monkeypatch.setattr(gc, "collect", counting)
    enabled = gc.isenabled()
    rows = _run(tmp_path, make_data([120, 90]), 7, gc_every=3)
    assert gc.isenabled() == enabled  # given back as it was
    # Generation 1 after steps 3 and 6 only, while Python's own collector was off.
    assert [c for c in calls if c[0] == 1] == [(1, False), (1, False)]
    calls.clear()
    assert [r["loss"] for r in _run(tmp_path / "auto", make_data([120, 90]), 7)] == [
        r["loss"] for r in rows]  # fmt: skip
    assert not [c for c in calls if c[0] == 1]  # 0: Python's automatic collection alone
    with pytest.raises(ValueError, match="--gc-every"):
        TrainConfig(steps=1, gc_every=-1).validate()


def test_profile_steps_write_a_time_breakdown_and_a_trace(tmp_path: Path):
    _run(tmp_path, make_data([120, 90]), 6, profile_steps=2)
    got = json.loads((tmp_path / "breakdown.json").read_text())
    parts = ("compute_s", "comm_exposed_s", "data_wait_s", "other_s")
    assert all(got[k] >= 0 for k in (*parts, "comm_overlapped_s")) and got["step_s"] > 0
    assert got["compute_s"] > 0 and got["comm_exposed_s"] == got["comm_overlapped_s"] == 0
    assert sum(got[k] for k in parts) == pytest.approx(got["step_s"], rel=1e-9)
    # The trace opens in Perfetto / TensorBoard: Chrome-trace JSON with the step spans.
    trace = json.loads((tmp_path / got["trace"]).read_text())
    names = [e.get("name") for e in trace["traceEvents"]]
    assert names.count("heartlm::step") == 2 and "heartlm::data" in names


@pytest.mark.gpu
def test_cuda_step_has_no_host_sync_and_reports_mfu(tmp_path: Path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    data = make_data([300, 200, 400, 250])
    device = torch.device("cuda")
    sampler = WindowSampler(data, 64, 16, seed=0, device=device)
    model = tiny(data, 64).to(device)
    model.use_heads(("mlm",))
    model.compile()
    obj = MaskedBeats(data.vocab_size)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3, fused=True)
    sampler.permutation(0)  # the once-per-epoch permutation copy is not part of a step
    for step in range(4):  # compile and warm up outside the check
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, _ = obj(model, sampler.batch(step, 0, 8, 1, 0, 1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(4, 8):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss, _ = obj(model, sampler.batch(step, 0, 8, 1, 0, 1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    rows = _run(tmp_path, data, 30, batch=16, device="cuda")
    assert all(math.isfinite(r["loss"]) for r in rows)
    assert rows[-1]["max_mem_gib"] > 0
    if "H100" in torch.cuda.get_device_name() or "H200" in torch.cuda.get_device_name():
        assert rows[-1]["mfu"] > 0


def test_objective_constants_reach_the_device_once_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from heartlm.finetune.objectives import BeatClasses

    columns = torch.tensor([True, False, True])
    masked = MaskedBeats(vocab_size=20, feature_columns=columns, feature_weight=1.0)
    beats = BeatClasses([1.0, 2.0, 3.0, 4.0, 5.0])
    for objective in (masked, beats):
        objective_to(objective, torch.device("meta"))
    # Every tensor moved (a per-step host copy cannot be captured by --cudagraph), nothing
    # else touched.
    assert masked.feature_columns.device.type == "meta" and masked.mask_prob == 0.15
    assert beats.weight.device.type == "meta" and beats.weight.shape == (5,)
    assert columns.device.type == "cpu"  # the caller's tensor stays where it was
    moved: list[torch.device] = []
    monkeypatch.setattr("heartlm.train.loop.objective_to", lambda o, d: moved.append(d))
    _run(tmp_path, make_data([120, 90]), 2)
    assert moved == [torch.device("cpu")]


def test_cudagraph_is_refused_off_cuda_and_with_a_dataloader(tmp_path: Path):
    data = make_data([120, 90])
    with pytest.raises(HeartlmError, match="--cudagraph needs a CUDA device"):
        _run(tmp_path / "cpu", data, 2, cudagraph=True)
    from heartlm.train.loop import check_cudagraph

    cfg = TrainConfig(steps=1, cudagraph=True, workers=2)
    with pytest.raises(HeartlmError, match="--cudagraph needs the device data path"):
        check_cudagraph(cfg, DistEnv(device=torch.device("cuda")))
    # Several processes: DDP's fp32 all-reduces are captured with the step; FSDP2's and
    # DeepSpeed's collectives and the bf16 comm hook are not.
    two = DistEnv(0, 2, 0, torch.device("cuda"), "nccl")
    check_cudagraph(TrainConfig(steps=1, cudagraph=True), two)
    for backend in ("fsdp", "deepspeed"):
        with pytest.raises(HeartlmError, match=f"not --backend {backend}'s collectives"):
            check_cudagraph(TrainConfig(steps=1, cudagraph=True, backend=backend), two)
    bf16 = TrainConfig(steps=1, cudagraph=True)
    bf16.parallel.grad_reduce = "bf16"
    with pytest.raises(HeartlmError, match="fp32 gradients only"):
        check_cudagraph(bf16, two)
    check_cudagraph(bf16, DistEnv(device=torch.device("cuda")))  # one process: no all-reduce


def test_device_lr_is_one_shared_tensor_that_set_lr_fills_and_host_lr_undoes():
    model = tiny(make_data([40]), 16)
    opt = build_adamw(model, 1e-3, 0.1, (0.9, 0.95), fused=False)
    device_lr(opt, torch.device("cpu"))
    lrs = [g["lr"] for g in opt.param_groups]
    assert all(isinstance(lr, torch.Tensor) and lr is lrs[0] for lr in lrs)
    set_lr(opt, 2.5e-4)
    assert float(lrs[0]) == pytest.approx(2.5e-4)
    with float_lr(opt):  # checkpoints save floats; the graph's tensor comes back after
        assert all(isinstance(g["lr"], float) for g in opt.param_groups)
    assert all(g["lr"] is lrs[0] for g in opt.param_groups)
    host_lr(opt)
    assert [g["lr"] for g in opt.param_groups] == [pytest.approx(2.5e-4)] * len(lrs)
    set_lr(opt, 1e-3)
    assert all(g["lr"] == 1e-3 for g in opt.param_groups)


def test_activation_and_bf16_residual_options():
    data = make_data([40])
    morph = torch.randint(NUM_SPECIAL, data.vocab_size, (2, 16))
    rhythm = torch.full((2, 16), NUM_SPECIAL)
    base = tiny(data, 16, activation="gelu", bf16_residual=False).eval()
    res = tiny(data, 16, activation="gelu", bf16_residual=True).eval()
    tanh = tiny(data, 16, activation="gelu_tanh", bf16_residual=False).eval()
    with torch.no_grad():
        out = base(morph, rhythm)
        assert torch.equal(res(morph, rhythm), out)  # no autocast: the option does nothing
        assert torch.allclose(tanh(morph, rhythm), out, atol=1e-2)
        assert not torch.equal(tanh(morph, rhythm), out)
        seen = []
        res.blocks[0].register_forward_pre_hook(lambda m, a: seen.append(a[0].dtype))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            res(morph, rhythm)
        assert seen == [torch.bfloat16]
    with pytest.raises(ValueError, match="activation must be one of"):
        tiny(data, 16, activation="relu")


@pytest.mark.gpu
def test_cudagraph_step_trains_like_the_eager_step(tmp_path: Path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    data = make_data([300, 200, 400, 250])
    graphed = {}
    for kw in ({}, {"micro_batch": 4}):
        eager = _run(tmp_path / f"e{len(kw)}", data, 30, batch=16, device="cuda", **kw)
        graph = _run(
            tmp_path / f"g{len(kw)}", data, 30, batch=16, device="cuda", cudagraph=True, **kw
        )
        # Same kernels in the same order; only the learning rate is read as fp32.
        assert [r["loss"] for r in graph] == pytest.approx([r["loss"] for r in eager], rel=2e-3)
        assert [r["grad_norm"] for r in graph] == pytest.approx(
            [r["grad_norm"] for r in eager], rel=2e-2
        )
        graphed[len(kw)] = [r["loss"] for r in graph]
    # Checkpoints of a graphed run hold float learning rates and resume (graphed again).
    split = tmp_path / "split"
    _run(split, data, 30, batch=16, device="cuda", cudagraph=True, ckpt_every=10, stop_at=20)
    resumed = _run(
        split, data, 30, batch=16, device="cuda", cudagraph=True, ckpt_every=10, resume=True
    )
    assert [r["loss"] for r in resumed] == pytest.approx(graphed[0], rel=2e-3)


@pytest.mark.parametrize("workspace", [None, ":16:8", ":0:0"])
def test_deterministic_kernels_hold_inside_and_the_settings_come_back_after(workspace, monkeypatch):
    from torch._inductor import config as inductor

    if workspace is None:
        monkeypatch.delenv(CUBLAS_WORKSPACE, raising=False)
    else:
        monkeypatch.setenv(CUBLAS_WORKSPACE, workspace)
    cudnn = torch.backends.cudnn
    monkeypatch.setattr(cudnn, "benchmark", True)
    torch.use_deterministic_algorithms(True, warn_only=True)  # a caller's own setting
    try:
        with deterministic_kernels(True):
            assert torch.are_deterministic_algorithms_enabled()
            assert not torch.is_deterministic_algorithms_warn_only_enabled()
            assert cudnn.deterministic and not cudnn.benchmark
            assert inductor.deterministic
            # a deterministic workspace the user set is kept; none, or another, is replaced
            want = ":16:8" if workspace == ":16:8" else ":4096:8"
            assert os.environ[CUBLAS_WORKSPACE] == want
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert cudnn.benchmark and not cudnn.deterministic
        assert os.environ.get(CUBLAS_WORKSPACE) == workspace
    finally:
        torch.use_deterministic_algorithms(False)
    assert not inductor.deterministic
    with deterministic_kernels(False):
        assert not torch.are_deterministic_algorithms_enabled()


def test_a_deterministic_run_steps_under_deterministic_kernels_and_the_next_run_does_not(
    tmp_path: Path, monkeypatch
):
    seen = []
    step = loop.Trainer.step

    def spy(self: loop.Trainer, i: int) -> None:
        seen.append(torch.are_deterministic_algorithms_enabled())
        step(self, i)

    monkeypatch.setattr(loop.Trainer, "step", spy)
    data = make_data([120, 90, 200])
    _run(tmp_path / "deterministic", data, 4, deterministic=True)
    _run(tmp_path / "plain", data, 4)
    assert seen == [True] * 4 + [False] * 4


@pytest.mark.parametrize(
    ("said", "line"),
    [
        ("index_add_cuda_ does not have a deterministic implementation, but you set 'torch...",
         "index_add_cuda_ does not have a deterministic implementation"),
        ("backend='inductor' raised:\nRuntimeError: scatter_add_cuda_kernel does not have a "
         "deterministic implementation, but you set ...\n\nSet TORCH_LOGS=...",
         "RuntimeError: scatter_add_cuda_kernel does not have a deterministic implementation"),
        ("Deterministic behavior was enabled ... set an environment variable "
         "CUBLAS_WORKSPACE_CONFIG=:4096:8 or CUBLAS_WORKSPACE_CONFIG=:16:8 ...",
         "cuBLAS ran in this process before CUBLAS_WORKSPACE_CONFIG was set; set it to :4096:8 "
         "before the process starts"),
    ],
)  # fmt: skip
def test_pytorch_refusing_a_deterministic_run_is_said_in_one_line(
    said: str, line: str, tmp_path: Path, monkeypatch
):
    def fit(self: loop.Trainer) -> None:
        raise RuntimeError(said)

    monkeypatch.setattr(loop.Trainer, "fit", fit)
    data = make_data([120, 90, 200])
    with pytest.raises(HeartlmError) as refused:
        _run(tmp_path / "a", data, 4, deterministic=True)
    assert str(refused.value) == f"--deterministic: {line}"
    with pytest.raises(RuntimeError, match="^" + re.escape(said[:20])):  # not ours without it
        _run(tmp_path / "b", data, 4)


@pytest.mark.gpu
def test_two_deterministic_cuda_pretraining_processes_export_the_same_weights(tmp_path: Path):
    """Each run in its own process, as two calls of the study are: nothing is shared but
    the machine (compiled kernels, timings and cuBLAS state are per process)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    tokens = write_tokens(tmp_path / "tok", make_data([300, 200, 400, 250]))
    for name in ("a", "b"):
        args = ["pretrain", str(tokens), "--out", str(tmp_path / name), "--preset", "tiny",
                "--window", "64", "--batch", "16", "--steps", "60", "--val-every", "0",
                "--device", "cuda", "--deterministic"]  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "heartlm", *args], capture_output=True,
                              text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    weights = [(tmp_path / n / "model.safetensors").read_bytes() for n in ("a", "b")]
    assert weights[0] == weights[1]


def test_wandb_flag_without_wandb_installed_fails_clearly(tmp_path: Path, capsys):
    try:
        import wandb  # noqa: F401

        pytest.skip("wandb is installed")
    except ImportError:
        pass
    tokens = write_tokens(tmp_path / "tok", make_data([60, 50]))
    args = ["pretrain", str(tokens), "--out", str(tmp_path / "run"), "--preset", "tiny"]
    assert main([*args, "--window", "16", "--steps", "2", "--wandb"]) == 2
    assert "pip install 'heartlm[wandb]'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_keep_best_exports_the_best_validation_and_patience_stops(tmp_path: Path):
    from heartlm.model import load_pretrained

    data = make_data([120, 90, 200, 150, 80, 60])
    train_d, val_d = data.subset([0, 1, 2, 3]), data.subset([4, 5])
    cfg = TrainConfig(
        steps=60,
        batch=8,
        lr=3e-2,
        warmup_steps=1,
        schedule="constant",
        log_every=2,
        val_every=2,
        keep_best=True,
        patience=3,
        ckpt_every=0,
    )
    result = train(
        cfg,
        tiny(data, 16),
        MaskedBeats(data.vocab_size),
        WindowSampler(train_d, 16, 4),
        WindowSampler(val_d, 16, 16),
        tmp_path,
        DistEnv(),
    )
    vals = [(r["step"], r["val_loss"]) for r in read_metrics(tmp_path) if "val_loss" in r]
    best_loss = min(v for _, v in vals)
    best_step = max(s for s, v in vals if v == best_loss)  # a tie goes to the later step
    assert (result.best_step, result.best_val_loss) == (best_step, best_loss)
    assert result.stopped_early  # a constant, high lr overfits the training records
    assert vals[-1][0] == best_step + 3 * 2 and result.step == vals[-1][0]
    model, _ = load_pretrained(tmp_path)
    from heartlm.train.loop import evaluate

    again = evaluate(
        model.eval(),
        MaskedBeats(data.vocab_size),
        WindowSampler(val_d, 16, 16),
        8,
        DistEnv(),
        50,
        contextlib.nullcontext,
    )
    assert again["val_loss"] == pytest.approx(best_loss, rel=1e-5)


def test_head_first_holds_the_encoder_still_then_lets_every_layer_learn():
    data = make_data([40])
    model = tiny(data, 16)  # 2 blocks
    opt = build_adamw(model, 1e-3, 0.1, (0.9, 0.95), fused=False, n_layers=2, heads_apart=True)
    set_lr(opt, 1e-3, heads_only=True)
    rate = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    assert rate[id(model.beat_head.weight)] == 1e-3 and rate[id(model.norm.weight)] == 1e-3
    assert rate[id(model.blocks[1].qkv.weight)] == 0 and rate[id(model.morph_emb.weight)] == 0
    set_lr(opt, 1e-3)
    assert {g["lr"] for g in opt.param_groups} == {1e-3}
    # Graph-replayed steps read device rates: the encoder's is a tensor of its own.
    device_lr(opt, torch.device("cpu"))
    set_lr(opt, 2e-3, heads_only=True)
    rate = {id(p): float(g["lr"]) for g in opt.param_groups for p in g["params"]}
    assert rate[id(model.beat_head.weight)] == pytest.approx(2e-3)
    assert rate[id(model.blocks[0].qkv.weight)] == 0
    # Without it the groups are those of before (a resume finds the same optimizer).
    plain = build_adamw(model, 1e-3, 0.1, (0.9, 0.95), fused=False, n_layers=2)
    assert len(plain.param_groups) == 2 and not any(g["encoder"] for g in plain.param_groups)
    with pytest.raises(ValueError, match="--head-first"):
        TrainConfig(steps=1, head_first=1.0).validate()


@pytest.mark.parametrize("stop_at", [2, 4])
def test_training_with_head_first_moves_only_the_heads_in_its_first_steps(
    tmp_path: Path, stop_at: int
):
    """--head-first 0.5 of 4 steps: steps 0 and 1 train the heads, steps 2 and 3 all."""
    data = make_data([120, 90])
    model = tiny(data, 16)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = TrainConfig(steps=4, batch=8, lr=1e-2, warmup_steps=0, schedule="constant",
                      val_every=0, ckpt_every=0, head_first=0.5, stop_at=stop_at)  # fmt: skip
    sampler = WindowSampler(data, 16, 4, seed=0)
    train(cfg, model, MaskedBeats(data.vocab_size), sampler, None, tmp_path, DistEnv())
    moved = {n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert "lm_head.weight" in moved
    encoder = {n for n in before if n.startswith(("blocks.", "morph_emb", "pos_emb"))}
    if stop_at == 2:
        assert not moved & encoder
    else:
        assert encoder <= moved


def test_a_head_first_share_of_no_step_is_refused(tmp_path: Path):
    """0.1 of 4 steps rounds to no head-only step: the run would train as without it."""
    data = make_data([120, 90])
    cfg = TrainConfig(steps=4, batch=8, val_every=0, ckpt_every=0, head_first=0.1)
    sampler = WindowSampler(data, 16, 4, seed=0)
    with pytest.raises(HeartlmError, match=r"--head-first 0\.1 of 4 steps is no step"):
        train(cfg, tiny(data, 16), MaskedBeats(data.vocab_size), sampler, None, tmp_path,
              DistEnv())  # fmt: skip


def test_head_first_is_refused_in_pretraining(tmp_path: Path, capsys):
    tokens = write_tokens(tmp_path / "tok", make_data([60, 50]))
    args = ["pretrain", str(tokens), "--out", str(tmp_path / "run"), "--preset", "tiny"]
    assert main([*args, "--window", "16", "--steps", "2", "--head-first", "0.5"]) == 2
    assert "--head-first is for fine-tuning" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_resume_refuses_another_optimizer_grouping(tmp_path: Path):
    """--layer-decay and --head-first shape AdamW's parameter groups; a checkpoint's
    optimizer state does not fit other groups (it failed with KeyError 'lr')."""
    data = make_data([120, 90])

    def run(steps: int, head_first: float, resume: bool) -> object:
        cfg = TrainConfig(steps=steps, batch=8, lr=1e-2, warmup_steps=0, val_every=0,
                          ckpt_every=2, head_first=head_first, resume=resume)  # fmt: skip
        sampler = WindowSampler(data, 16, 4, seed=0)
        return train(cfg, tiny(data, 16), MaskedBeats(data.vocab_size), sampler, None,
                     tmp_path, DistEnv())  # fmt: skip

    run(2, 0.0, False)
    with pytest.raises(HeartlmError, match="--head-first 0; resume with the same, not"):
        run(4, 0.5, True)
    assert run(4, 0.0, True).step == 4


def test_layer_decay_slows_lower_layers_and_leaves_the_head_at_the_full_rate():
    data = make_data([40])
    model = tiny(data, 16)  # 2 blocks
    opt = build_adamw(model, 1e-3, 0.1, (0.9, 0.95), fused=False, layer_decay=0.5, n_layers=2)
    set_lr(opt, 1e-3)
    rate = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    assert rate[id(model.beat_head.weight)] == pytest.approx(1e-3)
    assert rate[id(model.blocks[1].qkv.weight)] == pytest.approx(0.5e-3)
    assert rate[id(model.blocks[0].qkv.weight)] == pytest.approx(0.25e-3)
    assert rate[id(model.morph_emb.weight)] == pytest.approx(0.125e-3)
    decay = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    assert decay[id(model.blocks[0].qkv.weight)] == 0.1 and decay[id(model.morph_emb.weight)] == 0


def test_pretraining_validation_holds_out_whole_recordings_with_their_lead_copies():
    from heartlm.train.data import split_records

    names = [("mitdb", "101"), ("mitdb", "106"), ("ludb", "1"), ("ludb", "2"), ("synth", "s0")]
    copies = [("mitdb_V1", "101"), ("mitdb_V1", "106"), ("ludb_I", "1"), ("ludb_AVR", "1")]
    records = names + copies
    n = len(records) * 3
    data = TokenData(  # each beat's code is its record's position, to tell them apart
        morph=np.repeat(np.arange(len(records)), 3).astype(np.int32),
        rhythm=np.zeros(n, np.int32), aami=np.zeros(n, np.int8),
        rhythm_label=np.zeros(n, np.int8), boundaries=np.arange(0, n + 1, 3, dtype=np.int64),
        records=[name for _, name in records], vocab_size=20, rhythm_vocab_size=9,
        meta={"records": [{"db": db, "name": name} for db, name in records]},
    )  # fmt: skip

    def recordings(part: TokenData) -> set[str]:
        held = [records[i] for i in np.unique(part.morph)]
        return {f"{db.split('_')[0]}/{name}" for db, name in held}

    for seed in range(6):
        train, val = split_records(data, 0.4, seed)
        assert len(train.records) + len(val.records) == len(records)
        assert not recordings(train) & recordings(val)  # no lead of a held-out one trains
        assert len(recordings(val)) == 2  # 40 % of the five recordings
    # Without copies the split is the one earlier rounds drew: records in a seeded order.
    plain = data.subset(list(range(len(names))))
    train, val = split_records(plain, 0.4, 3)
    order = np.random.default_rng(3).permutation(len(names))
    assert val.records == [names[i][1] for i in sorted(order[:2])]


def test_the_sdpa_kernel_holds_for_training_steps_and_not_for_validation(tmp_path: Path):
    """`--sdpa math` (the one kernel that runs on the CPU) is set in the blocks while the
    steps train; validation and whatever follows the run get PyTorch's choice back."""
    from torch.nn.attention import SDPBackend

    from heartlm.train.callbacks import Callback

    data = make_data([120, 90, 200, 150])
    model = tiny(data, 16)
    seen: dict[str, set] = {"step": set(), "validation": set()}

    class Watch(Callback):
        def on_step_end(self, step: int, rank: int) -> None:
            seen["step"].add(model.blocks[0].attention_kernel)

        def on_validation(self, m: torch.nn.Module) -> dict[str, float]:
            seen["validation"].add(model.blocks[0].attention_kernel)
            return {}

    cfg = TrainConfig(steps=4, batch=8, warmup_steps=1, log_every=2, val_every=2, ckpt_every=0,
                      sdpa="math")  # fmt: skip
    samplers = WindowSampler(data.subset([0, 1, 2]), 16, 4), WindowSampler(data.subset([3]), 16, 16)
    objective = MaskedBeats(data.vocab_size)
    train(cfg, model, objective, *samplers, tmp_path, DistEnv(), callbacks=[Watch()])
    assert seen == {"step": {SDPBackend.MATH}, "validation": {None}}
    assert model.blocks[0].attention_kernel is None
