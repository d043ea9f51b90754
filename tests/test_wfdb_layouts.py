"""Records as PhysioNet databases hold them, written here by wfdb (and edfio): multi-segment
layouts with gaps, several samples per frame, skew, annotations with their own time
resolution, unnamed signals, rates below 50 Hz, EDF files, nested folders.

Each test reads the record the way wfdb does and checks that `qrs` and `ingest` see the
lead at the same rate and put every beat within one sample of where wfdb's reading puts it.
"""

from __future__ import annotations

import json
from pathlib import Path

import edfio
import numpy as np
import pytest
import wfdb
from wfdb.io.convert.edf import wfdb_to_edf

from heartlm.cli import main
from heartlm.ecg.signals import open_record, read_lead
from heartlm.ingest import IngestConfig, ingest
from heartlm.qrs import detect_qrs
from heartlm.store import BeatStore
from heartlm.synth import synth_record

GAIN = 1000.0  # ADC units per mV


def _ecg(seconds: float, fs: float, seed: int = 1) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """One synthetic lead (mV) with its beat annotations."""
    rec = synth_record(seconds / 60, fs, seed, leads=1, noise=0.3)
    sample, symbol = rec.beats()
    return rec.signal[:, 0], sample, list(symbol)


def _digital(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x), -32768, np.rint(np.nan_to_num(x) * GAIN)).astype(np.int64)


def _wrsamp(folder: Path, name: str, x_NL: np.ndarray, fs: float, names) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    n_sig = x_NL.shape[1]
    wfdb.wrsamp(name, fs=fs, units=["mV"] * n_sig, sig_name=names, d_signal=_digital(x_NL),
                fmt=["16"] * n_sig, adc_gain=[GAIN] * n_sig, baseline=[0] * n_sig,
                write_dir=str(folder))  # fmt: skip
    return folder / name


def _qrs(capsys, *args: str) -> dict:
    assert main(["qrs", *args, "--json", "--positions", "--workers", "1"]) == 0
    return json.loads(capsys.readouterr().out)


def _ingest(sources: list[Path], out: Path, **settings) -> tuple[BeatStore, dict]:
    info = ingest(sources, out, IngestConfig(workers=1, **settings))
    return BeatStore(out), info


def _near(a, b, tolerance: int = 1) -> bool:
    """Each position of `a` within `tolerance` samples of one of `b`, and as many of both."""
    a, b = np.asarray(a), np.asarray(b)
    return len(a) == len(b) and bool(np.all(np.abs(np.sort(a) - np.sort(b)) <= tolerance))


def _fitting(beats: np.ndarray, store: BeatStore, n_samples: int) -> np.ndarray:
    """The beats (at the store's rate) whose window lies inside the first `n_samples`."""
    return beats[(beats >= store.pre_samples) & (beats + store.post_samples <= n_samples)]


def _one_line_error(capsys, argv: list[str], *parts: str) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert all(p in err[0] for p in parts), err[0]
    return err[0]


# ---------- multi-segment records ----------


def _multi_segment(folder: Path, layout: str) -> tuple[Path, np.ndarray, tuple[int, int]]:
    """40 s over two segments with a gap (`~`) of about 3 s between them; in the variable
    layout the second segment holds the leads in the other order. `atr` annotates the beats
    outside the gap, `all` every beat drawn."""
    x, sample, symbol = _ecg(40, 250)
    x_NL = np.stack([x, -0.5 * x], axis=1)
    gap = (15 * 250, int(sample[sample > 18 * 250][0]) - 100)  # 0.4 s before a beat
    _wrsamp(folder, "seg1", x_NL[: gap[0]], 250, ["MLII", "V1"])
    if layout == "variable":
        _wrsamp(folder, "seg2", x_NL[gap[1] :, ::-1], 250, ["V1", "MLII"])
    else:
        _wrsamp(folder, "seg2", x_NL[gap[1] :], 250, ["MLII", "V1"])
    seg_name = ["seg1", "~", "seg2"]
    seg_len = [gap[0], gap[1] - gap[0], len(x) - gap[1]]
    if layout == "variable":  # wfdb's writer refuses the `~` file names of a layout header
        (folder / "multi_layout.hea").write_text(
            "multi_layout 2 250 0\n~ 0 1000/mV 16 0 0 0 0 MLII\n~ 0 1000/mV 16 0 0 0 0 V1\n"
        )
        seg_name, seg_len = ["multi_layout", *seg_name], [0, *seg_len]
    master = wfdb.MultiRecord(record_name="multi", n_sig=2, fs=250, sig_len=len(x),
                              seg_name=seg_name, seg_len=seg_len, layout=layout)  # fmt: skip
    master.n_seg = len(seg_name)  # set by the constructor only when given segment objects
    master.wrheader(write_dir=str(folder))
    outside = (sample < gap[0]) | (sample >= gap[1])
    symbols = np.asarray(symbol)
    wfdb.wrann("multi", "atr", sample[outside], symbols[outside], write_dir=str(folder))
    wfdb.wrann("multi", "all", sample, symbol, write_dir=str(folder))
    return folder / "multi", sample, gap


@pytest.mark.parametrize("layout", ["fixed", "variable"])
def test_multi_segment_record_reads_as_one_with_its_gap(tmp_path, capsys, layout):
    path, sample, gap = _multi_segment(tmp_path / "db", layout)
    lead = read_lead(open_record(path), 0)
    assert lead.name == "MLII" and lead.fs == 250 and len(lead.signal) == 40 * 250
    missing = np.isnan(lead.signal)
    assert missing[gap[0] : gap[1]].all() and missing.sum() == gap[1] - gap[0]
    if layout == "variable":
        np.testing.assert_array_equal(
            lead.signal, wfdb.rdrecord(str(path), channels=[0]).p_signal[:, 0]
        )
    # (wfdb's own joining fails on a gap in a fixed layout: compare with the samples written)
    mlii = {"seg1": 0, "seg2": 1 if layout == "variable" else 0}
    written = [wfdb.rdrecord(str(tmp_path / "db" / s)).p_signal[:, i] for s, i in mlii.items()]
    np.testing.assert_array_equal(lead.signal[~missing], np.concatenate(written))

    out = _qrs(capsys, str(tmp_path / "db"))
    (rec,) = out["records"]  # the segments are parts of the record, not records
    outside = (sample < gap[0]) | (sample >= gap[1])
    assert rec["fs"] == 250 and rec["n_reference"] == outside.sum() and rec["gaps"] == 1
    # One beat may be missed: a small premature ventricular beat 0.18 s before the gap sits
    # below threshold (the detector's envelope weighs in the slope above 15 Hz, where this
    # wide synthetic beat has little), and no search-back can reach it before the gap.
    assert rec["fp"] == 0 and rec["fn"] <= 1
    assert not any(gap[0] <= p < gap[1] for p in rec["positions"])

    store, info = _ingest([tmp_path / "db"], tmp_path / "store", align=0)
    (entry,) = store.records
    assert entry.name == "multi" and entry.extra["gaps"] == [list(gap)]
    assert info["gaps_s"] == {"db/multi": [[gap[0] / 250, gap[1] / 250]]}
    assert info["counts"]["gaps"] == 1
    rows = store.table
    assert len(rows) + entry.extra["dropped_beats"] == outside.sum()
    first_after = np.flatnonzero(rows["sample"] > gap[0])[0]
    assert rows["sample"][first_after] == sample[outside & (sample > gap[0])][0]
    # The interval over the gap is unknown: NaN, as at the record's ends.
    assert np.flatnonzero(np.isnan(rows["rr_prev"])).tolist() == [0, first_after]

    # Annotated beats inside the gap, or whose window touches it, are not kept.
    store, _ = _ingest([path], tmp_path / "store_all", align=0, annotations="all")
    rows, pre, post = store.table, store.pre_samples, store.post_samples
    clear = (sample >= pre) & (sample + post <= len(lead.signal))
    clear &= (sample + post <= gap[0]) | (sample - pre >= gap[1])
    np.testing.assert_array_equal(rows["sample"], sample[clear])
    assert len(rows) + store.records[0].extra["dropped_beats"] == len(sample)


# ---------- several samples per frame ----------


def test_multi_rate_record_reads_the_lead_at_its_own_rate(tmp_path, capsys):
    """An ECG at 250 Hz in a 62.5 Hz frame (`16x4`) beside a respiration signal (`16x1`)."""
    x, sample, symbol = _ecg(30, 250)
    n_frames = len(x) // 4
    resp = np.sin(np.arange(n_frames) / 40)
    rec = wfdb.Record(
        record_name="mr", n_sig=2, fs=62.5, sig_len=n_frames, sig_name=["RESP", "MLII"],
        units=["mV", "mV"], fmt=["16", "16"], samps_per_frame=[1, 4], adc_gain=[GAIN, GAIN],
        baseline=[0, 0], e_d_signal=[_digital(resp), _digital(x[: n_frames * 4])],
        file_name=["mr.dat", "mr.dat"],
    )  # fmt: skip
    rec.set_d_features(expanded=True)
    rec.set_defaults()
    rec.wrsamp(expanded=True, write_dir=str(tmp_path))
    wfdb.wrann("mr", "atr", sample, symbol, fs=250, write_dir=str(tmp_path))
    path = tmp_path / "mr"

    lead = read_lead(open_record(path), 1)
    by_wfdb = wfdb.rdrecord(str(path), channels=[1], smooth_frames=False).e_p_signal[0]
    assert lead.fs == 250 and np.array_equal(lead.signal, by_wfdb)
    assert len(wfdb.rdrecord(str(path), channels=[1]).p_signal) == n_frames  # wfdb's default

    out = _qrs(capsys, str(path), "--lead", "MLII")
    (rec_out,) = out["records"]
    assert rec_out["fs"] == 250 and rec_out["se"] == 1.0 and rec_out["ppv"] == 1.0
    assert _near(rec_out["positions"], detect_qrs(by_wfdb, 250))

    store, _ = _ingest([path], tmp_path / "store", align=0)
    assert store.records[0].fs_source == 250 and store.records[0].lead == "MLII"
    kept = store.table["sample"]
    assert len(kept) + store.records[0].extra["dropped_beats"] == len(sample)
    assert set(kept.tolist()) <= set(sample.tolist())


# ---------- annotation time resolution ----------


def test_annotations_with_their_own_time_resolution(tmp_path, capsys):
    """A 125 Hz record whose reference counts 500 ticks per second (`## time resolution`)."""
    x, sample, symbol = _ecg(30, 125)
    path = _wrsamp(tmp_path, "r125", x[:, None], 125, ["MLII"])
    ticks = sample * 4
    wfdb.wrann("r125", "atr", ticks, symbol, fs=500, write_dir=str(tmp_path))
    assert wfdb.rdann(str(path), "atr").fs == 500

    (rec,) = _qrs(capsys, str(path))["records"]
    assert rec["fs"] == 125 and rec["n_reference"] == len(sample)
    assert rec["se"] == 1.0 and rec["ppv"] == 1.0

    store, _ = _ingest([path], tmp_path / "store", align=0)
    kept = store.table["sample"]  # at the store's 250 Hz
    assert len(kept) + store.records[0].extra["dropped_beats"] == len(sample)
    assert set(kept.tolist()) <= set((ticks // 2).tolist())

    # The same times without the resolution line read as 125 Hz samples: far past the end.
    wfdb.wrann("r125", "bad", ticks, symbol, write_dir=str(tmp_path))
    for argv in (
        ["qrs", str(path), "--annotations", "bad"],
        ["ingest", str(path), "--annotations", "bad", "--out", str(tmp_path / "s2")],
    ):
        _one_line_error(capsys, argv, "r125.bad", "past the record's end", "time resolution")
    assert not (tmp_path / "s2").exists()


# ---------- skew, unnamed signals, low rates ----------


def test_skewed_lead_is_realigned_and_its_missing_end_is_a_gap(tmp_path, capsys):
    """The ECG is stored 20 frames late, as a skewed acquisition does; the header's skew
    realigns it, and its last 20 samples are missing."""
    x, _, _ = _ecg(30, 250)
    k = 20
    late = np.concatenate([np.zeros(k), x[:-k]])
    rec = wfdb.Record(
        record_name="sk", n_sig=2, fs=250, sig_len=len(x), sig_name=["V1", "MLII"],
        units=["mV", "mV"], fmt=["16", "16"], adc_gain=[GAIN, GAIN], baseline=[0, 0],
        skew=[0, k], d_signal=_digital(np.stack([-x, late], axis=1)),
        file_name=["sk.dat", "sk.dat"],
    )  # fmt: skip
    rec.set_d_features()
    rec.set_defaults()
    rec.wrsamp(write_dir=str(tmp_path))
    path = tmp_path / "sk"

    lead = read_lead(open_record(path), 1)
    by_wfdb = wfdb.rdrecord(str(path), channels=[1], smooth_frames=False).e_p_signal[0]
    np.testing.assert_array_equal(lead.signal, by_wfdb)
    assert np.isnan(lead.signal[-k:]).all() and not np.isnan(lead.signal[:-k]).any()
    wfdb_beats = detect_qrs(by_wfdb, 250)

    (rec_out,) = _qrs(capsys, str(path), "--lead", "MLII")["records"]
    assert _near(rec_out["positions"], wfdb_beats)

    store, _ = _ingest([path], tmp_path / "store", beats="detect", align=0)  # refused before
    (entry,) = store.records
    assert entry.lead == "MLII" and entry.extra["gaps"] == [[len(x) - k, len(x)]]
    assert _near(store.table["sample"], _fitting(wfdb_beats, store, len(x) - k))


def test_signals_without_a_description(tmp_path, capsys):
    x, sample, symbol = _ecg(20, 250)
    tmp_path.mkdir(exist_ok=True)
    wfdb.wrsamp("nd", fs=250, units=["mV"], sig_name=None, p_signal=x[:, None], fmt=["16"],
                write_dir=str(tmp_path))  # fmt: skip
    wfdb.wrann("nd", "atr", sample, symbol, write_dir=str(tmp_path))
    assert wfdb.rdheader(str(tmp_path / "nd")).sig_name == [None]
    (rec,) = _qrs(capsys, str(tmp_path / "nd"))["records"]
    assert rec["lead"] == "signal 0" and rec["se"] == 1.0 and rec["ppv"] == 1.0
    store, _ = _ingest([tmp_path / "nd"], tmp_path / "store")
    assert store.records[0].lead == "signal 0"
    assert len(store) + store.records[0].extra["dropped_beats"] == len(sample)


def test_qrs_below_50_hz_is_one_line(tmp_path, capsys):
    x, _, _ = _ecg(20, 40)
    path = _wrsamp(tmp_path, "slow", x[:, None], 40, ["MLII"])
    _one_line_error(capsys, ["qrs", str(path), "--workers", "1"], "slow.hea", "40 Hz", "50 Hz")
    assert main(["qrs", str(path), "--skip-bad", "--workers", "1"]) == 2  # nothing left
    skipping, error = capsys.readouterr().err.strip().splitlines()
    assert "slow.hea" in skipping and "50 Hz" in skipping
    assert error == f"heartlm: error: {tmp_path}: all 1 records were skipped (see above)"
    argv = ["ingest", str(path), "--out", str(tmp_path / "s")]
    _one_line_error(capsys, argv, "slow.hea", "too low for --band")


# ---------- EDF ----------


def test_edf_with_signals_at_different_rates(tmp_path, capsys):
    """SpO2 at 1 Hz first, then an ECG at 500 Hz in microvolts, as sleep recordings have."""
    x, sample, symbol = _ecg(30, 500)
    signals = [
        edfio.EdfSignal(np.full(30, 97.0) + np.arange(30) % 2, 1, label="SpO2",
                        physical_dimension="%"),
        edfio.EdfSignal(x * 1000, 500, label="ECG II", physical_dimension="uV"),
    ]  # fmt: skip
    (tmp_path / "data").mkdir()
    path = tmp_path / "data" / "night.edf"
    edfio.Edf(signals, data_record_duration=1).write(path)
    written = edfio.read_edf(path).signals[1].data / 1000
    written_beats = detect_qrs(written, 500)

    out = _qrs(capsys, str(path), "--lead", "ecg ii")
    (rec,) = out["records"]
    assert rec["fs"] == 500 and rec["lead"] == "ECG II"
    assert _near(rec["positions"], written_beats)

    store, _ = _ingest([tmp_path / "data"], tmp_path / "store", align=0)  # ECG, no --lead
    (entry,) = store.records
    assert entry.name == "night.edf" and entry.lead == "ECG II" and entry.fs_source == 500
    assert entry.beat_source == "detect"
    assert _near(store.table["sample"], _fitting(np.rint(written_beats / 2), store, 30 * 250))
    assert 0.5 < np.abs(store.beats[:, store.pre_samples]).mean() < 5  # mV, not µV

    # Beside the EDF file, annotations that state their time resolution are the reference.
    wfdb.wrann("night", "atr", sample, symbol, fs=500, write_dir=str(path.parent))
    store, _ = _ingest([path], tmp_path / "store2", align=0)
    assert store.records[0].beat_source == "annotations"
    assert set(store.table["sample"].tolist()) <= set(np.rint(sample / 2).tolist())
    # Without it, their sample numbers have no rate: refused, naming the file.
    wfdb.wrann("night", "qrs", sample, symbol, write_dir=str(path.parent))
    argv = ["ingest", str(path), "--annotations", "qrs", "--out", str(tmp_path / "s3")]
    _one_line_error(capsys, argv, "night.qrs", "no time resolution")
    # A file cut short is refused like a short .dat (edfio itself only warns).
    cut = tmp_path / "cut" / "cut.edf"
    cut.parent.mkdir()
    cut.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    _one_line_error(capsys, ["qrs", str(cut), "--lead", "ECG II"], "cut.edf", "truncated")


def test_edf_written_by_wfdb_reads_like_its_record(tmp_path, capsys):
    x, _, _ = _ecg(20, 360)
    _wrsamp(tmp_path / "w", "rec", np.stack([x, -x], axis=1), 360, ["MLII", "V1"])
    (tmp_path / "e").mkdir()
    wfdb_to_edf(str(tmp_path / "w" / "rec"), output_filename=str(tmp_path / "e" / "rec.edf"))
    capsys.readouterr()  # wfdb_to_edf reports on stdout
    edf = read_lead(open_record(tmp_path / "e" / "rec.edf"), 0)
    assert edf.name == "MLII" and edf.fs == 360
    # wfdb pads the EDF's last 10 s data record with the lowest digital value
    np.testing.assert_allclose(edf.signal[: len(x)], np.rint(x * GAIN) / GAIN, atol=1e-9)
    from_wfdb = _qrs(capsys, str(tmp_path / "w" / "rec"))["records"][0]
    from_edf = _qrs(capsys, str(tmp_path / "e" / "rec.edf"))["records"][0]
    assert from_edf["fs"] == from_wfdb["fs"] == 360 and from_edf["lead"] == "MLII"
    before_pad = [p for p in from_edf["positions"] if p < 19 * 360]
    assert before_pad == [p for p in from_wfdb["positions"] if p < 19 * 360]


# ---------- folders ----------


def test_folders_are_searched_below_and_bad_records_skipped(tmp_path, capsys):
    root = tmp_path / "root"
    x, sample, symbol = _ecg(20, 250)
    _wrsamp(root / "a", "good", x[:, None], 250, ["MLII"])
    wfdb.wrann("good", "atr", sample, symbol, write_dir=str(root / "a"))
    _wrsamp(root / "b" / "c", "other", -x[:, None], 250, ["MLII"])
    _wrsamp(root / "b", "broken", x[:, None], 250, ["MLII"])
    (root / "b" / "broken.dat").unlink()
    _multi_segment(root / "m", "fixed")
    (root / "x").mkdir()
    (root / "x" / "bad_master.hea").write_text("bad_master/2 1 abc 100\nseg 50\n~ 50\n")
    (root / ".hidden").mkdir()
    _wrsamp(root / ".hidden", "ignored", x[:, None], 250, ["MLII"])

    _one_line_error(capsys, ["qrs", str(root), "--workers", "1"], "broken.dat", "missing")
    out = _qrs(capsys, str(root), "--skip-bad")
    names = [Path(r["record"]).name for r in out["records"]]
    assert names == ["good", "broken", "other", "multi", "bad_master"]
    assert out["n_skipped"] == 2 and "signal file is missing" in out["skipped"][0]["reason"]
    assert "sampling rate 'abc'" in out["skipped"][1]["reason"]
    assert main(["qrs", str(root), "--skip-bad", "--workers", "2"]) == 0
    assert "2 of 5 records skipped" in capsys.readouterr().out

    out_dir = tmp_path / "store"
    assert main(["ingest", str(root), "--out", str(out_dir), "--skip-bad", "--workers", "2"]) == 0
    assert "3 records, 2 skipped" in capsys.readouterr().err
    info = json.loads((out_dir / "run.json").read_text())
    skipped = [Path(s["record"]).name for s in info["skipped"]]
    assert skipped == ["broken.dat", "bad_master.hea"]
    assert info["counts"]["records_skipped"] == 2
    assert sorted(r.name for r in BeatStore(out_dir).records) == ["good", "multi", "other"]


def test_linked_folders_are_followed_each_once(tmp_path, capsys):
    """A data folder of links to databases is searched through them; a link back up (a
    loop) or a second link to one folder does not list its records again."""
    x, _, _ = _ecg(20, 250)
    _wrsamp(tmp_path / "db", "rec", x[:, None], 250, ["MLII"])
    data = tmp_path / "data"
    data.mkdir()
    (data / "one").symlink_to(tmp_path / "db", target_is_directory=True)
    (data / "two").symlink_to(tmp_path / "db", target_is_directory=True)
    (tmp_path / "db" / "up").symlink_to(data, target_is_directory=True)
    out = _qrs(capsys, str(data))
    assert [Path(r["record"]).name for r in out["records"]] == ["rec"]


def test_a_gap_too_long_to_hold_is_refused_before_memory_is_taken(tmp_path, capsys):
    """A `~` gap of a billion samples asked numpy for 7.5 GiB of NaN (a traceback, or the
    memory taken): refused from the master header's numbers alone."""
    path, _, _ = _multi_segment(tmp_path / "db", "fixed")
    text = (path.parent / "multi.hea").read_text().splitlines()
    gap = next(i for i, line in enumerate(text) if line.startswith("~"))
    text[gap] = "~ 1000000000"
    first = text[0].split()
    first[3] = str(int(first[3]) + 1_000_000_000)
    text[0] = " ".join(first)
    (path.parent / "multi.hea").write_text("\n".join(text) + "\n")
    capsys.readouterr()
    assert main(["qrs", str(path), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "multi" in err[0] and "split the record" in err[0], err


def test_a_segment_at_another_rate_than_its_master_is_refused(tmp_path, capsys):
    """A 250-Hz segment under a 500-Hz master header was read at 500 Hz: RR halved."""
    path, _, _ = _multi_segment(tmp_path / "db", "fixed")
    hea = path.parent / "multi.hea"
    first, *rest = hea.read_text().splitlines()
    fields = first.split()
    fields[2] = "500"
    hea.write_text("\n".join([" ".join(fields), *rest]) + "\n")
    capsys.readouterr()
    assert main(["qrs", str(path), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sampled at 250 Hz, the master header at 500 Hz" in err[0], err
