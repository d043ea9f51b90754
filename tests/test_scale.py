"""heartlm scale: the seed paper's metrics, the grid, resume, failing cells, a real gloo grid."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import yaml

from heartlm import settings
from heartlm.cli import build_parser, main
from heartlm.errors import HeartlmError
from heartlm.scale import grid as grid_module
from heartlm.scale import metrics, twonode
from heartlm.scale.cell import Cell, Launch, Workload, core_groups, run_launch
from heartlm.scale.energy import EnergySampler
from heartlm.scale.grid import Grid, ScaleConfig, engine_command, grid_state
from heartlm.scale.results import add_scaling, cell_row, read_results
from heartlm.train.config import ParallelConfig


def test_metrics_match_hand_computed_values():
    # T1 = 120 s on 1 GPU, T4 = 40 s on 4: S = 3, E = 0.75, O = 40 - 30 = 10 s
    assert metrics.speedup(120.0, 40.0) == pytest.approx(3.0)
    assert metrics.efficiency(120.0, 40.0, 4) == pytest.approx(0.75)
    assert metrics.overhead(120.0, 40.0, 4) == pytest.approx(10.0)
    # ideal scaling: E = 1 and no overhead
    assert metrics.efficiency(100.0, 50.0, 2) == pytest.approx(1.0)
    assert metrics.overhead(100.0, 50.0, 2) == pytest.approx(0.0)
    assert metrics.summarise([3.0, 1.0, 2.0, 10.0, 4.0]) == (3.0, 1.0, 10.0)


def _records(step_times: list[float], log_every: int) -> list[dict]:
    """metrics.jsonl as the engine writes it: windows of `log_every` steps share elapsed_s."""
    out, elapsed = [], 0.0
    for start in range(0, len(step_times), log_every):
        window = step_times[start : start + log_every]
        elapsed += sum(window)
        mean = sum(window) / len(window)
        for i in range(len(window)):
            out.append({"step": start + i + 1, "step_time_s": mean, "elapsed_s": elapsed})
    return out


def test_workload_time_leaves_out_warmup_and_profiled_windows():
    # 5 slow warm-up steps, 5 profiled steps, then 10 timed steps of 0.1 s and 0.3 s
    times = [2.0] * 5 + [0.5] * 5 + [0.1] * 5 + [0.3] * 5
    t, n = metrics.workload_time(_records(times, 5), warmup=5, timed_steps=10, skip=range(6, 11))
    assert n == 10
    assert t == pytest.approx(5 * 0.1 + 5 * 0.3)
    # windows that mix warm-up and timed steps are dropped whole; the rest is scaled up
    t, n = metrics.workload_time(_records(times, 4), warmup=5, timed_steps=10, skip=range(6, 11))
    assert n == 8 and t == pytest.approx((3 * 0.1 + 5 * 0.3) * 10 / 8)  # steps 13-20 kept
    with pytest.raises(ValueError, match="expected 10"):
        metrics.workload_time(_records([0.1] * 30, 1), warmup=5, timed_steps=10)


def test_weak_and_strong_cells_do_the_same_work():
    work = Workload(batch=8, steps=20, warmup=5, profile=5)
    for n in (1, 2, 4):
        weak = Cell("pretrain", 128, n, 1, "weak", "ddp", "gpu")
        strong = Cell("pretrain", 128, n, 1, "strong", "ddp", "gpu")
        assert work.tokens(weak) == work.tokens(strong) == 8 * 20 * 128
        assert work.global_batch(weak) == 8 * n and work.timed_steps(weak) == 20 // n
        assert work.global_batch(strong) == 8 and work.timed_steps(strong) == 20
        assert work.log_every(weak) == 5  # metrics windows end where warm-up ends


@pytest.mark.parametrize("warmup", [0, 2, 5, 16])
def test_the_engines_profiled_steps_are_never_timed(warmup):
    """The engine profiles steps PROFILE_AFTER+1 .. PROFILE_AFTER+profile (1-based) whatever
    the cell's warm-up; a warm-up of 2 once put them among the timed steps, and the
    2-process cells of a CPU smoke run had no timed window left."""
    from heartlm.train.profile import PROFILE_AFTER

    work = Workload(batch=4, steps=8, warmup=warmup, profile=2)
    for n in (1, 2):
        cell = Cell("pretrain", 16, n, 1, "weak", "ddp", "gpu")
        profiled = range(PROFILE_AFTER + 1, PROFILE_AFTER + 1 + work.profile)
        assert max(profiled) <= work.untimed and work.untimed >= warmup
        every = work.log_every(cell)
        assert work.untimed % every == 0 and work.timed_steps(cell) % every == 0
        records = _records([0.1] * work.total_steps(cell), every)
        _, measured = metrics.workload_time(records, work.untimed, work.timed_steps(cell),
                                            profiled)  # fmt: skip
        assert measured == work.timed_steps(cell)
    assert Workload(batch=4, steps=64, warmup=16, profile=8).untimed == 24  # studies so far
    assert Workload(batch=4, steps=8, warmup=2).untimed == 2  # not profiled: no extra steps


def test_config_validation_names_the_flag():
    with pytest.raises(ValueError, match="--steps"):
        ScaleConfig(gpus=[1, 2, 4], steps=6)
    with pytest.raises(ValueError, match="--task"):
        ScaleConfig(tasks=["pretrain", "train"])
    with pytest.raises(ValueError, match="--batch"):
        ScaleConfig(gpus=[1, 4], batch=6, scaling=["strong"])
    with pytest.raises(ValueError, match="--backend-cpus 3 is not one of --cpus"):
        ScaleConfig(cpus=[1, 2], backend_cpus=3)
    # Defaults fit a committed study: >= 50 timed steps at 1 GPU, metrics windows of 8
    # (warm-up 16, profiled 8, 16 timed at 4 GPUs), 3 repeats.
    cfg = ScaleConfig(gpus=[1, 2, 4], windows=[128, 1024])
    assert (cfg.steps, cfg.warmup, cfg.profile_steps, cfg.repeats) == (64, 16, 8, 3)
    assert cfg.workload(128).log_every(Cell("pretrain", 128, 4, 1, "weak", "ddp", "gpu")) == 8
    assert cfg.batch_for(128) == 256 and cfg.batch_for(1024) == 32


def test_other_backends_run_at_one_cpu_count_and_zero_stages_map_to_deepspeed(tmp_path):
    cfg = ScaleConfig(gpus=[1, 2], cpus=[1, 4], windows=[64], tasks=["pretrain"],
                      scaling=["weak"], backends=["ddp", "fsdp", "zero3"])  # fmt: skip
    by_backend = {}
    for cell in cfg.cells():
        by_backend.setdefault(cell.backend, set()).add(cell.cpus)
    assert by_backend == {"ddp": {1, 4}, "fsdp": {4}, "zero3": {4}}
    # one process trains the plain module whatever the backend: one 1-GPU run serves all
    one = [c for c in cfg.cells() if c.gpus == 1 and c.cpus == 4]
    assert {cfg.twin(c).backend for c in one if c.backend != "ddp"} == {"ddp"}
    zero3 = next(c for c in cfg.cells() if c.backend == "zero3")
    argv = engine_command(zero3, cfg, tmp_path / "tok", tmp_path / "run", None)
    parser, module = build_parser(argv)
    got = settings.resolve(module.Config, parser.parse_args(argv), "pretrain").train
    assert (got.backend, got.parallel.zero_stage, got.final_save) == ("deepspeed", 3, False)


def test_finetune_cells_take_the_backend_and_data_path_as_pretrain_cells_do(tmp_path):
    """finetune shares the engine's settings with pretrain: its cells run every backend
    and data path of the grid instead of being skipped."""
    cfg = ScaleConfig(gpus=[1, 2], cpus=[1, 4], windows=[64], tasks=["finetune"],
                      scaling=["weak"], backends=["ddp", "fsdp", "zero3"],
                      data_paths=["gpu", "workers"])  # fmt: skip
    want = {"ddp": ("ddp", 2), "fsdp": ("fsdp", 2), "zero3": ("deepspeed", 3)}
    for cell in cfg.cells():
        argv = engine_command(cell, cfg, tmp_path / "tok", tmp_path / "run", tmp_path / "init")
        parser, module = build_parser(argv)
        got = settings.resolve(module.Config, parser.parse_args(argv), "finetune").train
        assert (got.backend, got.parallel.zero_stage) == want[cell.backend], cell.id
        assert got.workers == (cell.cpus if cell.data_path == "workers" else 0), cell.id
    runner = FakeRunner()
    grid = Grid(cfg, tmp_path / "study", tmp_path / "tok", tmp_path / "init", runner=runner)
    assert grid.run() == {"ok": len(runner.calls)}
    # cell ids end in -BACKEND-DATAPATH
    assert {c.split("-")[-2] for c in runner.calls} == {"ddp", "fsdp", "zero3"}
    assert {c.split("-")[-1] for c in runner.calls} == {"gpu", "workers"}


def test_core_groups_are_disjoint_when_the_machine_has_enough():
    spec, how = core_groups(2, 2, [0, 1, 2, 3, 4])
    assert (spec, how) == ("0,1/2,3", "disjoint")
    spec, how = core_groups(4, 2, [0, 1, 2])
    assert spec == "" and how.startswith("shared")


def test_engine_commands_parse_with_the_real_clis(tmp_path):
    cfg = ScaleConfig(gpus=[1, 2], cpus=[2], windows=[64], scaling=["weak"], steps=10, warmup=5,
                      profile_steps=5)  # fmt: skip
    for task, data_path in (("pretrain", "workers"), ("finetune", "gpu")):
        cell = Cell(task, 64, 2, 2, "weak", "ddp", data_path)
        argv = engine_command(cell, cfg, tmp_path / "tok", tmp_path / "run", tmp_path / "init")
        parser, module = build_parser(argv)
        assert module is not None
        got = settings.resolve(module.Config, parser.parse_args(argv), task)
        # warm-up 5, then 5 profiled (pretrain only), then 10 / 2 timed steps
        assert got.train.steps == (15 if task == "pretrain" else 10)
        assert got.train.batch == 2 * cfg.batch_for(64)
        assert got.window == 64
        if task == "pretrain":
            train = got.train
            assert train.workers == 2 and train.profile_steps == 5 and train.ckpt_every == 0


def _launch(tmp_path: Path, argv: list[str], timeout: float) -> Launch:
    return Launch(argv, {}, tmp_path / "run", tmp_path / "log.txt", timeout, [], "disjoint")


def test_a_failing_or_hanging_launch_is_recorded_not_raised(tmp_path):
    cell = Cell("pretrain", 32, 1, 1, "weak", "ddp", "gpu")
    work = Workload(batch=2, steps=2, warmup=0)
    fail = [sys.executable, "-c", "import sys; print('heartlm: error: x.dat: bad'); sys.exit(2)"]
    result = run_launch(_launch(tmp_path, fail, 30), cell, work)
    assert result["status"] == "failed"
    assert result["error"] == "exit 2: heartlm: error: x.dat: bad"

    pid_file = tmp_path / "pid"
    hang = [sys.executable, "-c", f"import os,time; open({str(pid_file)!r},'w').write("
            "str(os.getpid())); time.sleep(60)"]  # fmt: skip
    start = time.monotonic()
    result = run_launch(_launch(tmp_path, hang, 1.5), cell, work)
    assert result["status"] == "timeout" and "1.5 s" in result["error"]
    assert time.monotonic() - start < 20
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the whole process group was ended


class FakeRunner:
    """Stands in for torchrun: times proportional to 1/N, one chosen cell failing."""

    def __init__(self, fail: str | None = None, crash: str | None = None, stop_after=None):
        self.calls: list[str] = []
        self.fail, self.crash, self.stop_after = fail, crash, stop_after

    def __call__(self, launch: Launch, cell: Cell, work: Workload) -> dict:
        if self.stop_after is not None and len(self.calls) == self.stop_after:
            raise KeyboardInterrupt
        self.calls.append(cell.id)
        if cell.id == self.crash:
            raise OSError("torchrun not found")
        if cell.id == self.fail:
            return {"cell": cell.id, "status": "failed", "error": "exit 2: bad flag"}
        t = 10.0 / cell.gpus + 0.5 * (cell.gpus - 1)
        return {"cell": cell.id, "status": "ok", "error": "", "time_s": t, "wall_s": t + 3}


def _grid(tmp_path: Path, runner: FakeRunner, repeats: int = 1) -> Grid:
    cfg = ScaleConfig(gpus=[1, 2, 4], cpus=[1], windows=[32], tasks=["pretrain"],
                      scaling=["weak", "strong"], steps=4, batch=4, repeats=repeats)  # fmt: skip
    grid_state(tmp_path / "study", cfg, overwrite=False)
    return Grid(cfg, tmp_path / "study", tmp_path / "tokens", runner=runner)


def _rows(grid: Grid) -> list[dict]:
    rows = [
        cell_row(c, grid.cfg.workload(c.window, c.task), "tiny", reps)
        for c, reps in grid.results().items()
    ]
    add_scaling(rows)
    return rows


def test_a_failing_cell_does_not_stop_the_grid(tmp_path):
    runner = FakeRunner(fail="pretrain-w32-g2-c1-weak-ddp-gpu",
                        crash="pretrain-w32-g4-c1-strong-ddp-gpu")  # fmt: skip
    grid = _grid(tmp_path, runner)
    counts = grid.run()
    # 6 cells, 5 launches: the strong 1-GPU cell is the weak one's run
    assert len(runner.calls) == 5 and counts == {"ok": 3, "failed": 2}
    rows = {(r["gpus"], r["scaling"]): r for r in _rows(grid)}
    assert rows[(2, "weak")]["status"] == "failed"
    assert rows[(2, "weak")]["error"] == "exit 2: bad flag"
    assert "torchrun not found" in rows[(4, "strong")]["error"]
    # the cells after the failures ran and have the seed paper's metrics
    assert rows[(4, "weak")]["speedup"] == pytest.approx(10.0 / (2.5 + 1.5))
    assert rows[(2, "strong")]["overhead_s"] == pytest.approx(5.5 - 10.0 / 2)
    assert rows[(1, "strong")]["time_s"] == rows[(1, "weak")]["time_s"] == 10.0


def test_an_interrupted_grid_resumes_without_rerunning_finished_cells(tmp_path):
    first = FakeRunner(stop_after=3)
    with pytest.raises(KeyboardInterrupt):
        _grid(tmp_path, first, repeats=2).run()
    assert len(first.calls) == 3
    done = sorted((tmp_path / "study" / "cells").glob("*/r*/result.json"))
    assert len(done) == 3
    stamps = {p: p.stat().st_mtime_ns for p in done}

    second = FakeRunner()
    _grid(tmp_path, second, repeats=2).run()
    assert len(second.calls) == 2 * 5 - 3
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    third = FakeRunner()
    _grid(tmp_path, third, repeats=2).run()
    assert third.calls == []
    # Fewer --repeats later (say, for a CPU sweep) keeps what was measured: 2 repeats each.
    assert all(len(reps) == 2 for reps in _grid(tmp_path, FakeRunner()).results().values())


def test_repeat_zero_of_every_cell_comes_first_and_cells_share_the_inductor_cache(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    grid = _grid(tmp_path, FakeRunner(), repeats=2)
    reps = [rep for _, rep in grid.pending()]
    assert reps == [0] * 5 + [1] * 5
    cells = [cell for cell, _ in grid.pending()]
    caches = {grid.launch(c, r, []).env["TORCHINDUCTOR_CACHE_DIR"] for c, r in grid.pending()}
    assert len(cells) == 10 and caches == {str(tmp_path / "study" / ".inductor-cache")}


def test_max_time_leaves_cells_pending_for_a_resume(tmp_path):
    runner = FakeRunner()
    grid = _grid(tmp_path, runner)
    assert grid.run(max_time_s=-1.0) == {"pending": 5}
    assert runner.calls == [] and len(grid.pending()) == 5
    grid.run()
    assert len(runner.calls) == 5 and grid.pending() == []


def test_a_grid_begun_under_another_engine_default_is_not_resumed(tmp_path, monkeypatch):
    """Its cells ran with the old default (e.g. 25-MiB DDP buckets); resuming it would put
    cells of the new one beside them under one workload."""
    grid_state(tmp_path / "study", ScaleConfig(steps=20), overwrite=False)
    grid_state(tmp_path / "study", ScaleConfig(steps=20), overwrite=False)  # same: resumes
    older = ParallelConfig(ddp_bucket_mb=25.0)
    assert older != ParallelConfig()
    monkeypatch.setattr(grid_module, "ParallelConfig", lambda: older)
    with pytest.raises(HeartlmError, match="another workload"):
        grid_state(tmp_path / "study", ScaleConfig(steps=20), overwrite=False)


def test_a_folder_with_another_grid_is_refused(tmp_path):
    grid_state(tmp_path / "study", ScaleConfig(steps=20), overwrite=False)
    with pytest.raises(HeartlmError, match="another workload"):
        grid_state(tmp_path / "study", ScaleConfig(steps=40), overwrite=False)
    grid_state(tmp_path / "study", ScaleConfig(gpus=[1, 2, 4, 5], steps=20 * 5 * 3),
               overwrite=True)  # fmt: skip
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(HeartlmError, match="already holds files"):
        grid_state(tmp_path / "other", ScaleConfig(), overwrite=False)
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_bad_flags_and_data_are_one_line_errors_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "study"
    assert main(["scale", "--data", str(tmp_path), "--out", str(out)]) == 2
    assert main(["scale", "--task", "train", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("heartlm: error:") and "tokens.json" in err[0]
    assert err[1].startswith("heartlm: error:") and "--task" in err[1]
    assert not out.exists()


@pytest.mark.parametrize(
    ("engine_args", "says"),
    [("--no-such-flag", "pretrain: unrecognized arguments: --no-such-flag"),
     ("--lr abc", "invalid float value"), ("foo", "unrecognized arguments: foo"),
     ("--preset tiny", "finetune: unrecognized arguments: --preset tiny"),
     ("--nccl-max-ctas -1", "--nccl-max-ctas must be >= 0"),
     ("--epochs 2", "--epochs: not allowed with argument --steps")],
)  # fmt: skip
def test_engine_args_every_launch_would_refuse_fail_before_any_cell(
    tmp_path, capsys, engine_args, says
):
    """Each cell used to fail on its own and the study ended with exit 0."""
    out = tmp_path / "study"
    argv = ["scale", "--out", str(out), "--task", "pretrain,finetune", "--gpus", "1", "--cpus",
            "1", "--window", "16", f"--engine-args={engine_args}"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("heartlm: error: --engine-args:") and says in err and "\n" not in err
    assert not out.exists()


def test_print_config_then_config_reruns_the_same_grid(tmp_path, capsys):
    """scale's settings come from ScaleCommand/ScaleConfig like every stage's: a printed
    config, fed back, resolves to the same run.json, and so does the study's run.json.
    (--max-time -1 starts no cell: the study is only claimed and written down.)"""
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    (tokens / "tokens.json").write_text("{}")
    flags = ["scale", "--gpus", "1,2", "--cpus", "1", "--window", "16", "--task", "pretrain",
             "--backend", "ddp,fsdp", "--preset", "tiny", "--timeout", "60", "--data", str(tokens),
             "--engine-args=--no-compile --lr 1e-3", "--max-time", "-1",
             "--out", str(tmp_path / "a")]  # fmt: skip
    capsys.readouterr()
    assert main([*flags, "--print-config"]) == 0
    text = capsys.readouterr().out
    assert not (tmp_path / "a").exists()  # printing writes nothing
    printed = yaml.safe_load(text)
    assert printed["grid"]["steps"] == 64 and printed["grid"]["backend_cpus"] == 1
    assert printed["grid"]["engine_args"] == ["--no-compile", "--lr", "1e-3"]
    experiment = tmp_path / "study.yaml"
    experiment.write_text(text)
    assert main(["scale", "--config", str(experiment)]) == 0
    resolved = json.loads((tmp_path / "a" / "run.json").read_text())["config"]
    assert resolved == printed
    again = tmp_path / "b"
    assert main(["scale", "--config", str(tmp_path / "a" / "run.json"), "--out", str(again)]) == 0
    assert json.loads((again / "run.json").read_text())["config"] == {**resolved, "out": str(again)}
    grids = [json.loads((d / "grid.json").read_text()) for d in (tmp_path / "a", again)]
    assert grids[0] == grids[1]


def test_energy_is_mean_power_over_the_timed_steps():
    sampler = EnergySampler([], lambda: 0)
    assert sampler.source in ("none", "nvml", "nvidia-smi")
    # (time s, joules so far, steps logged): 100 W while steps 10..20 were logged
    sampler.samples = [(0.0, 0.0, 0), (1.0, 50.0, 10), (2.0, 150.0, 15), (3.0, 250.0, 20)]
    assert sampler.mean_power(10, 20) == pytest.approx(100.0)
    assert sampler.mean_power(10, 30) is None


@pytest.fixture(scope="module")
def tokens(tmp_path_factory) -> Path:
    from heartlm.scale.corpus import make_tokens

    return make_tokens(tmp_path_factory.mktemp("corpus"), records=4, minutes=2.0)


@pytest.mark.distributed
def test_one_and_two_process_gloo_grid_end_to_end(tmp_path, tokens):
    out = tmp_path / "study"
    argv = ["scale", "--gpus", "1,2", "--cpus", "1", "--window", "16", "--task", "pretrain",
            "--scaling", "weak", "--preset", "tiny", "--steps", "4", "--warmup", "2",
            "--profile-steps", "0", "--batch", "2", "--timeout", "120", "--data", str(tokens),
            "--repeats", "1",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    rows = {r["gpus"]: r for r in read_results(out / "results.csv")}
    assert set(rows) == {"1", "2"}
    for r in rows.values():
        assert r["status"] == "ok", r["error"]
        assert r["tokens"] == str(2 * 4 * 16)
        assert int(r["grad_bytes"]) > 0  # 4 x parameters: cells skip the final save
    t1, t2 = float(rows["1"]["time_s"]), float(rows["2"]["time_s"])
    assert float(rows["2"]["speedup"]) == pytest.approx(t1 / t2, rel=1e-5)
    assert float(rows["2"]["efficiency"]) == pytest.approx(t1 / t2 / 2, rel=1e-5)
    assert float(rows["2"]["overhead_s"]) == pytest.approx(t2 - t1 / 2, rel=1e-4, abs=1e-6)
    assert rows["1"]["speedup"] == "1"
    two_cores = len(os.sched_getaffinity(0)) >= 2
    assert rows["2"]["binding"] == "disjoint" if two_cores else rows["2"]["binding"] != ""
    # the 2-process cell really ran 2 ranks, each on its own core when there are two
    g2 = out / "cells" / "pretrain-w16-g2-c1-weak-ddp-gpu" / "r0"
    assert "2 process" in (g2 / "log.txt").read_text()
    assert json.loads((g2 / "result.json").read_text())["status"] == "ok"
    env = json.loads((out / "environment.json").read_text())
    assert env["cpu_model"] and env["torch"]
    # rerunning the finished grid launches nothing
    before = (g2 / "result.json").stat().st_mtime_ns
    assert main(argv) == 0
    assert (g2 / "result.json").stat().st_mtime_ns == before
    # The emulated second node repeats the 2-process weak cell as 2 agents x 1 process,
    # with the bus bandwidth of their path (gloo here; sockets under NCCL on GPUs).
    assert twonode.main([str(out), "--procs", "1", "--window", "16", "--sizes-mb", "1"]) == 0
    (socket,) = json.loads((out / "comm" / "socket_runs.json").read_text())["runs"]
    assert socket["status"] == "ok", socket["error"]
    assert socket["cell"] == "pretrain-w16-g2-c1-weak-ddp-gpu" and socket["step_s"] > 0
    bench = json.loads((out / "comm" / "socket_n2.json").read_text())
    assert bench["world_size"] == 2 and bench["results"][0]["busbw"] > 0


def test_a_cell_profiled_inside_its_warmup_times_its_last_steps(tmp_path):
    """On a GPU the engine profiles steps 6-13, inside the 16 warm-up steps; the cell must
    still time exactly its 64 last steps (it once counted 72 and failed every cell)."""
    from types import SimpleNamespace

    from heartlm.scale.cell import Cell, Workload, _measure

    run = tmp_path / "run"
    run.mkdir()
    lines = [
        json.dumps({"step": s, "elapsed_s": float((s - 1) // 8), "step_time_s": 0.044})
        for s in range(1, 89)
    ]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run / "breakdown.json").write_text(json.dumps({"step_s": 0.045, "first_step": 6,
                                                    "profiled_steps": 8}))  # fmt: skip
    cell = Cell("pretrain", 128, 1, 16, "weak", "ddp", "gpu")
    work = Workload(batch=256, steps=64, warmup=16, profile=8)
    launch = SimpleNamespace(run_dir=run)
    energy = SimpleNamespace(mean_power=lambda a, b: None)
    result = _measure({}, launch, cell, work, energy)
    assert "error" not in result, result.get("error")
    assert result["steps_measured"] == 64
    assert result["time_s"] == pytest.approx(64 * 0.044)
    # The socket run of the emulated second node times the same steps (it once counted the
    # profiled ones too: "72 timed steps logged, expected 64" failed both socket runs).
    socket = twonode.measure(run, work, cell)
    assert "error" not in socket, socket.get("error")
    assert socket["time_s"] == pytest.approx(result["time_s"])
