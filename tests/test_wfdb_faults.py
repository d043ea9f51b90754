"""Damaged or odd WFDB input to `qrs` and `ingest`: one line naming the file, nothing written.

Truncated annotation files, header numbers that wfdb would silently replace, a lead the
record lacks, a record name wfdb cannot read, a reference without beats, a worker killed,
a record named twice, Ctrl-C, every record skipped, a reference extension no record has.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import wfdb

from heartlm.cli import main
from heartlm.errors import HeartlmError
from heartlm.ingest import IngestConfig
from heartlm.labelled.tokens import token_folder
from heartlm.store import BeatStore
from heartlm.synth import synth_record


def _record(folder: Path, name: str, seconds: float = 20, fs: float = 250) -> Path:
    """A one-lead record (MLII) with its beat and rhythm annotations."""
    rec = synth_record(seconds / 60, fs, 4, leads=1, noise=0.3)
    folder.mkdir(parents=True, exist_ok=True)
    wfdb.wrsamp(name, fs=fs, units=["mV"], sig_name=["MLII"], p_signal=rec.signal, fmt=["16"],
                adc_gain=[1000.0], baseline=[0], write_dir=str(folder))  # fmt: skip
    wfdb.wrann(name, "atr", rec.ann_sample, rec.ann_symbol, aux_note=rec.ann_aux,
               write_dir=str(folder))  # fmt: skip
    return folder / name


def _error(capsys, *argv: str) -> str:
    """The one error line of a failing command (and no traceback)."""
    capsys.readouterr()
    assert main([*argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("heartlm: error:"), err
    return err[0]


def _qrs_and_ingest_refuse(capsys, tmp_path: Path, record: Path, *parts: str) -> None:
    for argv in (
        ["qrs", str(record), "--workers", "1"],
        ["ingest", str(record), "--out", str(tmp_path / "out"), "--workers", "1"],
    ):
        line = _error(capsys, *argv)
        assert all(p in line for p in parts), line
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


# ---------- truncated annotation files ----------


@pytest.mark.parametrize(
    "cut, problem",
    [
        (lambda b: b[:-2], "no end-of-file marker"),
        (lambda b: b[: len(b) // 4 * 2], "truncated"),
        (lambda b: b[:-3], "ends inside an annotation"),
    ],
    ids=["end-marker", "half", "odd"],
)
def test_truncated_annotation_file(tmp_path, capsys, cut, problem):
    rec = _record(tmp_path / "src", "rec")
    atr = rec.parent / "rec.atr"
    atr.write_bytes(cut(atr.read_bytes()))
    _qrs_and_ingest_refuse(capsys, tmp_path, rec, "rec.atr", problem)
    # Under --skip-bad it is a skipped record, with the reason in run.json.
    _record(tmp_path / "src", "fine")
    out = tmp_path / "store"
    assert main(["ingest", str(rec.parent), "--out", str(out), "--skip-bad", "--workers", "1"]) == 0
    info = json.loads((out / "run.json").read_text())
    assert [Path(s["record"]).name for s in info["skipped"]] == ["rec.atr"]
    assert problem in info["skipped"][0]["problem"]
    assert [r.name for r in BeatStore(out).records] == ["fine"]


def test_intact_annotation_files_still_read(tmp_path):
    """wfdb's own files: with rhythm notes, and with a time resolution (read by wfdb.rdann)."""
    from heartlm.ecg.wfdbio import read_annotations

    rec = _record(tmp_path, "rec")
    ann = wfdb.rdann(str(rec), "atr")
    ours = read_annotations(rec, "atr")
    np.testing.assert_array_equal(ours.sample, ann.sample)
    assert ours.symbol == ann.symbol and ours.aux_note == ann.aux_note
    wfdb.wrann("rec", "hr", ann.sample * 2, ann.symbol, fs=500, write_dir=str(tmp_path))
    hr = read_annotations(rec, "hr")
    assert hr.fs == 500 and np.array_equal(hr.sample, ann.sample * 2)


# ---------- header numbers ----------


def _edit_signal_line(text: str, field: int, value: str) -> str:
    record_line, signal_line, *rest = text.splitlines()
    fields = signal_line.split()
    fields[field] = value
    return "\n".join([record_line, " ".join(fields), *rest]) + "\n"


def _edit_record_line(text: str, field: int, value: str) -> str:
    record_line, *rest = text.splitlines()
    fields = record_line.split()
    fields[field] = value
    return "\n".join([" ".join(fields), *rest]) + "\n"


@pytest.mark.parametrize(
    "edit, problem",
    [
        (lambda t: _edit_record_line(t, 2, "abc"), "sampling rate 'abc'"),
        (lambda t: _edit_record_line(t, 2, "0"), "sampling rate '0'"),
        (lambda t: _edit_record_line(t, 1, "2"), "says 2 signals but has 1"),
        (lambda t: _edit_record_line(t, 3, "-5"), "number of samples '-5'"),
        (lambda t: _edit_signal_line(t, 2, "abc/mV"), "ADC gain 'abc/mV'"),
        (lambda t: _edit_signal_line(t, 2, "nan(0)/mV"), "ADC gain 'nan(0)/mV'"),
        (lambda t: _edit_signal_line(t, 2, "1e-300/mV"), "ADC gain '1e-300/mV', so small"),
        (lambda t: _edit_signal_line(t, 2, "-1e-300/mV"), "ADC gain '-1e-300/mV', so small"),
        (lambda t: _edit_signal_line(t, 1, "99"), "format '99'"),
        (lambda t: _edit_signal_line(t, 1, "16x0"), "0 samples per frame"),
        (lambda t: "", "no record line"),
    ],
    ids=[
        "fs-text",
        "fs-zero",
        "n-sig",
        "length",
        "gain-text",
        "gain-nan",
        "gain-tiny",
        "gain-tiny-negative",
        "format",
        "spf",
        "empty",
    ],
)
def test_malformed_header_numbers_blame_the_header(tmp_path, capsys, edit, problem):
    rec = _record(tmp_path / "src", "rec")
    hea = rec.parent / "rec.hea"
    hea.write_text(edit(hea.read_text()))
    for argv in (
        ["qrs", str(rec), "--workers", "1"],
        ["ingest", str(rec), "--out", str(tmp_path / "out"), "--workers", "1"],
    ):
        line = _error(capsys, *argv)
        assert "rec.hea" in line and problem in line and ".dat" not in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("gain", ["0/mV", "-200/mV", "1e-400/mV"])
def test_an_uncalibrated_or_negative_gain_is_read_as_wfdb_reads_it(tmp_path, gain):
    """Gain 0 (and a gain that underflows to 0) is WFDB's uncalibrated 200; a negative gain
    inverts the lead. Neither is refused by the check for gains too small to hold."""
    rec = _record(tmp_path / "src", "rec")
    hea = rec.parent / "rec.hea"
    hea.write_text(_edit_signal_line(hea.read_text(), 2, gain))
    assert main(["ingest", str(rec), "--out", str(tmp_path / "out"), "--workers", "1"]) == 0


# ---------- leads ----------


def test_a_lead_the_record_lacks_is_refused_unless_fallbacks_are_given(tmp_path, capsys):
    rec = _record(tmp_path / "src", "rec")
    line = _error(capsys, "ingest", str(rec), "--out", str(tmp_path / "out"), "--lead", "V5")
    assert "rec.hea" in line and "--lead V5: no such lead (has MLII)" in line
    assert not (tmp_path / "out").exists()
    out = tmp_path / "store"
    assert main(["ingest", str(rec), "--out", str(out), "--lead", "V5,MLII", "--workers", "1"]) == 0
    assert json.loads((out / "run.json").read_text())["counts"]["lead_fallbacks"] == 1
    # evaluate ingests raw records with the run's settings and the --lead it was given
    lineage = {"ingest": IngestConfig(workers=1).to_dict()}
    with (
        pytest.raises(HeartlmError, match="--lead V5: no such lead"),
        token_folder(rec.parent, tmp_path, lineage, {"lead": "V5"}),
    ):
        pass


# ---------- names, references, workers ----------


@pytest.mark.parametrize(
    ("name", "shown"),
    [(b"r\xe9c", "r\\xe9c"), ("räc".encode(), "räc")],  # Latin-1 bytes escaped; UTF-8 as is
)
def test_non_ascii_record_name_is_named_not_called_missing(tmp_path, capsys, name, shown):
    rec = _record(tmp_path / "src", "rec")
    folder = os.fsencode(rec.parent)
    for ext in (b".hea", b".dat", b".atr"):
        os.rename(os.fsencode(rec) + ext, folder + b"/" + name + ext)
    header = folder + b"/" + name + b".hea"
    with open(header, "rb") as f:
        text = f.read().replace(b"rec", name)
    with open(header, "wb") as f:
        f.write(text)
    for argv in (
        ["qrs", str(rec.parent), "--workers", "1"],
        ["ingest", str(rec.parent), "--out", str(tmp_path / "out"), "--workers", "1"],
    ):
        line = _error(capsys, *argv)
        assert "not ASCII" in line and "missing" not in line and f"'{shown}'" in line, line


def test_qrs_counts_only_false_positives_against_an_empty_reference(tmp_path, capsys):
    rec = _record(tmp_path, "rec")
    wfdb.wrann("rec", "atr", np.array([10]), ["+"], aux_note=["(N"], write_dir=str(tmp_path))
    capsys.readouterr()
    assert main(["qrs", str(rec), "--json", "--workers", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["records"]
    assert row["n_reference"] == 0 and row["se"] is None and "no beats" in row["note"]
    assert row["fp"] == row["n_detected"] > 10 and out["n_scored"] == 1
    assert out["gross"]["se"] is None and out["gross"]["fp"] == row["fp"]
    assert main(["qrs", str(rec), "--workers", "1"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[1:4] == ["-", "0.0000", "0.0000"] and "gross" in table[2]
    assert main(["qrs", str(rec), "--json", "--workers", "1", "--span", "annotated"]) == 0
    out = json.loads(capsys.readouterr().out)  # no annotated span to score
    assert out["gross"] is None and "no beats" in out["records"][0]["unscored"]


FORKED_WORKERS = pytest.mark.skipif(
    multiprocessing.get_start_method() != "fork", reason="patches the workers through fork"
)


@FORKED_WORKERS
@pytest.mark.parametrize("command", ["qrs", "ingest"])
def test_a_killed_worker_is_one_line(tmp_path, capsys, monkeypatch, command):
    from heartlm.ingest import pipeline
    from heartlm.qrs import cli as qrs_cli

    module, name = (qrs_cli, "process_record") if command == "qrs" else (pipeline, "ingest_record")
    real = getattr(module, name)

    def killed_on_victim(path, config):
        if path.name == "victim":
            os.kill(os.getpid(), signal.SIGKILL)
        return real(path, config)

    monkeypatch.setattr(module, name, killed_on_victim)
    for n in ("a", "victim", "z"):
        _record(tmp_path / "src", n, seconds=10)
    argv = [command, str(tmp_path / "src"), "--workers", "2"]
    if command == "ingest":
        argv += ["--out", str(tmp_path / "out")]
    line = _error(capsys, *argv)
    assert "victim" in line and "worker process died" in line
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


# ---------- a record named twice, Ctrl-C, nothing left, a reference no record has ----------


def _argv(command: str, tmp_path: Path, *inputs: str | Path) -> list[str]:
    """`qrs` (JSON) or `ingest` (into tmp_path/out) of `inputs`, in this process."""
    tail = ["--out", str(tmp_path / "out")] if command == "ingest" else ["--json"]
    return [command, *map(str, inputs), "--workers", "1", *tail]


def _records_read(command: str, tmp_path: Path, stdout: str) -> list[str]:
    if command == "qrs":
        return [Path(r["record"]).name for r in json.loads(stdout)["records"]]
    return [r.name for r in BeatStore(tmp_path / "out").records]


def _nothing_written(tmp_path: Path) -> None:
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


@pytest.mark.parametrize("command", ["qrs", "ingest"])
def test_a_record_named_twice_is_read_once(tmp_path, capsys, command):
    src = tmp_path / "src"
    rec = _record(src, "rec", seconds=10)
    _record(src, "other", seconds=10)
    shutil.copy(f"{rec}.atr", f"{rec}.qrs")  # another reference, as LUDB's `.ii`
    (tmp_path / "link").symlink_to(src)
    # What `src/rec*` expands to, the folder, the bare name, and the same through a link.
    named = [src, rec, *(f"{rec}.{ext}" for ext in ("hea", "dat", "atr", "qrs"))]
    named.append(tmp_path / "link" / "rec")
    capsys.readouterr()
    assert main(_argv(command, tmp_path, *named)) == 0
    out, err = capsys.readouterr()
    assert _records_read(command, tmp_path, out) == ["other", "rec"]
    verb = "scored" if command == "qrs" else "ingested"
    assert err.strip().splitlines()[0] == (
        f"heartlm: {command}: 6 duplicate inputs named records already listed; "
        f"each record is {verb} once"
    )


SLOW_FIRST_RECORD = """
import os, sys, time
from heartlm.cli import main
from heartlm.ingest import pipeline
from heartlm.qrs import cli as qrs_cli

module, name = (qrs_cli, "process_record") if sys.argv[1] == "qrs" else (pipeline, "ingest_record")
real = getattr(module, name)

def slow_first(path, config):
    if path.name == "a":  # one worker stays in here; the other reads the rest and idles
        os.write(1, f"reading a in {os.getpid()}\\n".encode())
        time.sleep(float(os.environ.get("SLOW_S", "1")))
    result = real(path, config)
    if path.name != "a":
        os.write(1, b"read\\n")
    return result

setattr(module, name, slow_first)
sys.exit(main(sys.argv[1:]))
"""


def _read_lines(fd: int, n: int, timeout_s: float = 60) -> bytes:
    """What came through `fd` (a pipe) once it holds `n` lines."""
    got, deadline = b"", time.monotonic() + timeout_s
    while got.count(b"\n") < n:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"only {got!r} after {timeout_s} s"
        got += os.read(fd, 4096)
    return got


def _slow_first_record(tmp_path: Path, command: str, slow_s: float, *extra: str):
    """`command` of records a to d with 2 workers, in a new session; reading `a` takes
    `slow_s` seconds."""
    for name in "abcd":
        _record(tmp_path / "src", name, seconds=10)
    script = tmp_path / "run.py"
    script.write_text(SLOW_FIRST_RECORD)
    argv = [sys.executable, str(script), command, str(tmp_path / "src"), "--workers", "2"]
    if command == "ingest":
        argv += ["--out", str(tmp_path / "out")]
    return subprocess.Popen([*argv, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "SLOW_S": str(slow_s)},
                            start_new_session=True)  # fmt: skip


def _kill_left(proc: subprocess.Popen) -> None:
    """A run that outlived its test goes, with its workers (its own process group)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture
def ctrl_c_deliverable():
    """SIGINT handled as Python's default for the test, and so by the runs it starts: a shell
    starts a background job with SIGINT ignored, which a child inherits and keeps."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _interrupted(proc: subprocess.Popen, err: bytes) -> None:
    """Exit 130 and one line on stderr: no worker's traceback."""
    text = err.decode()
    assert proc.returncode == 130, text
    assert text.strip().splitlines() == ["heartlm: interrupted"], text


@FORKED_WORKERS
@pytest.mark.parametrize("command", ["qrs", "ingest"])
def test_ctrl_c_under_workers_is_one_line(tmp_path, command, ctrl_c_deliverable):
    proc = _slow_first_record(tmp_path, command, slow_s=1)
    try:
        _read_lines(proc.stdout.fileno(), 4)  # one worker in record a, the other done
        time.sleep(0.2)  # and idle: where a worker that took the Ctrl-C printed a traceback
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches every process
        os.kill(proc.pid, signal.SIGINT)  # and a second one, as `timeout -s INT` sends
        _, err = proc.communicate(timeout=60)
    finally:
        _kill_left(proc)
    _interrupted(proc, err)
    _nothing_written(tmp_path)


@FORKED_WORKERS
@pytest.mark.parametrize("command", ["qrs", "ingest"])
def test_a_second_ctrl_c_ends_the_records_being_read(tmp_path, command, ctrl_c_deliverable):
    """The first Ctrl-C waits for the records being read (a Holter record takes minutes);
    a second one ends their workers at once: one line, and an earlier result kept."""
    previous = tmp_path / "out" / "kept"
    previous.parent.mkdir()
    previous.write_text("an earlier store")
    extra = ["--overwrite"] if command == "ingest" else []
    proc = _slow_first_record(tmp_path, command, 600, *extra)
    try:
        got = _read_lines(proc.stdout.fileno(), 4)  # one worker in record a, the other done
        worker = int(got.split(b"reading a in ")[1].split()[0])
        time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(1.0)
        assert proc.poll() is None  # waiting for record a
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)  # record a had ten minutes to go
    finally:
        _kill_left(proc)
    _interrupted(proc, err)
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)  # ended and reaped, not left to die with its parent
    assert previous.read_text() == "an earlier store"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "run.py", "src"]


@pytest.mark.parametrize("command", ["qrs", "ingest"])
def test_ctrl_c_in_process_waits_for_the_record_being_read(
    tmp_path, capsys, monkeypatch, command, ctrl_c_deliverable
):
    """A Ctrl-C inside a record (where a C library's callback could swallow it) is held
    until the record is read, then stops the run."""
    from heartlm.ingest import pipeline
    from heartlm.qrs import cli as qrs_cli

    module, name = (qrs_cli, "process_record") if command == "qrs" else (pipeline, "ingest_record")
    real, read = getattr(module, name), []

    def interrupted_inside(path, config):
        os.kill(os.getpid(), signal.SIGINT)
        result = real(path, config)
        read.append(path.name)
        return result

    monkeypatch.setattr(module, name, interrupted_inside)
    for n in ("a", "b"):
        _record(tmp_path / "src", n, seconds=10)
    capsys.readouterr()
    assert main(_argv(command, tmp_path, tmp_path / "src")) == 130
    assert read == ["a"]
    assert capsys.readouterr().err == "heartlm: interrupted\n"
    _nothing_written(tmp_path)


@pytest.mark.parametrize("command", ["qrs", "ingest"])
def test_every_record_skipped_is_an_error(tmp_path, capsys, command):
    rec = _record(tmp_path / "bad", "rec", seconds=10)
    os.truncate(f"{rec}.dat", 100)
    capsys.readouterr()
    assert main([*_argv(command, tmp_path, rec.parent), "--skip-bad"]) == 2
    captured = capsys.readouterr()
    skipping, error = captured.err.strip().splitlines()
    assert skipping.startswith(f"heartlm: skipping {rec}.dat: truncated")
    assert error == f"heartlm: error: {rec.parent}: all 1 records were skipped (see above)"
    assert captured.out == ""
    _nothing_written(tmp_path)


@pytest.mark.parametrize("command", ["qrs", "ingest"])
@pytest.mark.parametrize("ext", ["zzz", "atr"])
def test_a_named_reference_extension_no_record_has_is_refused(tmp_path, capsys, command, ext):
    """A misspelt `--annotations` would detect every record silently; `atr` given is named
    too, where leaving it out detects such a folder (EDF, Holter) without a word."""
    for n in ("a", "b"):
        record = _record(tmp_path / "src", n, seconds=10)
        if ext == "atr":
            os.unlink(f"{record}.atr")
    line = _error(capsys, *_argv(command, tmp_path, tmp_path / "src"), "--annotations", ext)
    assert line.startswith(
        f"heartlm: error: {tmp_path / 'src'}: no record has a .{ext} annotation file "
        f"(--annotations {ext}"
    ), line
    _nothing_written(tmp_path)
    if ext == "atr":
        assert main(_argv(command, tmp_path, tmp_path / "src")) == 0
        assert "annotation file" not in capsys.readouterr().err


def test_qrs_names_each_record_without_the_named_reference(tmp_path, capsys):
    scored = _record(tmp_path / "src", "a", seconds=10)
    _record(tmp_path / "src", "b", seconds=10)
    shutil.copy(f"{scored}.atr", f"{scored}.qrs")
    capsys.readouterr()
    assert main(_argv("qrs", tmp_path, tmp_path / "src", "--annotations", "qrs")) == 0
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        "heartlm: qrs: 1 of 2 records have no .qrs annotation file; they are detected, not "
        f"scored: {tmp_path / 'src' / 'b'}"
    ]
    a, b = json.loads(out)["records"]
    assert a["tp"] > 10 and "tp" not in b


def test_ingest_says_once_which_records_are_detected(tmp_path, capsys):
    for n in ("a", "b", "c"):
        _record(tmp_path / "src", n, seconds=10)
    for n in ("b", "c"):
        os.unlink(tmp_path / "src" / f"{n}.atr")
    capsys.readouterr()
    assert main(_argv("ingest", tmp_path, tmp_path / "src")) == 0
    err = capsys.readouterr().err.strip().splitlines()
    src = tmp_path / "src"
    assert err[0] == (
        "heartlm: ingest: 2 of 3 records have no .atr annotation file; their beats are "
        f"detected: {src / 'b'}, {src / 'c'}"
    )
    info = json.loads((tmp_path / "out" / "run.json").read_text())
    assert info["counts"]["records"] == 3 and info["counts"]["records_detected"] == 2


# ---------- a fault campaign's findings (twenty-third session) ----------


@pytest.mark.parametrize(
    "samples, problem",
    [(lambda s: np.r_[s[:5], s[3], s[5:]], "must not go backwards"),
     (lambda s: np.r_[s[:5], s[4], s[5:]], "two beats are annotated at tick")],
    ids=["backwards", "twice"],
)  # fmt: skip
def test_annotations_out_of_order_are_refused(tmp_path, capsys, samples, problem):
    """A beat annotated twice, or a time that goes back, gave RR intervals of 0 or below."""
    rec = _record(tmp_path / "src", "rec")
    ann = wfdb.rdann(str(rec), "atr")
    beats = np.flatnonzero([s == "N" for s in ann.symbol])
    sample = samples(ann.sample[beats])
    symbol = ["N"] * len(sample)
    (rec.parent / "rec.atr").unlink()
    # wrann refuses unsorted times, so the file is written word by word (MIT format).
    words: list[int] = []
    last = 0
    for t in sample:
        step = int(t) - last
        if not 0 <= step < 1024:
            words += [59 << 10, (step >> 16) & 0xFFFF, step & 0xFFFF]
            step = 0
        words.append((1 << 10) | step)  # code 1: N
        last = int(t)
    (rec.parent / "rec.atr").write_bytes(np.asarray([*words, 0], dtype="<u2").tobytes())
    assert symbol and len(sample) > 6
    _qrs_and_ingest_refuse(capsys, tmp_path, rec, "rec.atr", problem)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_named_like_a_header_is_not_opened(tmp_path, capsys):
    """Listing a folder opened each `.hea`; a FIFO waited for a writer for ever."""
    rec = _record(tmp_path / "src", "rec")
    os.mkfifo(rec.parent / "x.hea")
    assert main(["qrs", str(rec.parent), "--workers", "1"]) == 0
    assert "x" not in capsys.readouterr().out.split()
    line = _error(capsys, "qrs", str(rec.parent / "x"), "--workers", "1")
    assert "x.hea" in line and "not a regular file" in line


def test_an_output_name_with_glob_characters_leaves_other_outputs_alone(tmp_path, capsys):
    """`run[1]`'s leftovers were matched as a pattern: `.run1.tmp-*` of another writer was
    deleted and `.run1.old-*` renamed into `run[1]`."""
    rec = _record(tmp_path / "src", "rec")
    other_stage = tmp_path / ".run1.tmp-4242-abcdef"
    other_old = tmp_path / ".run1.old-4242"
    other_stage.mkdir()
    other_old.mkdir()
    (other_old / "store.json").write_text("{}")
    assert main(["ingest", str(rec), "--out", str(tmp_path / "run[1]"), "--workers", "1"]) == 0
    assert other_stage.is_dir() and (other_old / "store.json").read_text() == "{}"
    assert (tmp_path / "run[1]" / "store.json").is_file()


def test_json_nested_too_deeply_is_one_line(tmp_path, capsys):
    store = tmp_path / "store"
    store.mkdir()
    (store / "store.json").write_text("[" * 100_000 + "]" * 100_000)
    line = _error(capsys, "tokenize", str(store), "--out", str(tmp_path / "tok"))
    assert "store.json" in line and "too deeply" in line


def test_microvolts_written_in_utf8_are_refused_not_read_as_volts(tmp_path, capsys):
    """wfdb reads headers as ASCII and drops `µ`: `/µV` became `/V`, amplitudes 10^6 too
    large, stored without a word."""
    rec = _record(tmp_path / "src", "rec")
    hea = rec.parent / "rec.hea"
    hea.write_bytes(hea.read_bytes().replace(b"1000.0(0)/mV", "1000000.0(0)/µV".encode()))
    assert "µV".encode() in hea.read_bytes()
    _qrs_and_ingest_refuse(capsys, tmp_path, rec, "rec.hea", "uV")


def test_an_annotation_path_that_is_a_folder_is_refused_not_ignored(tmp_path, capsys):
    """The beats then came from detection without a word, as if there were no reference."""
    rec = _record(tmp_path / "src", "rec")
    (rec.parent / "rec.atr").unlink()
    (rec.parent / "rec.atr").mkdir()
    _qrs_and_ingest_refuse(capsys, tmp_path, rec, "rec.atr", "not a regular file")


@pytest.mark.parametrize(
    "edit, problem",
    [(lambda t: t.replace("rec 1 250 5000", "rec 1 250 0"), "holds no samples"),
     (lambda t: t.replace("rec.dat 16 ", "rec.dat 0 "), "null signal (format 0)")],
    ids=["zero-samples", "format-0"],
)  # fmt: skip
def test_a_header_without_samples_says_so_not_a_library_error(tmp_path, capsys, edit, problem):
    rec = _record(tmp_path / "src", "rec")
    hea = rec.parent / "rec.hea"
    hea.write_text(edit(hea.read_text()))
    _qrs_and_ingest_refuse(capsys, tmp_path, rec, "rec.hea", problem)
