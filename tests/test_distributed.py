"""Launch under torchrun, a lost rank, N-vs-1 process numerics, 2 nodes on localhost, DeepSpeed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from heartlm.errors import HeartlmError
from heartlm.shards import NUM_SPECIAL
from heartlm.tokens.writer import write_tokens
from heartlm.train import launch, zero
from heartlm.train.config import LaunchConfig


def test_strip_flags_removes_launcher_flags_only() -> None:
    argv = ["pretrain", "T", "R", "--nproc", "2", "--batch", "8", "--max-restarts=3", "--x"]
    assert launch.strip_flags(argv) == ["pretrain", "T", "R", "--batch", "8", "--x"]


def test_torchrun_command_multi_node_uses_c10d() -> None:
    cmd = launch.torchrun_command(
        2, ["pretrain", "T", "R", "--nproc", "2"], max_restarts=1, nnodes="2",
        rdzv_endpoint="10.0.0.1:29500", rdzv_id="job7", rdzv_timeout_s=30,
    )  # fmt: skip
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"]
    for flag in (
        "--nnodes=2",
        "--nproc-per-node=2",
        "--max-restarts=1",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=10.0.0.1:29500",
        "--rdzv-id=job7",
        "--rdzv-conf=join_timeout=30",
    ):
        assert flag in cmd
    assert cmd[-5:] == ["-m", "heartlm", "pretrain", "T", "R"]
    with pytest.raises(HeartlmError, match="rendezvous endpoint"):
        launch.torchrun_command(1, ["pretrain"], nnodes="2")


def test_maybe_relaunch_only_in_the_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[int] = []
    monkeypatch.setattr(launch, "relaunch_under_torchrun", lambda n, *a, **k: called.append(n))
    args = LaunchConfig(nproc=1, max_restarts=0, rdzv_timeout=10)
    assert launch.maybe_relaunch(args, ["pretrain"]) is None
    args.nproc = 3
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert launch.maybe_relaunch(args, ["pretrain"]) is None
    monkeypatch.delenv("LOCAL_RANK")
    launch.maybe_relaunch(args, ["pretrain"])
    assert called == [3]
    args.nproc = 0
    with pytest.raises(HeartlmError, match="--nproc must be at least 1"):
        launch.maybe_relaunch(args, ["pretrain"])


def test_more_processes_than_gpus_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    launch.check_nproc(2)
    with pytest.raises(HeartlmError, match="more processes than the 2 GPU"):
        launch.check_nproc(3)


def _fault_probe(env: dict[str, str], step: int, rank: int) -> int:
    code = (
        "from heartlm.train.callbacks import from_environment\n"
        f"for c in from_environment(): c.on_step_end({step}, {rank})"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HEARTLM_FAULT", "TORCH"))}
    return subprocess.run([sys.executable, "-c", code], env={**clean, **env}).returncode


def test_fault_hook_kills_only_the_chosen_rank_and_step_once() -> None:
    ask = {"HEARTLM_FAULT_AT_STEP": "3", "HEARTLM_FAULT_RANK": "1"}
    assert _fault_probe(ask, step=3, rank=1) == -signal.SIGKILL
    assert _fault_probe(ask, step=3, rank=0) == 0
    assert _fault_probe(ask, step=2, rank=1) == 0
    assert _fault_probe({**ask, "TORCHELASTIC_RESTART_COUNT": "1"}, step=3, rank=1) == 0
    assert _fault_probe({}, step=3, rank=0) == 0


@pytest.mark.distributed
def test_rendezvous_that_cannot_form_times_out_clearly(capfd: pytest.CaptureFixture[str]) -> None:
    endpoint = f"127.0.0.1:{launch.free_port()}"
    with pytest.raises(HeartlmError, match="rendezvous did not form within 2 s") as err:
        launch.relaunch_under_torchrun(
            1, ["--version"], nnodes="2", rdzv_endpoint=endpoint, rdzv_timeout_s=2
        )
    assert endpoint in str(err.value)
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.distributed
def test_a_launch_leaves_no_torchrun_log_folder_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))  # torchrun's own temporary folders
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # ours
    monkeypatch.delenv("PET_LOG_DIR", raising=False)
    assert launch.relaunch_under_torchrun(1, ["--version"]) == 0
    assert list(tmp.iterdir()) == []
    chosen = tmp_path / "logs"  # a log folder the user names is theirs: kept, and written
    monkeypatch.setenv("PET_LOG_DIR", str(chosen))
    assert launch.relaunch_under_torchrun(1, ["--version"]) == 0
    assert list(chosen.iterdir()) and list(tmp.iterdir()) == []


def test_torchrun_log_dir_is_temporary_unless_named(tmp_path: Path) -> None:
    with launch.torchrun_log_dir({"A": "1"}) as env:
        made = Path(env["PET_LOG_DIR"])
        assert made.is_dir() and env["A"] == "1"
        (made / "attempt_0").mkdir()
    assert not made.exists()
    named = {"PET_LOG_DIR": str(tmp_path)}
    with launch.torchrun_log_dir(named) as env:
        assert env == named
    assert tmp_path.is_dir()


# DeepSpeed is not installed in CI: the adapter must say so in one line, and its glue is
# checked against a stand-in module.


def test_deepspeed_missing_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "deepspeed", None)
    with pytest.raises(HeartlmError, match=r"DeepSpeed is not installed.*heartlm\[deepspeed\]"):
        zero.require_deepspeed()


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_deepspeed_initialize_hands_over_our_optimizer_and_the_zero_config(
    monkeypatch: pytest.MonkeyPatch, stage: int
) -> None:
    import torch

    seen: dict = {}
    engine = types.SimpleNamespace(_support_torch_style_backward=True)

    def initialize(model, optimizer, config):
        seen.update(model=model, optimizer=optimizer, config=config)
        return engine, "wrapped optimizer", None, None

    monkeypatch.setitem(sys.modules, "deepspeed", types.SimpleNamespace(initialize=initialize))
    model = torch.nn.Linear(3, 2)
    adamw = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cfg = zero.ZeroConfig(stage=stage, micro_batch_per_gpu=4, grad_clip=0.5, reduce_bf16=True,
                          autocast_bf16=True)  # fmt: skip
    got, opt = zero.initialize(model, adamw, cfg, torch.device("cpu"))
    assert got is engine and isinstance(opt, zero.ZeroOptimizer)
    assert seen["model"] is model and seen["optimizer"] is adamw
    ds = seen["config"]
    assert ds["zero_optimization"]["stage"] == stage
    assert ds["train_micro_batch_size_per_gpu"] == 4 and ds["gradient_accumulation_steps"] == 1
    assert ds["gradient_clipping"] == 0.5 and ds["communication_data_type"] == "bf16"
    # The loop's bf16 autocast is kept inside the engine (DeepSpeed switches off one it did not
    # configure); bf16 reduction then goes through the Linear weights' comm dtype ...
    linear = ["torch.nn.Linear"]
    assert ds["torch_autocast"] == {"enabled": True, "dtype": "bfloat16",
                                    "lower_precision_safe_modules": linear}  # fmt: skip
    # ... and fp32 reduction lists no module.
    fp32 = zero.deepspeed_config(zero.ZeroConfig(stage=stage, autocast_bf16=True))
    assert fp32["torch_autocast"]["lower_precision_safe_modules"] == []
    assert not zero.deepspeed_config(zero.ZeroConfig(stage=stage))["torch_autocast"]["enabled"]


def test_zero_stage_accumulation_and_resume_are_checked() -> None:
    with pytest.raises(ValueError, match="--zero-stage must be 1, 2 or 3"):
        zero.deepspeed_config(zero.ZeroConfig(stage=4))
    with pytest.raises(HeartlmError, match=r"gradient accumulation .* is not supported"):
        zero.check_supported(accum=2, resume=False)
    with pytest.raises(HeartlmError, match="writes no checkpoints, so there is nothing to"):
        zero.check_supported(accum=1, resume=True)


# --- Multi-process training on gloo (CPU): the "done when" -------------------------
# One tiny corpus and one uninterrupted 1-process run (the golden losses) are shared by the
# tests below; each launch costs several seconds of process start-up on a small machine.

STEPS = 6
TRAIN_ARGS = (
    "--preset", "tiny", "--window", "16", "--batch", "8", "--steps", str(STEPS),
    "--log-every", "1", "--ckpt-every", "2", "--val-every", "0", "--warmup", "2",
    "--lr", "3e-3", "--device", "cpu", "--precision", "fp32", "--seed", "3",
)  # fmt: skip
# Same global batch, same windows, fp32: only the all-reduce's summation order differs.
RTOL = 1e-5


def _write_tokens(folder: Path, n_records: int = 12, beats: int = 200, vocab: int = 64) -> Path:
    rng = np.random.default_rng(0)
    n = n_records * beats
    folder.mkdir(parents=True)
    streams = {
        "morph": rng.integers(NUM_SPECIAL, vocab, n).astype(np.uint16),
        "rhythm": rng.integers(NUM_SPECIAL, NUM_SPECIAL + 4, n).astype(np.uint16),
        "aami": rng.integers(0, 5, n).astype(np.int8),
        "rhythm_label": rng.integers(0, 4, n).astype(np.int8),
        "boundaries": np.arange(0, n + 1, beats, dtype=np.int64),
    }
    streams["features"] = rng.standard_normal((n, 3)).astype(np.float16)
    meta = {
        "vocab_size": vocab,
        "rhythm_vocab_size": NUM_SPECIAL + 4,
        "fs": 360,
        "window_samples": 256,
        "features": ["beat_pc0", "qrs_corr", "rr_prev_local"],
    }
    records = [{"name": f"r{i}", "start": i * beats, "n_beats": beats} for i in range(n_records)]
    write_tokens(folder, streams, records, meta)
    return folder


def _env(**extra: str) -> dict[str, str]:
    drop = ("HEARTLM_FAULT", "TORCHELASTIC", "LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.pop("HEARTLM_PROGRESS", None)
    # A stated peak gives CPU runs an MFU, so its per-device normalisation is checked.
    return {**env, "OMP_NUM_THREADS": "1", "HEARTLM_PEAK_TFLOPS": "1", **extra}


def _heartlm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "heartlm", *args],
        env=env or _env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _flops_per_token(run: Path) -> float:
    """Model FLOPs per token as the run's MFU implies them: mfu x world x peak / tokens/s."""
    world = json.loads((run / "run.json").read_text())["counts"]["world_size"]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return rows[-1]["mfu"] * world * 1e12 / rows[-1]["tokens_per_s"]


def _losses(run: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows]
    assert steps == sorted(set(steps)), f"steps logged twice or out of order: {steps}"
    return {r["step"]: r["loss"] for r in rows}


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_tokens(tmp_path_factory.mktemp("dist") / "tokens")


@pytest.fixture(scope="module")
def golden(tokens: Path) -> dict[int, float]:
    """Losses of the uninterrupted 1-process run."""
    run = tokens.parent / "golden"
    _heartlm("pretrain", str(tokens), "--out", str(run), *TRAIN_ARGS)
    losses = _losses(run)
    assert sorted(losses) == list(range(1, STEPS + 1))
    assert len({round(v, 4) for v in losses.values()}) > 1  # the losses do move
    return losses


@pytest.mark.distributed
def test_two_processes_log_the_losses_of_one_and_resume_with_one(
    tokens: Path, golden: dict[int, float]
) -> None:
    """2 procs x global batch 8 == 1 proc x 8; their checkpoint then resumes in 1 process."""
    run = tokens.parent / "two"
    _heartlm("pretrain", str(tokens), "--out", str(run), *TRAIN_ARGS, "--nproc", "2",
             "--stop-at", "4")  # fmt: skip
    run_json = json.loads((run / "run.json").read_text())
    assert run_json["counts"]["world_size"] == 2
    two = _losses(run)
    assert sorted(two) == [1, 2, 3, 4]
    for step, loss in two.items():
        assert loss == pytest.approx(golden[step], rel=RTOL), step
    assert (run / "checkpoints" / "step_00000004").is_dir()
    # MFU is per device: world x peak in the denominator, whatever the process count.
    fpt = _flops_per_token(tokens.parent / "golden")
    assert fpt > 0 and _flops_per_token(run) == pytest.approx(fpt, rel=1e-9)

    resumed = _heartlm("pretrain", str(tokens), "--out", str(run), *TRAIN_ARGS, "--resume")
    assert "resumed from" in resumed.stderr and "step 4" in resumed.stderr
    final = _losses(run)
    assert sorted(final) == list(range(1, STEPS + 1))
    for step in (5, 6):
        assert final[step] == pytest.approx(golden[step], rel=RTOL), step


@pytest.mark.distributed
def test_two_processes_average_the_weights_as_one_does_across_a_resume(
    tokens: Path, golden: dict[int, float]
) -> None:
    """--ema under DDP: each rank keeps the average; the checkpoint holds it once; a 2-process
    run cut at step 4 and resumed exports the average of an uninterrupted 1-process run."""
    from safetensors.torch import load_file

    one, two = tokens.parent / "ema_one", tokens.parent / "ema_two"
    _heartlm("pretrain", str(tokens), "--out", str(one), *TRAIN_ARGS, "--ema", "0.9")
    args = ["pretrain", str(tokens), "--out", str(two), *TRAIN_ARGS, "--ema", "0.9", "--nproc", "2"]
    _heartlm(*args, "--stop-at", "4")
    assert not (two / "model.safetensors").exists()
    _heartlm(*args, "--resume")
    plain = load_file(tokens.parent / "golden" / "model.safetensors")
    averaged, resumed = load_file(one / "model.safetensors"), load_file(two / "model.safetensors")
    assert averaged.keys() == resumed.keys() == plain.keys()
    for name, weights in averaged.items():
        assert torch.allclose(resumed[name], weights, rtol=1e-4, atol=1e-5), name
    assert any(not torch.allclose(plain[k], averaged[k], atol=1e-4) for k in plain)


@pytest.mark.distributed
def test_two_agents_on_localhost_match_one_agent(tokens: Path, golden: dict[int, float]) -> None:
    """`--nnodes 2`: two torchrun agents with a c10d rendezvous on 127.0.0.1 train together."""
    run = tokens.parent / "two_nodes"
    argv = ["pretrain", str(tokens), "--out", str(run), *TRAIN_ARGS]
    endpoint = f"127.0.0.1:{launch.free_port()}"
    cmd = launch.torchrun_command(
        1, argv, nnodes="2", rdzv_endpoint=endpoint, rdzv_id="two-nodes", rdzv_timeout_s=120
    )
    agents = [
        subprocess.Popen(cmd, env=_env(PET_LOG_DIR=str(run.parent / "torchrun-logs")),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]  # fmt: skip
    outputs = [agent.communicate(timeout=300)[0] for agent in agents]
    for agent, out in zip(agents, outputs, strict=True):
        assert agent.returncode == 0, out[-3000:]
    assert json.loads((run / "run.json").read_text())["counts"]["world_size"] == 2
    losses = _losses(run)
    assert sorted(losses) == sorted(golden)
    for step, loss in losses.items():
        assert loss == pytest.approx(golden[step], rel=RTOL), step


@pytest.mark.distributed
def test_killed_rank_restarts_and_ends_where_an_uninterrupted_run_does(
    tokens: Path, golden: dict[int, float]
) -> None:
    """SIGKILL rank 1 after step 3: torchrun restarts the group, which resumes from step 2."""
    run = tokens.parent / "killed"
    env = _env(HEARTLM_FAULT_AT_STEP="3", HEARTLM_FAULT_RANK="1")
    done = _heartlm("pretrain", str(tokens), "--out", str(run), *TRAIN_ARGS,
                    "--nproc", "2", "--max-restarts", "1", env=env)  # fmt: skip
    assert "injected fault: killing rank 1 after step 3" in done.stderr
    assert "resumed from" in done.stderr and "step_00000002" in done.stderr
    losses = _losses(run)
    assert sorted(losses) == list(range(1, STEPS + 1))
    assert losses[STEPS] == pytest.approx(golden[STEPS], rel=RTOL)
    assert (run / "model.safetensors").is_file()


@pytest.mark.distributed
@pytest.mark.slow
def test_killed_rank_without_restarts_fails(tokens: Path) -> None:
    run = tokens.parent / "killed_no_restart"
    env = _env(HEARTLM_FAULT_AT_STEP="1", HEARTLM_FAULT_RANK="0")
    done = subprocess.run(
        [sys.executable, "-m", "heartlm", "pretrain", str(tokens), "--out", str(run),
         *TRAIN_ARGS, "--nproc", "2"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode != 0
    assert not (run / "model.safetensors").exists()


# Levers of each backend: 2 processes must log the 1-process losses at every step; exactly
# (RTOL) where the lever is lossless, within BF16_RTOL where gradients travel in bf16 (their
# rounding, 2**-9 relative per element, moves these losses by about 2e-5 in 6 steps).
BF16_RTOL = 1e-3
LEVERS = {
    "ddp-buckets": (["--ddp-bucket-mb", "0.01", "--no-ddp-bucket-view",
                     "--ddp-static-graph", "on"], RTOL),
    "ddp-bf16": (["--grad-reduce", "bf16"], BF16_RTOL),
    "fsdp-reshard": (["--backend", "fsdp", "--fsdp-reshard", "always", "--fsdp-group-blocks",
                      "1"], RTOL),
    "fsdp-bf16": (["--backend", "fsdp", "--fsdp-reshard", "never", "--grad-reduce", "bf16"],
                  BF16_RTOL),
    # two blocks gathered and reduced as one FSDP2 unit (what the default chooses for tiny)
    "fsdp-group": (["--backend", "fsdp", "--fsdp-reshard", "always", "--fsdp-group-blocks",
                    "2"], RTOL),
    # two micro-batches per rank: gradients reduced once, after the last one's backward
    "fsdp-accum": (["--backend", "fsdp", "--fsdp-reshard", "always", "--micro-batch", "2"],
                   RTOL),
}  # fmt: skip


def _two_process_losses(tokens: Path, name: str, flags: list[str], **env: str) -> dict:
    run = tokens.parent / name
    _heartlm("pretrain", str(tokens), "--out", str(run), *TRAIN_ARGS, "--nproc", "2",
             "--ckpt-every", "0", *flags, env=_env(**env))  # fmt: skip
    return _losses(run)


@pytest.mark.distributed
@pytest.mark.parametrize("lever", list(LEVERS))
def test_backend_levers_keep_the_losses_of_one_process(
    tokens: Path, golden: dict[int, float], lever: str
) -> None:
    flags, rtol = LEVERS[lever]
    losses = _two_process_losses(tokens, lever, flags)
    assert sorted(losses) == sorted(golden)
    for step, loss in losses.items():
        assert loss == pytest.approx(golden[step], rel=rtol), (lever, step)


@pytest.mark.distributed
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_deepspeed_zero_keeps_the_losses_of_one_process(
    tokens: Path, golden: dict[int, float], stage: int
) -> None:
    """Runs where DeepSpeed is installed (not in CI: an optional extra), on its CPU
    accelerator over gloo; the GPU test below checks NCCL and bf16 autocast."""
    pytest.importorskip("deepspeed")
    flags = ["--backend", "deepspeed", "--zero-stage", str(stage)]
    losses = _two_process_losses(tokens, f"zero{stage}", flags, DS_ACCELERATOR="cpu")
    for step, loss in losses.items():
        assert loss == pytest.approx(golden[step], rel=RTOL), (stage, step)


@pytest.mark.gpu
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_deepspeed_zero_on_two_gpus_matches_ddp(tmp_path: Path, stage: int) -> None:
    """bf16 autocast, compiled, NCCL: ZeRO-N and DDP from the same start differ only in
    the order gradients are summed (fp32), so 6 steps agree to BF16_RTOL."""
    import torch

    pytest.importorskip("deepspeed")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    tokens = _write_tokens(tmp_path / "tokens")
    gpu = ["--device", "cuda", "--precision", "bf16", "--nproc", "2", "--ckpt-every", "0"]
    args = [a for a in TRAIN_ARGS if a not in ("cpu", "fp32", "--device", "--precision")]
    runs = {}
    for name, flags in (("ddp", []), ("zero", ["--backend", "deepspeed", "--zero-stage",
                                               str(stage)])):  # fmt: skip
        run = tmp_path / name
        _heartlm("pretrain", str(tokens), "--out", str(run), *args, *gpu, *flags)
        runs[name] = _losses(run)
    for step, loss in runs["zero"].items():
        assert loss == pytest.approx(runs["ddp"][step], rel=BF16_RTOL), (stage, step)


def _graph_and_eager_losses(
    tmp_path: Path, steps: int, replayed: int, *flags: str
) -> dict[str, dict]:
    """Losses of `heartlm pretrain` on tokens with beat features, eager and `--cudagraph`;
    the graph run must say that `replayed` of its steps replayed the captured step (were
    none captured, both runs would be eager and agree)."""
    tokens = _write_tokens(tmp_path / "tokens")
    gpu = ["--device", "cuda", "--precision", "bf16", "--ckpt-every", "0", *flags]
    args = [a for a in TRAIN_ARGS if a not in ("cpu", "fp32", "--device", "--precision")]
    args[args.index("--steps") + 1] = str(steps)
    runs = {}
    for name, graph in (("eager", []), ("graph", ["--cudagraph"])):
        run = tmp_path / name
        done = _heartlm("pretrain", str(tokens), "--out", str(run), *args, *gpu, *graph)
        runs[name] = _losses(run)
    assert sorted(runs["graph"]) == list(range(1, steps + 1))
    assert f"--cudagraph: {replayed} of {steps} steps replayed" in done.stderr, done.stderr
    return runs


@pytest.mark.gpu
def test_cudagraph_pretraining_with_feature_reconstruction_matches_the_eager_step(
    tmp_path: Path,
) -> None:
    """`heartlm pretrain --cudagraph` on tokens with beat features (the masked objective
    hides and reconstructs their shape columns): the captured step must not copy the column
    mask from the host, and it trains like the eager step (the learning rate is the only
    fp32 difference, as in tests/test_train.py)."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    runs = _graph_and_eager_losses(tmp_path, 12, 9)  # 3 eager, then captured and replayed
    for step, loss in runs["graph"].items():
        assert loss == pytest.approx(runs["eager"][step], rel=2e-3), step


@pytest.mark.gpu
def test_ddp_step_as_one_cuda_graph_on_two_gpus_trains_like_the_eager_ddp_step(
    tmp_path: Path,
) -> None:
    """--cudagraph under DDP: 11 eager steps, then the step with its all-reduces captured
    and replayed. Same kernels and collectives in the same order as the eager DDP step; only
    the learning rate is read as an fp32 device tensor (the 1-process test's tolerance)."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    runs = _graph_and_eager_losses(tmp_path, 20, 9, "--nproc", "2")  # 11 eager, then 9
    for step, loss in runs["graph"].items():
        assert loss == pytest.approx(runs["eager"][step], rel=2e-3), step


def test_deepspeed_refusals_come_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from heartlm.cli import main

    tokens = _write_tokens(tmp_path / "tokens", n_records=4)
    run = tmp_path / "run"
    base = ["pretrain", str(tokens), "--out", str(run), "--preset", "tiny", "--window", "16",
            "--device", "cpu", "--backend", "deepspeed"]  # fmt: skip
    monkeypatch.setitem(sys.modules, "deepspeed", None)
    assert main(base) == 2
    assert "DeepSpeed is not installed" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "deepspeed", types.SimpleNamespace())
    assert main([*base, "--batch", "8", "--micro-batch", "4"]) == 2
    assert "gradient accumulation" in capsys.readouterr().err
    assert not run.exists()


def test_zero_trains_eagerly_where_compiling_fails_on_the_gpus():
    """ZeRO-3's placeholder weights cannot be traced (a fake-tensor error on the GPUs), and
    ZeRO-1/2's compiled bf16 forward fails in cuBLAS on H100: across processes the loop
    compiles under ZeRO only for fp32 stages 1 and 2; one process always compiles."""
    assert zero.traceable(1, True) and zero.traceable(2, True)
    assert not zero.traceable(3, True)
    assert not zero.traceable(1, True, autocast_bf16=True)
    assert not zero.traceable(2, True, autocast_bf16=True)
    assert zero.traceable(3, False, autocast_bf16=True) and zero.traceable(1, False, True)


def test_shutdown_waits_for_every_rank_before_destroying_the_group(
    monkeypatch: pytest.MonkeyPatch,
):
    from heartlm.train import distributed

    calls: list[str] = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed.dist, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda: calls.append("destroy"))
    distributed.shutdown(distributed.DistEnv(rank=0, world_size=2, local_rank=0))
    assert calls == ["barrier", "destroy"]
    calls.clear()
    distributed.shutdown(distributed.DistEnv())  # one process: nothing to tear down
    assert calls == []


def test_nccl_max_ctas_reaches_nccl_s_environment_and_refuses_negative_counts():
    from heartlm.train import distributed
    from heartlm.train.config import ParallelConfig

    assert distributed.nccl_environment(0) == {}  # NCCL's own choice
    assert distributed.nccl_environment(8) == {"NCCL_MAX_CTAS": "8"}
    with pytest.raises(ValueError, match="--nccl-max-ctas"):
        ParallelConfig(nccl_max_ctas=-1).validate()


def test_init_distributed_sets_nccl_max_ctas_before_it_joins_the_group(
    monkeypatch: pytest.MonkeyPatch,
):
    import torch

    from heartlm.train import distributed

    monkeypatch.setattr(os, "environ", dict(os.environ))  # restored after the test
    os.environ.pop("NCCL_MAX_CTAS", None)
    seen: dict[str, object] = {}

    def joined(backend: str, **kwargs: object) -> None:
        seen.update(backend=backend, ctas=os.environ.get("NCCL_MAX_CTAS"))

    monkeypatch.setattr(distributed, "ranks", lambda: types.SimpleNamespace(
        rank=0, world_size=2, local_rank=0))  # fmt: skip
    monkeypatch.setattr(distributed, "pick_device", lambda *a: torch.device("cuda", 0))
    monkeypatch.setattr(distributed.torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(distributed.dist, "init_process_group", joined)
    assert distributed.init_distributed(60, "cuda", nccl_max_ctas=8).world_size == 2
    assert seen == {"backend": "nccl", "ctas": "8"}
    os.environ.pop("NCCL_MAX_CTAS")
    distributed.init_distributed(60, "cuda")  # 0: NCCL's own choice, nothing set
    assert seen["ctas"] is None


def test_fsdp_units_group_blocks_up_to_the_parameter_budget(monkeypatch: pytest.MonkeyPatch):
    from torch import nn

    from heartlm.train import distributed

    blocks = [nn.Linear(10, 10, bias=False) for _ in range(12)]  # 100 parameters each
    assert [len(u) for u in distributed.fsdp_units(blocks, 5)] == [5, 5, 2]
    monkeypatch.setattr(distributed, "FSDP_UNIT_PARAMS", 1200)
    assert [len(u) for u in distributed.fsdp_units(blocks, 0)] == [12]
    monkeypatch.setattr(distributed, "FSDP_UNIT_PARAMS", 450)  # 3 units of 4, not 4 + 4 + 4 + 0
    units = distributed.fsdp_units(blocks, 0)
    assert [len(u) for u in units] == [4, 4, 4]
    assert [b for u in units for b in u] == blocks  # every block once, in order
    assert distributed.fsdp_units([], 0) == []


def _in_a_fresh_process(case: str, tmp_path: Path) -> None:
    """Runs a case of tests/one_process_group.py (a one-rank gloo group) in its own
    interpreter: no gloo thread of an earlier group can be alive there, and a hang ends at the
    timeout with the child's output instead of stalling the suite."""
    script = Path(__file__).with_name("one_process_group.py")
    try:
        done = subprocess.run([sys.executable, str(script), case, str(tmp_path)],
                              capture_output=True, text=True, timeout=240)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{case} hung for {exc.timeout:.0f} s:\n{exc.stdout or ''}{exc.stderr or ''}")
    assert done.returncode == 0, f"{case} failed:\n{done.stdout}{done.stderr}"


def test_grouped_fsdp_units_prefetch_and_keep_the_plain_model_s_loss_and_gradients(
    tmp_path: Path,
) -> None:
    _in_a_fresh_process("grouped_fsdp_units", tmp_path)


def test_ddp_wraps_without_a_deprecation_warning_and_without_buffer_syncs(tmp_path: Path):
    _in_a_fresh_process("ddp_wrap", tmp_path)
