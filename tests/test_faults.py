"""Fault injection (issue 14): damaged and crafted files, bad flags, full and read-only disks,
signals, killed processes, concurrent writers. Every case ends in one line naming the file
and the problem, a non-zero exit, nothing half-written and nothing lost.

Numbers in the test names refer to the issue's list of defects. Runs are tiny and mostly
in-process (the CLI's `main`); a few cases need real processes.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import pickle
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tinydata import TINY, VOCAB, make_tokens

from heartlm.cli import main
from heartlm.errors import HeartlmError
from heartlm.shards import NUM_SPECIAL


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tokens(tmp_path_factory.mktemp("faults") / "tokens")


def pretrain(tokens: Path, out: Path, *extra: str) -> int:
    return main(["pretrain", str(tokens), "--out", str(out), *TINY, *extra])


def losses(run: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows]
    assert steps == sorted(set(steps)), f"steps logged twice or out of order: {steps}"
    return {r["step"]: r["loss"] for r in rows}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def one_error(capsys: pytest.CaptureFixture[str]) -> str:
    """The single `heartlm: error:` line a failed command printed last."""
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("heartlm: error:")]
    assert len(errors) == 1 and err[-1] == errors[0], err
    assert "Traceback" not in "\n".join(err)
    return errors[0]


@pytest.fixture(scope="module")
def golden(tokens: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, float]:
    """Losses of an uninterrupted 12-step run, which every resumed run must end on."""
    run = tmp_path_factory.mktemp("golden") / "run"
    assert pretrain(tokens, run, "--steps", "12") == 0
    return losses(run)


@pytest.fixture(scope="module")
def pre(tokens: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pretrained tiny run to fine-tune from."""
    run = tmp_path_factory.mktemp("pre") / "pre"
    assert pretrain(tokens, run, "--steps", "2") == 0
    return run


FT = ("--window", "16", "--batch", "8", "--warmup", "1", "--val-every", "2",
      "--log-every", "1", "--device", "cpu", "--precision", "fp32", "--seed", "1")  # fmt: skip


def finetune(pre: Path, tokens: Path, out: Path, *extra: str) -> int:
    return main(["finetune", str(pre), "--data", str(tokens), "--out", str(out), *FT, *extra])


# --- 1. A checkpoint never runs code ------------------------------------------------------


class Marker:
    """Unpickling this runs a shell command that creates a marker file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_1_crafted_checkpoint_metadata_is_refused_and_runs_nothing(tokens, tmp_path, capsys):
    run, marker = tmp_path / "run", tmp_path / "pwned"
    assert pretrain(tokens, run, "--steps", "4", "--stop-at", "2", "--keep", "1") == 0
    ckpt = run / "checkpoints" / "step_00000002"
    (ckpt / ".metadata").write_bytes(pickle.dumps(Marker(marker)))
    before = snapshot(run)
    capsys.readouterr()
    assert pretrain(tokens, run, "--steps", "4", "--resume") == 2
    assert not marker.exists(), "a crafted checkpoint ran code"
    assert "does not match its digest" in one_error(capsys)
    # An attacker who also rewrites the manifest meets the restricted unpickler.
    from heartlm.train import manifest

    manifest.write_manifest(ckpt)
    assert pretrain(tokens, run, "--steps", "4", "--resume") == 2
    error = one_error(capsys)
    assert "refused checkpoint metadata" in error and "posix.system" in error
    assert not marker.exists(), "a crafted checkpoint ran code"
    for name in ("run.json", "metrics.jsonl"):
        assert (run / name).read_bytes() == before[name]


def test_1_optimizer_entries_are_read_weights_only(tmp_path):
    import torch.distributed.checkpoint as dcp

    from heartlm.train.dcp_safe import SafeFileSystemReader, SafeLoadPlanner

    marker = tmp_path / "pwned"
    with warnings_off():
        dcp.save({"x": torch.ones(2), "groups": [{"lr": Marker(marker)}]}, checkpoint_id=tmp_path)
        state = {"x": torch.zeros(2), "groups": [{"lr": 0.0}]}
        reader = SafeFileSystemReader(tmp_path)
        with pytest.raises(BaseException, match=r"Unsupported global|weights_only"):
            dcp.load(state, storage_reader=reader, planner=SafeLoadPlanner())
    assert not marker.exists()


@contextlib.contextmanager
def warnings_off():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_1_no_unrestricted_unpickling_in_the_sources():
    src = Path(__file__).resolve().parents[1] / "src"
    text = "\n".join(p.read_text() for p in src.rglob("*.py"))
    for banned in ("pickle.load(", "pickle.loads(", "weights_only=False", "allow_pickle=True"):
        assert banned not in text, banned


# --- 2, 9. --overwrite keeps the old result until the new one is complete -----------------


@pytest.mark.parametrize(
    "bad",
    [
        ("--micro-batch", "3"),
        ("--window", "0"),
        ("--val-fraction", "1.0"),
        ("--lr", "nan"),
        ("--warmup", "-1"),
        ("--timeout", "0"),
        ("--stride", "0"),
        ("--keep", "-1"),
    ],
)
def test_2_9_every_pretrain_flag_is_checked_before_anything_is_written(
    tokens, tmp_path, capsys, bad
):
    new = tmp_path / "new"
    assert pretrain(tokens, new, "--steps", "2", *bad) == 2
    assert bad[0] in one_error(capsys)
    assert not new.exists() and not list(tmp_path.iterdir())


def test_2_overwrite_keeps_the_old_run_until_the_new_one_is_complete(
    tokens, tmp_path, capsys, monkeypatch
):
    run = tmp_path / "runA"
    assert pretrain(tokens, run, "--steps", "3") == 0
    old = snapshot(run)
    # A late flag error, a failure in the middle of training, a stop before the end.
    assert pretrain(tokens, run, "--steps", "3", "--overwrite", "--micro-batch", "3") == 2
    import heartlm.train.loop as loop

    real_save = loop.ckpt.save_checkpoint
    monkeypatch.setattr(loop.ckpt, "save_checkpoint", _raise(OSError(errno.EIO, "I/O error")))
    assert pretrain(tokens, run, "--steps", "3", "--overwrite") == 2
    monkeypatch.setattr(loop.ckpt, "save_checkpoint", real_save)
    assert snapshot(run) == old
    assert not (tmp_path / ".runA.partial").exists()  # nothing resumable was left
    assert pretrain(tokens, run, "--steps", "3", "--overwrite", "--stop-at", "2") == 0
    assert snapshot(run) == old
    assert (tmp_path / ".runA.partial" / "checkpoints" / "step_00000002").is_dir()
    # The replacement continues where it stopped, then takes the old run's place.
    assert pretrain(tokens, run, "--steps", "3", "--overwrite", "--resume") == 0
    assert snapshot(run) != old and sorted(losses(run)) == [1, 2, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runA"]


def _raise(exc: BaseException):
    def fail(*args, **kwargs):
        raise exc

    return fail


def test_2_finetune_overwrite_and_a_failed_quickstart_keep_the_old_result(
    pre, tokens, tmp_path, capsys, monkeypatch
):
    ft = tmp_path / "ft"
    assert finetune(pre, tokens, ft, "--steps", "2") == 0
    old = snapshot(ft)
    import heartlm.finetune.pipeline as pipeline

    monkeypatch.setattr(pipeline, "copy_lineage", _raise(OSError(errno.ENOSPC, "No space")))
    capsys.readouterr()
    assert finetune(pre, tokens, ft, "--steps", "2", "--overwrite") == 2
    assert snapshot(ft) == old
    # The new run failed while finishing: its checkpoints stay, to be continued (§20).
    assert "continue it with --resume --overwrite" in capsys.readouterr().err
    monkeypatch.undo()
    assert finetune(pre, tokens, ft, "--steps", "2", "--resume", "--overwrite") == 0
    assert snapshot(ft) != old and not (tmp_path / ".ft.partial").exists()
    # quickstart: the old folder stays when a stage fails.
    import heartlm.quickstart as quickstart

    qs = tmp_path / "qs"
    qs.mkdir()
    (qs / "mine.txt").write_text("keep")
    monkeypatch.setattr(quickstart, "heartlm_cli", _raise(HeartlmError("stage failed")))
    assert main(["quickstart", "--out", str(qs), "--overwrite"]) == 2
    assert (qs / "mine.txt").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ft", "qs"]


def test_2_scale_overwrite_builds_the_new_grid_beside_the_old_one(tmp_path):
    from heartlm.scale.grid import ScaleConfig, grid_state

    study = tmp_path / "study"
    assert grid_state(study, ScaleConfig(steps=20), overwrite=False) == study
    (study / "results.csv").write_text("old")
    work = grid_state(study, ScaleConfig(steps=40), overwrite=True)
    assert work == tmp_path / ".study.partial" and (study / "results.csv").read_text() == "old"
    assert grid_state(study, ScaleConfig(steps=40), overwrite=True) == work  # resumes there


# --- 3. An output never is, holds or lies in an input --------------------------------------


@pytest.mark.parametrize("where", ["same", "parent", "inside"])
def test_3_output_that_is_holds_or_lies_in_an_input_is_refused(
    tokens, pre, tmp_path, capsys, where
):
    src = tmp_path / "proj" / "data"
    shutil.copytree(tokens, src)
    out = {"same": src, "parent": src.parent, "inside": src / "x"}[where]
    before = snapshot(src)
    commands = [
        ["ingest", str(src), "--out", str(out), "--overwrite"],
        ["tokenize", str(src), "--out", str(out), "--overwrite"],
        ["pretrain", str(src), "--out", str(out), *TINY, "--overwrite"],
        ["finetune", str(pre), "--data", str(src), "--out", str(out), "--overwrite"],
        ["evaluate", str(pre), str(src), "--out", str(out), "--overwrite"],
    ]
    for argv in commands:
        capsys.readouterr()
        assert main(argv) == 2, argv[0]
        assert "input" in one_error(capsys), argv[0]
        assert snapshot(src) == before, argv[0]


def test_15_ingest_out_dot_overwrite_is_refused_and_leaves_nothing(tokens, tmp_path, capsys):
    here = tmp_path / "here"
    here.mkdir()
    with contextlib.chdir(here):
        assert main(["ingest", str(tokens), "--out", ".", "--overwrite"]) == 2
    assert "is the current folder" in one_error(capsys)
    assert [p.name for p in tmp_path.iterdir()] == ["here"] and not list(here.iterdir())


# --- 4. One writer per output --------------------------------------------------------------


def test_4_a_second_writer_is_refused_naming_the_holder(tokens, tmp_path, capsys):
    from heartlm.lock import output_lock

    run, store = tmp_path / "run", _store(tmp_path / "s")
    with output_lock(run):
        assert pretrain(tokens, run, "--steps", "2") == 2
        error = one_error(capsys)
        assert f"pid {os.getpid()} on " in error and "being written by another" in error
        assert main(["tokenize", str(store), "--out", str(run), "--vocab", "4"]) == 2
        assert f"pid {os.getpid()}" in one_error(capsys)
    assert not run.exists() and not list(tmp_path.glob(".run*"))
    assert pretrain(tokens, run, "--steps", "2") == 0


# --- 5, 6, 7, 18. Resume -------------------------------------------------------------------


def test_5_resume_of_a_finished_run_changes_nothing(tokens, tmp_path, capsys, golden):
    run = tmp_path / "run"
    assert pretrain(tokens, run, "--steps", "10") == 0
    before = snapshot(run)
    capsys.readouterr()
    assert pretrain(tokens, run, "--steps", "10", "--resume") == 0
    assert "already finished at step 10" in capsys.readouterr().err
    assert snapshot(run) == before
    # A raised --steps continues (a longer cosine schedule: other losses than golden's).
    assert pretrain(tokens, run, "--steps", "12", "--resume") == 0
    result = json.loads((run / "result.json").read_text())
    assert result["step"] == 12 and np.isfinite(result["loss"])
    assert sorted(losses(run)) == list(range(1, 13))


def test_6_resume_refuses_tokens_of_another_codebook(tokens, tmp_path, capsys):
    run = tmp_path / "run"
    assert pretrain(tokens, run, "--steps", "4", "--stop-at", "2") == 0
    other = tmp_path / "other"
    shutil.copytree(tokens, other)
    meta = json.loads((other / "tokens.json").read_text())
    (other / "tokens.json").write_text(json.dumps({**meta, "codebook_hash": "0" * 16}))
    before = snapshot(run)
    capsys.readouterr()
    assert pretrain(other, run, "--steps", "4", "--resume") == 2
    assert "codebook" in one_error(capsys)
    assert snapshot(run) == before


def test_7_damaged_latest_checkpoint_falls_back_to_the_newest_intact_one(
    tokens, tmp_path, capsys, golden
):
    run = tmp_path / "run"
    assert pretrain(tokens, run, "--steps", "12", "--ckpt-every", "2", "--stop-at", "6") == 0
    shard = next((run / "checkpoints" / "step_00000006").glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    capsys.readouterr()
    assert pretrain(tokens, run, "--steps", "12", "--ckpt-every", "2", "--resume") == 0
    err = capsys.readouterr().err
    assert "step_00000006 is damaged" in err and "resuming from" in err and "step_00000004" in err
    assert losses(run) == golden
    # Only damaged checkpoints: one line, and the run keeps its result.
    for ckpt in (run / "checkpoints").iterdir():
        (ckpt / "meta.json").write_bytes(b"\xff\xfe not json")
    before = snapshot(run)
    assert pretrain(tokens, run, "--steps", "14", "--resume") == 2
    assert "no intact checkpoint to resume from" in one_error(capsys)
    assert snapshot(run) == before


def test_18_resume_without_a_checkpoint_says_so(tokens, tmp_path, capsys):
    run = tmp_path / "run"
    assert pretrain(tokens, run, "--steps", "2", "--resume") == 0
    err = capsys.readouterr().err.splitlines()
    line = f"heartlm: {run}: nothing to resume (no checkpoint); starting at step 0"
    assert err.count(line) == 1, err


def test_18_overwrite_resume_with_nothing_to_resume_names_the_run(tokens, tmp_path, capsys):
    """Not `.run.partial`, where the replacement is built: the user never named it."""
    run = tmp_path / "run"
    assert pretrain(tokens, run, "--steps", "2") == 0
    capsys.readouterr()
    assert pretrain(tokens, run, "--steps", "2", "--overwrite", "--resume") == 0
    err = capsys.readouterr().err
    line = f"heartlm: {run}: nothing to resume (no checkpoint); starting at step 0"
    assert err.splitlines().count(line) == 1 and ".partial" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_18_a_truncated_metrics_line_leaves_no_gap(tokens, tmp_path, golden):
    run = tmp_path / "run"
    assert pretrain(tokens, run, "--steps", "12", "--ckpt-every", "3", "--stop-at", "6") == 0
    metrics = run / "metrics.jsonl"
    text = metrics.read_bytes()
    metrics.write_bytes(text[: text.rindex(b"\n", 0, -1) + 12] + b"\xff")  # a crash mid-line
    assert pretrain(tokens, run, "--steps", "12", "--ckpt-every", "3", "--resume") == 0
    assert losses(run) == golden


# --- 10. The machine: full, read-only, size-limited, forbidden -----------------------------


@contextlib.contextmanager
def file_size_limit(n_bytes: int):
    """Writes past `n_bytes` fail with EFBIG (Python ignores SIGXFSZ), as `ulimit -f` does."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (n_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_10_a_checkpoint_that_cannot_be_written_is_one_line_and_leaves_no_tmp(
    tokens, tmp_path, capsys
):
    run = tmp_path / "run"
    with file_size_limit(200_000):  # metrics and run.json fit, the checkpoint shard does not
        code = pretrain(tokens, run, "--steps", "2")
    assert code == 2
    error = one_error(capsys)
    assert ".step_00000002.tmp" in error and "File too large" in error
    assert not run.exists()  # a new run that left nothing to resume from is removed
    assert not list(tmp_path.rglob(".step_*.tmp")) and not list(tmp_path.iterdir())


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EFBIG])
def test_10_environment_errors_are_one_line_naming_the_path(
    tokens, tmp_path, capsys, monkeypatch, code
):
    import heartlm.tokens.pipeline as pipeline

    out = tmp_path / "tok2"
    out.mkdir()
    (out / "old").write_text("kept")
    monkeypatch.setattr(pipeline, "write_tokens", _raise(OSError(code, os.strerror(code))))
    store = _store(tmp_path)
    capsys.readouterr()
    assert main(["tokenize", str(store), "--out", str(out), "--overwrite", "--vocab", "4"]) == 2
    assert one_error(capsys) == f"heartlm: error: {out}: {os.strerror(code)}"
    assert (out / "old").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store", "tok2"]


def _store(tmp_path: Path) -> Path:
    """A small beat store written by heartlm's own writer."""
    from heartlm.store import TABLE_DTYPE, RecordEntry, StoreWriter

    rng = np.random.default_rng(0)
    writer = StoreWriter(tmp_path / "store", 250.0, 3, 5)
    table = np.zeros(40, TABLE_DTYPE)
    table["rr_prev"] = table["rr_next"] = 0.8
    writer.append(RecordEntry("r0", "synth", "x", 250.0, "MLII", 1000), rng.normal(size=(40, 8)),
                  table)  # fmt: skip
    writer.close()
    return tmp_path / "store"


# --- 11, 12, 13, 14. Damaged inputs --------------------------------------------------------


def test_11_out_of_range_label_codes_are_refused_on_load(pre, tokens, tmp_path, capsys):
    bad = make_tokens(tmp_path / "bad", aami_code=9)
    ft = tmp_path / "ft"
    assert finetune(pre, tokens, ft, "--steps", "2") == 0
    for argv in (
        ["finetune", str(pre), "--data", str(bad), "--out", str(tmp_path / "ft2"), *FT],
        ["evaluate", str(ft), str(bad)],
    ):
        capsys.readouterr()
        assert main(argv) == 2
        error = one_error(capsys)
        assert "aami.bin" in error and "label code 9" in error
    assert not (tmp_path / "ft2").exists() and not (tmp_path / ".ft2.partial").exists()


@pytest.mark.parametrize("name", ["tokens.json", "codebook.json", "config.json", "store.json"])
def test_12_json_that_is_not_utf8_is_one_line_naming_the_file(tokens, pre, tmp_path, capsys, name):
    src = tmp_path / "copy"
    if name == "config.json":
        shutil.copytree(pre, src)
        argv = ["finetune", str(src), "--data", str(tokens), "--out", str(tmp_path / "o"), *FT]
    elif name == "store.json":
        src = _store(tmp_path)
        argv = ["tokenize", str(src), "--out", str(tmp_path / "o")]
    else:
        shutil.copytree(tokens, src)
        argv = ["tokenize", str(_store(tmp_path)), "--out", str(tmp_path / "o"),
                "--codebook", str(src)] if name == "codebook.json" else \
               ["pretrain", str(src), "--out", str(tmp_path / "o"), *TINY]  # fmt: skip
    path = src / name
    path.write_bytes(path.read_bytes().replace(b'"', b'\xff"', 1))
    capsys.readouterr()
    assert main(argv) == 2
    error = one_error(capsys)
    assert name in error and ("UTF-8" in error or "utf-8" in error)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name", ["config.json", "finetune.json", "lineage.json"])
@pytest.mark.parametrize("value", ["[]", "null"])
def test_12_json_that_is_not_an_object_is_one_line_naming_the_file(
    tokens, pre, tmp_path, capsys, name, value
):
    ft = tmp_path / "ft"
    assert finetune(pre, tokens, ft, "--steps", "1") == 0
    commands = [["evaluate", str(ft), str(tokens)]]
    if name == "config.json":
        bad_pre = tmp_path / "pre"
        shutil.copytree(pre, bad_pre)
        (bad_pre / name).write_text(value)
        commands.append(["finetune", str(bad_pre), "--data", str(tokens),
                         "--out", str(tmp_path / "o"), *FT])  # fmt: skip
    (ft / name).write_text(value)
    for argv in commands:
        capsys.readouterr()
        assert main(argv) == 2, argv[0]
        error = one_error(capsys)
        assert name in error and "not a JSON object" in error
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "value",
    ["{}", '{"task": "beats", "window": "16"}', '{"task": "rhythm", "window": 16}',
     '{"task": "beats", "window": true}'],
)  # fmt: skip
def test_12_finetune_json_without_task_or_window_is_one_line(tokens, pre, tmp_path, capsys, value):
    ft = tmp_path / "ft"
    assert finetune(pre, tokens, ft, "--steps", "1") == 0
    (ft / "finetune.json").write_text(value)
    capsys.readouterr()
    assert main(["evaluate", str(ft), str(tokens)]) == 2
    assert "finetune.json" in one_error(capsys)


@pytest.mark.parametrize(("value", "says"), [('"x"', 'rr_window "x" is not an integer or null'),
                                             ("1", "rr_window 1 is below 2")])  # fmt: skip
def test_12_a_lineage_field_of_the_wrong_type_is_one_line(
    tokens, pre, tmp_path, capsys, value, says
):
    ft = tmp_path / "ft"
    assert finetune(pre, tokens, ft, "--steps", "1") == 0
    path = ft / "lineage.json"
    path.write_text(path.read_text().replace('"rr_window": null', f'"rr_window": {value}'))
    capsys.readouterr()
    assert main(["evaluate", str(ft), str(tokens)]) == 2
    assert one_error(capsys) == f"heartlm: error: {path}: {says}"


def test_12_weights_that_are_not_finite_are_refused_naming_the_tensor(
    tokens, pre, tmp_path, capsys
):
    from heartlm.tensorfile import load_tensors, save_tensors

    ft = tmp_path / "ft"
    assert finetune(pre, tokens, ft, "--steps", "1") == 0
    path = ft / "model.safetensors"
    state = load_tensors(path)
    name = sorted(state)[0]
    state[name] = state[name] * float("nan")
    save_tensors(state, path)
    capsys.readouterr()
    assert main(["evaluate", str(ft), str(tokens), "--all-records"]) == 2
    assert one_error(capsys) == f"heartlm: error: {path}: holds non-finite weights (tensor {name})"


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [("codebook.safetensors", b"\xff" * 8 + b"not a header", "header"),
     ("codebook.json", b"[]", "codebook.json is not a JSON object")],
)  # fmt: skip
def test_13_a_corrupt_codebook_file_is_one_line(tokens, tmp_path, capsys, name, content, says):
    book = tmp_path / "book"
    shutil.copytree(tokens, book)
    (book / name).write_bytes(content)
    argv = [
        "tokenize",
        str(_store(tmp_path)),
        "--out",
        str(tmp_path / "o"),
        "--codebook",
        str(book),
    ]
    assert main(argv) == 2
    assert says in one_error(capsys)
    assert not (tmp_path / "o").exists()


def test_14_report_on_a_header_only_results_csv_is_one_line(tmp_path, capsys):
    from heartlm.scale.results import write_results

    write_results(tmp_path / "results.csv", [])
    assert main(["report", str(tmp_path)]) == 2
    assert "only a header" in one_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]


# --- 16. What a killed process leaves ------------------------------------------------------


def test_16_staging_of_a_killed_writer_is_removed_and_a_cut_swap_restored(tmp_path, capsys):
    from heartlm.outdir import claimed, staged_dir

    out = tmp_path / "store"
    (tmp_path / ".store.tmp-4242-abcdef").mkdir()  # what a SIGKILLed ingest left
    (tmp_path / ".store.tmp-4242-abcdef" / "beats.f32").write_bytes(b"half")
    with staged_dir(out) as stage:
        (stage / "x").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
    # Killed between the two renames of a swap: the old result comes back.
    out.rename(tmp_path / ".store.old-4242")
    with claimed(out):
        pass
    assert (out / "x").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == [
        "store"
    ]


def test_16_an_output_that_is_a_symbolic_link_is_replaced_and_its_target_kept(tmp_path):
    """The link moved aside used to stay as `.OUT.old-PID` forever: rmtree cannot remove a
    link. Overwriting replaces the link itself; the folder it pointed to is not touched."""
    from heartlm.outdir import claimed, staged_dir

    target = tmp_path / "other"
    target.mkdir()
    (target / "keep").write_text("old")
    out = tmp_path / "link"
    out.symlink_to(target)
    with staged_dir(out, overwrite=True) as stage:
        (stage / "x").write_text("new")
    assert (out / "x").read_text() == "new" and not out.is_symlink()
    assert (target / "keep").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "other"]
    # A link that an earlier, cut-off swap left aside is removed by the next writer, and the
    # folder it pointed to stays.
    (tmp_path / ".link.old-4242").symlink_to(target)
    with claimed(out):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "other"]
    assert (target / "keep").read_text() == "old"


KILLED_PARENT = """
import os, sys, time
from pathlib import Path
import heartlm.ingest.pipeline as pipeline
from heartlm.scale.cell import Cell, Launch, Workload, run_launch

def slow(path, config):
    os.write(1, b"%d\\n" % os.getpid())  # one write: two workers' lines never interleave
    time.sleep(120)

if sys.argv[1] == "pool":
    pipeline._safe_ingest = slow
    for _ in pipeline._run_all([Path("a"), Path("b")], None, 2):
        pass
else:
    cell = Cell("pretrain", 32, 1, 1, "weak", "ddp", "gpu")
    code = "import os, time; print(os.getpid(), flush=True); time.sleep(120)"
    argv = [sys.executable, "-c", code]
    log = Path(sys.argv[2])
    run_launch(Launch(argv, {}, log.parent, log, 300, [], "x"), cell, Workload(1, 1, 0))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie waiting for its (dead) parent's reaper
        if Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z"):
            return False
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_16_pool_workers_and_cell_launches_die_with_a_killed_parent(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(KILLED_PARENT)
    for kind, expected in (("pool", 2), ("cell", 1)):
        log = tmp_path / f"{kind}.log"
        # A killed launcher cannot remove torchrun's temporary log folder: keep it in tmp_path.
        parent = subprocess.Popen([sys.executable, str(script), kind, str(log)],
                                  stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "TMPDIR": str(tmp_path)})  # fmt: skip
        if kind == "pool":
            lines = filter(None, (line.strip() for line in parent.stdout))
            pids = [int(next(lines)) for _ in range(expected)]
        else:
            pids = [int(_poll(log))]
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if _alive(p)], f"{kind}: children outlived their parent"


def _poll(log: Path) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = log.read_text() if log.is_file() else ""
        if text.strip():
            return text.split()[0]
        time.sleep(0.05)
    raise AssertionError(f"{log} stayed empty")


# --- 17. Every collective is entered by every rank, or the run fails in time --------------


def test_17_every_rank_gets_the_same_number_of_validation_batches():
    from heartlm.train.data import TokenData, WindowSampler

    lengths = [20, 20]
    data = TokenData(
        morph=np.full(40, NUM_SPECIAL, np.int32), rhythm=np.full(40, NUM_SPECIAL, np.int32),
        aami=np.zeros(40, np.int8), rhythm_label=np.ones(40, np.int8),
        boundaries=np.array([0, 20, 40]), records=["a", "b"], vocab_size=VOCAB,
        rhythm_vocab_size=NUM_SPECIAL + 4,
    )  # fmt: skip
    sampler = WindowSampler(data, window=16, stride=16)
    assert sampler.n_windows == len(lengths)
    counts = [len(list(sampler.eval_batches(4, rank, 4))) for rank in range(4)]
    assert counts == [1, 1, 1, 1]


def _four_ranks(rank: int, port: int, folder: str, tokens: str) -> None:
    """One of four gloo processes: the end of a run with fewer validation windows than ranks,
    then a collective that only rank 0 enters."""
    import datetime as dt

    import torch.distributed as dist

    from heartlm.model import HeartLM, model_config
    from heartlm.train.data import WindowSampler, load_tokens
    from heartlm.train.distributed import DistEnv, collective_errors
    from heartlm.train.loop import TrainConfig, train
    from heartlm.train.objectives import MaskedBeats

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=4, timeout=dt.timedelta(seconds=60))
    env = DistEnv(rank, 4, rank, torch.device("cpu"), "gloo")
    data = load_tokens(tokens)
    train_d, val_d = data.subset(list(range(1, 8))), data.subset([0])
    torch.manual_seed(0)
    cfg = model_config("tiny", vocab_size=VOCAB, rhythm_vocab_size=NUM_SPECIAL + 4, max_len=64)
    val = WindowSampler(val_d, 64, 64)  # one record, one window, four ranks
    tcfg = TrainConfig(steps=2, batch=8, val_every=0, val_batches=1, log_every=1, warmup_steps=1)
    result = train(tcfg, HeartLM(cfg), MaskedBeats(VOCAB), WindowSampler(train_d, 64, 64),
                   val, Path(folder), env)  # fmt: skip
    stuck = dist.new_group(timeout=dt.timedelta(seconds=1))
    outcome = f"val_loss {result.val_loss}"
    if rank == 0:
        start = time.monotonic()
        try:
            with collective_errors(env, 1.0):
                dist.all_reduce(torch.ones(1), group=stuck)
        except HeartlmError as exc:
            outcome += f"\n{time.monotonic() - start:.1f}\n{exc}"
    else:
        time.sleep(6)
    Path(folder, f"rank{rank}.txt").write_text(outcome)
    os._exit(0)  # the stuck group cannot be torn down cleanly


@pytest.mark.distributed
def test_17_four_ranks_end_a_run_with_fewer_validation_windows_than_ranks(tokens, tmp_path):
    import torch.multiprocessing as mp

    from heartlm.train.launch import free_port

    ctx = mp.start_processes(
        _four_ranks, args=(free_port(), str(tmp_path), str(tokens)), nprocs=4, join=False,
        start_method="fork",
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not ctx.join(timeout=1):
        assert time.monotonic() < deadline, "the four ranks hung"
    outcomes = [(tmp_path / f"rank{r}.txt").read_text().splitlines() for r in range(4)]
    assert len({o[0] for o in outcomes}) == 1 and "None" not in outcomes[0][0]
    seconds, message = float(outcomes[0][1]), outcomes[0][2]
    assert seconds < 5, "a stuck collective must end at --timeout"
    assert message.startswith("rank 0: a collective did not complete (--timeout 1 s)")


# --- 18. Lower severity --------------------------------------------------------------------


def test_18_afib_fine_tuning_on_data_without_afib_is_refused(pre, tmp_path, capsys):
    no_afib = make_tokens(tmp_path / "no_afib", afib=False)
    out = tmp_path / "ft"
    assert finetune(pre, no_afib, out, "--task", "afib", "--window", "8") == 2
    assert "no (AFIB episode" in one_error(capsys)
    assert not out.exists() and not (tmp_path / ".ft.partial").exists()


def test_18_a_failing_rank_is_reported_once_last():
    from heartlm.train.relay import Relay

    torchrun = textwrap.dedent("""\
        heartlm: tiny preset, 0.1 M parameters
        heartlm: error: /data/run: the cause
        [rank1]: Traceback (most recent call last):
        [rank1]:   File "x.py", line 1, in <module>
        [rank1]: RuntimeError: Connection closed by peer
        heartlm: error: /data/run: the cause
        W1126 08:34:22.593000 10942 api.py:1028] Sending process 10954 closing signal SIGTERM
        Traceback (most recent call last):
          File "torch/distributed/run.py", line 1, in <module>
        torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
        ============================================================
        heartlm FAILED
        ------------------------------------------------------------
        Root Cause (first observed failure):
        [0]:
          rank      : 0 (local_rank: 0)
          exitcode  : 2 (pid: 10953)
        ============================================================
        heartlm: after the report
        """)  # fmt: skip
    shown = io.StringIO()
    relay = Relay(out=shown)
    relay.run(torchrun.splitlines(keepends=True))
    assert relay.cause() == "/data/run: the cause" and relay.root_exitcode() == 2
    assert shown.getvalue() == (
        "heartlm: tiny preset, 0.1 M parameters\n"
        "W1126 08:34:22.593000 10942 api.py:1028] Sending process 10954 closing signal SIGTERM\n"
        "heartlm: after the report\n"
    )
    killed = Relay(out=io.StringIO())
    killed.run(["ChildFailedError\n", "=" * 30 + "\n", "Root Cause (first observed failure):\n",
                "  rank      : 1 (local_rank: 1)\n", "  exitcode  : -9 (pid: 3)  (SIGKILL)\n",
                "=" * 30 + "\n"])  # fmt: skip
    assert killed.cause() == "rank 1 was killed by SIGKILL"
    # two ranks' error lines that reached the pipe as one (seen once in CI) are still one cause
    joined = Relay(out=io.StringIO())
    joined.run(["heartlm: error: bad step" * 2 + "\n", "[rank1]: heartlm: error: bad step\n"])
    assert joined.cause() == "bad step" and joined.errors == ["bad step"]


@pytest.mark.distributed
def test_18_a_failure_in_every_rank_is_said_once_last(tokens, tmp_path):
    env = {**_clean_env(), "HEARTLM_FAULT_AT_STEP": "x"}
    done = subprocess.run(
        [sys.executable, "-m", "heartlm", "pretrain", str(tokens), "--out", str(tmp_path / "r"),
         *TINY, "--steps", "2", "--nproc", "2"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[-1] == "heartlm: error: HEARTLM_FAULT_AT_STEP='x' is not a step number"
    assert sum(line.startswith("heartlm: error:") for line in lines) == 1
    assert "Traceback" not in done.stderr and "ChildFailedError" not in done.stderr
    assert not list(tmp_path.iterdir())  # the run that failed at its start left nothing


def _clean_env() -> dict[str, str]:
    drop = ("HEARTLM_", "TORCHELASTIC", "LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(drop)},
            "OMP_NUM_THREADS": "1"}  # fmt: skip


def test_18_staged_folders_and_weights_follow_the_umask(tokens, tmp_path):
    from heartlm.outdir import staged_dir

    with staged_dir(tmp_path / "out") as stage:
        (stage / "f").write_text("x")
    assert pretrain(tokens, tmp_path / "run", "--steps", "1") == 0
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o777 & ~mask
    assert (tmp_path / "run" / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~mask


# --- 2b. Surviving an HPC time limit -------------------------------------------------------


@contextlib.contextmanager
def signal_after_step(step: int, signum: int = signal.SIGUSR1):
    """Send `signum` to this process as the metrics row of `step` is written: a real signal,
    at a known point. A no-op handler outside training keeps a late one harmless."""
    from heartlm.train.metrics import MetricsLogger

    real_log = MetricsLogger.log

    def log(self, record):
        real_log(self, record)
        if record["step"] == step:
            os.kill(os.getpid(), signum)

    before = signal.signal(signum, lambda *_: None)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(MetricsLogger, "log", log)
            yield
    finally:
        signal.signal(signum, before)


def test_2b_sigusr1_checkpoints_and_resume_ends_on_the_uninterrupted_loss(
    tokens, tmp_path, capsys, golden
):
    from heartlm.train.stopsignal import EXIT_STOPPED

    run = tmp_path / "run"
    with signal_after_step(5):
        assert pretrain(tokens, run, "--steps", "12", "--ckpt-every", "100") == EXIT_STOPPED
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step_00000006"]
    assert "continue with --resume" in capsys.readouterr().err
    assert pretrain(tokens, run, "--steps", "12", "--ckpt-every", "100", "--resume") == 0
    assert losses(run) == golden


def test_2b_finetune_stops_on_sigterm_and_resumes_to_the_same_result(pre, tokens, tmp_path):
    from heartlm.train.stopsignal import EXIT_STOPPED

    whole, split = tmp_path / "whole", tmp_path / "split"
    assert finetune(pre, tokens, whole, "--steps", "8") == 0
    with signal_after_step(3, signal.SIGTERM):
        assert finetune(pre, tokens, split, "--steps", "8") == EXIT_STOPPED
    assert not split.exists() and (tmp_path / ".split.partial" / "checkpoints").is_dir()
    assert finetune(pre, tokens, split, "--steps", "8", "--resume") == 0
    assert losses(split) == losses(whole)
    assert (
        json.loads((split / "finetune.json").read_text())["best"]
        == json.loads((whole / "finetune.json").read_text())["best"]
    )
    assert finetune(pre, tokens, split, "--steps", "8", "--resume") == 0  # finished: no-op


@pytest.mark.distributed
def test_2b_finetune_restarts_after_a_lost_rank_and_ends_on_the_golden_loss(pre, tokens, tmp_path):
    """torchrun (by hand, as the SLURM scripts run it) restarts the worker killed after
    step 3; it resumes from the step-2 checkpoint in the partial folder."""
    whole, restarted = tmp_path / "whole", tmp_path / "restarted"
    assert finetune(pre, tokens, whole, "--steps", "6") == 0
    env = {**_clean_env(), "HEARTLM_FAULT_AT_STEP": "3", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
           "PET_LOG_DIR": str(tmp_path / "torchrun-logs")}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
         "--max-restarts=1", "-m", "heartlm", "finetune", str(pre), "--data", str(tokens),
         "--out", str(restarted), *FT, "--steps", "6"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "injected fault" in done.stderr and "resumed from" in done.stderr
    assert losses(restarted) == pytest.approx(losses(whole), rel=1e-6)


@pytest.mark.distributed
def test_2b_sigusr1_to_a_multi_process_launch_reaches_the_workers(tokens, tmp_path, golden):
    """The chain a time limit takes: heartlm -> torchrun -> workers, checkpoint, exit 75."""
    from heartlm.train.stopsignal import EXIT_STOPPED

    run = tmp_path / "run"
    argv = [sys.executable, "-m", "heartlm", "pretrain", str(tokens), "--out", str(run), *TINY,
            "--steps", "12", "--ckpt-every", "100", "--nproc", "2"]  # fmt: skip
    with _slow_steps(0.3):
        proc = subprocess.Popen(argv, env=_clean_env(), stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not (run / "metrics.jsonl").is_file() or not (run / "metrics.jsonl").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_STOPPED, err[-3000:]
    stopped = [int(p.name[5:]) for p in (run / "checkpoints").iterdir()]
    assert len(stopped) == 1 and stopped[0] < 12
    assert pretrain(tokens, run, "--steps", "12", "--ckpt-every", "100", "--resume") == 0
    assert losses(run) == pytest.approx(golden, rel=1e-5)


@contextlib.contextmanager
def _slow_steps(seconds: float):
    """Workers sleep after each step (a callback added to those the environment asks for),
    so that the signal arrives mid-run on any machine."""
    sitecustom = Path(os.environ.get("TMPDIR", "/tmp")) / f"heartlm-slow-{os.getpid()}"
    sitecustom.mkdir(exist_ok=True)
    (sitecustom / "sitecustomize.py").write_text(
        textwrap.dedent(f"""\
        import time
        import heartlm.train.callbacks as callbacks
        _real = callbacks.from_environment
        class _Slow(callbacks.Callback):
            def on_step_end(self, step, rank):
                time.sleep({seconds})
        callbacks.from_environment = lambda: [_Slow(), *_real()]
        """)
    )
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(sitecustom), old]))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old
        shutil.rmtree(sitecustom, ignore_errors=True)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not found")
def test_2b_slurm_script_checkpoints_and_requeues_before_the_time_limit(tmp_path):
    assert main(["slurm", "--out", str(tmp_path / "s"), "--", "pretrain", "T", "--out", "R"]) == 0
    text = (tmp_path / "s" / "single_node.sbatch").read_text()
    assert "#SBATCH --signal=B:USR1@120\n" in text and "#SBATCH --requeue\n" in text
    assert "-m heartlm pretrain T --out R --resume &" in text
    bin_dir, record = tmp_path / "bin", tmp_path / "record.txt"
    bin_dir.mkdir()
    stubs = {  # srun stands for the job step: it records the SIGTERM it is sent
        "srun": f"trap 'echo TERM >> {record}; kill %1; exit 75' TERM\n"
        f"echo started >> {record}\nsleep 30 & wait",
        "scontrol": f'echo "$@" >> {record}',
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242",
           "SLURM_SUBMIT_DIR": str(tmp_path)}  # fmt: skip
    script = subprocess.Popen(["bash", str(tmp_path / "s" / "single_node.sbatch")], env=env,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 20
    while "started" not in (record.read_text() if record.is_file() else ""):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    script.send_signal(signal.SIGUSR1)
    _, err = script.communicate(timeout=30)
    assert script.returncode == 0, err
    assert record.read_text().splitlines() == ["started", "TERM", "requeue 4242"]
    assert "checkpointing, then requeueing job 4242" in err


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not found")
def test_2b_a_time_limit_signal_before_the_step_has_its_pid_still_requeues(tmp_path):
    """USR1 between `srun ... &` and `step=$!` (seen once in CI under load) found `step`
    unset: `set -u` stopped the handler and the job waited out its step instead of
    checkpointing. Sent here before srun starts, so the handler runs with no step."""
    assert main(["slurm", "--out", str(tmp_path / "s"), "--", "pretrain", "T", "--out", "R"]) == 0
    sbatch = tmp_path / "s" / "single_node.sbatch"
    text = sbatch.read_text()
    assert text.count("\nsrun ") == 1
    sbatch.write_text(text.replace("\nsrun ", "\nkill -USR1 $$\nsrun ", 1))
    bin_dir, record = tmp_path / "bin", tmp_path / "record.txt"
    bin_dir.mkdir()
    stubs = {"srun": "exec sleep 30", "scontrol": f'echo "$@" >> {record}'}
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242",
           "SLURM_SUBMIT_DIR": str(tmp_path)}  # fmt: skip
    start = time.monotonic()
    done = subprocess.run(["bash", str(sbatch)], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "unbound variable" not in done.stderr
    assert "checkpointing, then requeueing job 4242" in done.stderr
    assert record.read_text().splitlines() == ["requeue 4242"]
    assert time.monotonic() - start < 20, "the step was waited out, not stopped"


# --- 19. Found by a fault campaign (twenty-second session) --------------------------------


def _perturbed_codebook(folder: Path) -> None:
    """A readable codebook in `folder` that is not the one its tokens were made with."""
    from heartlm.tokens.codebook import Codebook

    book = Codebook.load(folder)
    book.centroids = book.centroids + 1.0
    book.save(folder)


@pytest.mark.parametrize("damage", ["unreadable", "foreign"])
def test_19_finetune_refuses_a_codebook_its_run_could_not_carry_before_training(
    pre, tokens, tmp_path, capsys, damage
):
    """The run copies the codebook to tokenize new records: a broken or foreign one used to
    be copied and only failed (or, foreign, misled) in a later evaluate."""
    data = tmp_path / "data"
    shutil.copytree(tokens, data)
    if damage == "unreadable":
        (data / "codebook.json").write_text("x")
    else:
        _perturbed_codebook(data)
    assert finetune(pre, data, tmp_path / "ft", "--steps", "2") == 2
    line = one_error(capsys)
    assert str(data) in line
    assert "not the one its tokens were made with" in line or damage == "unreadable"
    assert not (tmp_path / "ft").exists() and not (tmp_path / ".ft.partial").exists()


def test_19_a_new_run_does_not_clear_a_stopped_runs_checkpoints_unasked(pre, tokens, tmp_path,
                                                                         capsys):  # fmt: skip
    from heartlm.train.stopsignal import EXIT_STOPPED

    run, partial = tmp_path / "ft", tmp_path / ".ft.partial"
    with signal_after_step(3, signal.SIGTERM):
        assert finetune(pre, tokens, run, "--steps", "8") == EXIT_STOPPED
    kept = snapshot(partial / "checkpoints")
    capsys.readouterr()
    assert finetune(pre, tokens, run, "--steps", "8") == 2
    assert "--resume" in one_error(capsys)
    assert snapshot(partial / "checkpoints") == kept
    assert finetune(pre, tokens, run, "--steps", "8", "--overwrite") == 0  # asked: start again
    assert not partial.exists() and (run / "model.safetensors").is_file()


def test_19_every_rank_of_a_bare_torchrun_refuses_a_stopped_runs_checkpoints(tmp_path, monkeypatch):
    """Under torchrun without heartlm's launcher only rank 0 owns the run and prepares it;
    the other ranks must refuse too, or they train on while rank 0 has stopped."""
    from heartlm.errors import HeartlmError
    from heartlm.train import rundir

    step = tmp_path / ".ft.partial" / "checkpoints" / "step_00000002"
    step.mkdir(parents=True)
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(HeartlmError, match="--resume"):
        rundir.plan_finetune(tmp_path / "ft", False, False, "finetune.json")
    assert rundir.plan_finetune(tmp_path / "ft", True, False, "finetune.json").resume
    monkeypatch.setenv("RANK", "0")
    plan = rundir.plan_finetune(tmp_path / "ft", False, False, "finetune.json")
    with pytest.raises(HeartlmError, match="--resume"):
        rundir.prepare(plan)  # the owner refuses under the lock
    assert step.is_dir()


@pytest.mark.parametrize("step", ["copy_lineage", "swap_in"])
def test_20_a_run_that_fails_while_finishing_keeps_its_checkpoints_to_resume(
    pre, tokens, tmp_path, capsys, monkeypatch, step
):
    """The checkpoints go last, once the run is in place: a failure while the folder is made
    self-contained (its codebook copied) or renamed must not cost the training."""
    from heartlm.errors import HeartlmError
    from heartlm.finetune import pipeline

    def failing(*args):
        raise HeartlmError("No space left on device", tmp_path)

    monkeypatch.setattr(pipeline, step, failing)
    run, partial = tmp_path / "ft", tmp_path / ".ft.partial"
    assert finetune(pre, tokens, run, "--steps", "4") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "No space left" in err[-1] and "Traceback" not in "\n".join(err)
    assert any("continue it with --resume" in line for line in err[:-1])
    assert any((partial / "checkpoints").glob("step_*")) and not run.exists()
    monkeypatch.undo()
    assert finetune(pre, tokens, run, "--steps", "4", "--resume") == 0
    assert (run / "model.safetensors").is_file() and not (run / "checkpoints").exists()
    assert not partial.exists()


def test_19_a_stopped_overwrite_says_how_to_continue_it_and_resume_alone_refuses(
    pre, tokens, tmp_path, capsys
):
    """`--resume` alone found the old finished run and said "nothing to do"."""
    from heartlm.train.stopsignal import EXIT_STOPPED

    run = tmp_path / "ft"
    assert finetune(pre, tokens, run, "--steps", "4") == 0
    old = snapshot(run)
    capsys.readouterr()
    with signal_after_step(2, signal.SIGTERM):
        assert finetune(pre, tokens, run, "--steps", "8", "--overwrite") == EXIT_STOPPED
    assert "continue with --resume --overwrite" in capsys.readouterr().err
    assert finetune(pre, tokens, run, "--steps", "8", "--resume") == 2
    assert "--resume --overwrite" in one_error(capsys)
    assert snapshot(run) == old
    assert finetune(pre, tokens, run, "--steps", "8", "--resume", "--overwrite") == 0
    assert losses(run)[8] and snapshot(run) != old


def test_19_a_stopped_pretrain_overwrite_says_how_to_continue_it(tokens, tmp_path, capsys):
    """`--resume` alone continues the run in RUN itself (a torchrun restart or a requeue of a
    run that writes there must not be refused); the stopped replacement needs --overwrite."""
    from heartlm.train.stopsignal import EXIT_STOPPED

    run = tmp_path / "run"
    assert pretrain(tokens, run, "--steps", "4", "--stop-at", "2") == 0
    with signal_after_step(2, signal.SIGTERM):
        assert pretrain(tokens, run, "--steps", "8", "--overwrite") == EXIT_STOPPED
    assert "continue with --resume --overwrite" in capsys.readouterr().err
    assert pretrain(tokens, run, "--steps", "4", "--resume") == 0  # RUN's own run, to its end
    assert pretrain(tokens, run, "--steps", "8", "--resume", "--overwrite") == 0
    assert max(losses(run)) == 8 and not (tmp_path / ".run.partial").exists()


@pytest.mark.parametrize(
    "flags",
    [("--beat-mlp", "8", "--beat-mlp-bins", "100000"), ("--epochs", "nan"), ("--epochs", "inf"),
     ("--seed", "-1"), ("--seed", "99999999999999999999999"),
     ("--local-stats", "99999999999999999999999")],
)  # fmt: skip
def test_19_out_of_range_finetune_numbers_are_one_line(pre, tokens, tmp_path, capsys, flags):
    assert FT[-2:] == ("--seed", "1")
    args = FT[:-2] if "--seed" in flags else FT
    argv = ["finetune", str(pre), "--data", str(tokens), "--out", str(tmp_path / "ft"), *args]
    assert main([*argv, *(["--steps", "2"] if "--epochs" not in flags else []), *flags]) == 2
    assert flags[-2] in one_error(capsys)
    assert not (tmp_path / "ft").exists()


def test_19_tokenize_names_the_seed_flag(tmp_path, capsys):
    assert (
        main(["tokenize", str(_store(tmp_path)), "--out", str(tmp_path / "o"), "--seed", "-1"]) == 2
    )
    assert "--seed" in one_error(capsys)


@pytest.mark.parametrize("window", [0, 999])
def test_19_evaluate_refuses_a_window_its_model_cannot_take(pre, tokens, tmp_path, capsys, window):
    run = tmp_path / "ft"
    assert finetune(pre, tokens, run, "--steps", "2") == 0
    info = json.loads((run / "finetune.json").read_text())
    (run / "finetune.json").write_text(json.dumps({**info, "window": window}))
    capsys.readouterr()
    assert main(["evaluate", str(run), str(tokens), "--device", "cpu", "--all-records"]) == 2
    assert "finetune.json" in one_error(capsys)


def test_19_an_ensemble_that_names_a_run_twice_is_refused(pre, tokens, tmp_path, capsys):
    run = tmp_path / "ft"
    assert finetune(pre, tokens, run, "--steps", "2") == 0
    for ensemble in ([str(run)], [str(tmp_path / "other"), str(tmp_path / "other")]):
        if not (tmp_path / "other").exists():
            shutil.copytree(run, tmp_path / "other")
        capsys.readouterr()
        argv = ["evaluate", str(run), str(tokens), "--device", "cpu", "--ensemble", *ensemble]
        assert main(argv) == 2
        assert "twice" in one_error(capsys)
    capsys.readouterr()
    argv = [
        "evaluate",
        str(run),
        str(tokens),
        "--device",
        "cpu",
        "--ensemble",
        str(tmp_path / "nope"),
    ]
    assert main(argv) == 2
    assert "does not exist" in one_error(capsys)


def test_19_a_config_key_of_a_section_is_named_with_its_section(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("epochs: 3\n")
    assert main(["finetune", "R", "--data", "T", "--out", "O", "--config", str(config)]) == 2
    assert "did you mean 'train.epochs'" in one_error(capsys)


def test_19_a_token_folder_without_tokens_json_is_named_as_such(pre, tokens, tmp_path, capsys):
    run, data = tmp_path / "ft", tmp_path / "data"
    assert finetune(pre, tokens, run, "--steps", "2") == 0
    shutil.copytree(tokens, data)
    (data / "tokens.json").unlink()
    capsys.readouterr()
    assert main(["evaluate", str(run), str(data), "--device", "cpu"]) == 2
    assert "no tokens.json" in one_error(capsys)


def test_19_labels_that_miss_a_class_are_said(pre, tokens, tmp_path, capsys):
    assert finetune(pre, tokens, tmp_path / "ft", "--steps", "2", "--label-fraction", "1e-6") == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "kept no label" in line]
    assert len(warned) == 1 and str(tokens) in warned[0], warned
    assert finetune(pre, tokens, tmp_path / "all", "--steps", "2") == 0
    assert "kept no label" not in capsys.readouterr().err


def test_19_synth_refuses_a_seed_beyond_the_generators(tmp_path, capsys):
    assert main(["synth", str(tmp_path / "s"), "--records", "1", "--seed", str(2**40)]) == 2
    assert "--seed" in one_error(capsys)
    assert not (tmp_path / "s").exists()


def test_19_an_ensemble_member_whose_model_cannot_take_the_window_is_one_line(
    pre, tokens, tmp_path, capsys
):
    short_pre, member, run = tmp_path / "pre8", tmp_path / "member", tmp_path / "ft"
    assert pretrain(tokens, short_pre, "--steps", "2", "--window", "8") == 0
    assert finetune(pre, tokens, run, "--steps", "2") == 0
    args = [a if a != "16" else "8" for a in FT]  # FT's --window 16
    argv = ["finetune", str(short_pre), "--data", str(tokens), "--out", str(member), *args]
    assert main([*argv, "--steps", "2"]) == 0
    info = json.loads((member / "finetune.json").read_text())
    window = json.loads((run / "finetune.json").read_text())["window"]
    (member / "finetune.json").write_text(json.dumps({**info, "window": window}))
    capsys.readouterr()
    argv = ["evaluate", str(run), str(tokens), "--device", "cpu", "--ensemble", str(member)]
    assert main(argv) == 2
    assert "more than the model's" in one_error(capsys)
