"""QRS detector and EC57 scoring: hand-made matching cases, real MIT-BIH records, rates, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import wfdb
from scipy import signal as sps

from heartlm.cli import main
from heartlm.ecg.wfdbio import read_annotations, read_record
from heartlm.qrs import Match, detect_qrs, gross, match_beats, reference_beats
from heartlm.qrs.detector import DetectorConfig, _decide, _filtfilt, _filtfilt_two, _slope_power
from heartlm.synth import synth_record

# --- match_beats -------------------------------------------------------------------------


def test_match_is_one_to_one():
    m = match_beats(np.array([1000]), np.array([990, 1010]), fs=1000)
    assert (m.tp, m.fp, m.fn) == (1, 1, 0)
    m = match_beats(np.array([1000, 1020]), np.array([1010]), fs=1000)
    assert (m.tp, m.fp, m.fn) == (1, 0, 1)


def test_match_boundary_is_exactly_150_ms():
    ref = np.array([1000, 5000])
    assert match_beats(ref, np.array([1150, 4850]), fs=1000).tp == 2
    assert match_beats(ref, np.array([1151, 4849]), fs=1000).tp == 0
    assert match_beats(np.array([360]), np.array([414]), fs=360).tp == 1  # 54 samples = 150 ms
    assert match_beats(np.array([360]), np.array([415]), fs=360).tp == 0
    assert match_beats(np.array([100]), np.array([120]), fs=1000, tolerance_s=0.01).tp == 0


def test_match_finds_the_most_pairs_not_the_greedy_nearest():
    # Detection 1060 is nearer reference 1100, but pairing them would strand reference 1000
    # (1200 is then the only detection left for 1100): the most pairs is 1000-1060, 1100-1200.
    m = match_beats(np.array([1000, 1100]), np.array([1060, 1200]), fs=1000)
    assert (m.tp, m.fp, m.fn) == (2, 0, 0)


def test_match_empty_inputs():
    none = np.array([], dtype=np.int64)
    assert match_beats(none, none, 360) == Match(0, 0, 0)
    m = match_beats(none, np.array([5, 500]), 360)
    assert (m.tp, m.fp, m.fn, m.ppv, m.se) == (0, 2, 0, 0.0, 0.0)
    m = match_beats(np.array([5, 500]), none, 360)
    assert (m.tp, m.fp, m.fn, m.se, m.ppv) == (0, 0, 2, 0.0, 0.0)


def test_scores_and_gross_sum_counts_before_dividing():
    a, b = Match(tp=90, fp=10, fn=0), Match(tp=10, fp=0, fn=10)
    assert a.ppv == pytest.approx(0.9) and b.se == pytest.approx(0.5)
    g = gross([a, b])
    assert (g.tp, g.fp, g.fn) == (100, 10, 10)
    assert g.se == pytest.approx(100 / 110) and g.ppv == pytest.approx(100 / 110)
    assert g.f1 == pytest.approx(200 / 220)
    assert g.as_dict()["tp"] == 100


def test_reference_beats_drop_non_beat_symbols():
    sample = np.array([10, 20, 30, 40, 50])
    assert reference_beats(sample, ["+", "N", "~", "V", "/"]).tolist() == [20, 40, 50]


# --- detector on synthetic and real signals ----------------------------------------------


@pytest.mark.parametrize("fs", [128.0, 500.0, 1000.0])
def test_detector_finds_synthetic_beats(fs):
    rec = synth_record(2.0, fs, (7, int(fs)), afib=fs == 500.0)
    sample, symbol = rec.beats()
    m = match_beats(reference_beats(sample, list(symbol)), detect_qrs(rec.signal, fs), fs)
    assert m.tp > 100
    assert m.se >= 0.99 and m.ppv >= 0.99, m


def test_detector_reports_no_beat_in_noise_alone_and_keeps_a_small_real_lead():
    noise = 0.01 * np.random.default_rng(0).standard_normal(21600)  # 10 uV: a lead off
    assert len(detect_qrs(noise[:3600], 360.0)) == 0
    rec = synth_record(1.0, 360.0, 3)
    sample, symbol = rec.beats()
    ref = reference_beats(sample, list(symbol))
    small = 0.1 * rec.signal[:, 0] + noise[: len(rec.signal)]  # QRS about 0.1 mV
    m = match_beats(ref, detect_qrs(small, 360.0), 360.0)
    assert m.se >= 0.99 and m.ppv >= 0.99, m
    # A minute with the lead off, then the minute of beats: the noise's detections go, the
    # beats stay (a floor over the whole record would keep or drop both together).
    both = detect_qrs(np.concatenate([noise, rec.signal[:, 0]]), 360.0)
    assert np.sum(both < len(noise)) <= 1
    m = match_beats(ref, both[both >= len(noise)] - len(noise), 360.0)
    assert m.se >= 0.98 and m.ppv >= 0.95, m  # thresholds first settle on the noise


def test_detector_output_contract():
    rec = synth_record(0.5, 360.0, 3)
    one = detect_qrs(rec.signal[:, 0], 360.0)
    assert one.dtype == np.int64 and np.all(np.diff(one) > 0)
    assert np.array_equal(detect_qrs(rec.signal, 360.0), one)  # 2-D: the first lead
    with_gap = rec.signal[:, 0].copy()
    with_gap[1000:1010] = np.nan
    assert abs(len(detect_qrs(with_gap, 360.0)) - len(one)) <= 1
    assert len(detect_qrs(np.zeros(50), 360.0)) == 0
    with pytest.raises(ValueError, match="finite"):
        detect_qrs(np.full(5000, np.nan), 360.0)
    with pytest.raises(ValueError, match="rate"):
        detect_qrs(rec.signal[:, 0], 20.0)


@pytest.mark.parametrize("n", [2, 40, 10_000])
def test_compiled_filters_match_scipy(n):
    x = np.random.default_rng(n).standard_normal(n).cumsum()
    band = sps.butter(2, [5.0, 20.0], btype="bandpass", fs=180.0, output="sos")
    high = sps.butter(2, 15.0, btype="highpass", fs=180.0, output="sos")
    pad = min(15, n - 1)
    want_band = sps.sosfiltfilt(band, x, padlen=pad)
    # Float64 rounding in the recursion, scaled to the input: a wrong design, start state or
    # padding is off by orders of magnitude more (an FMA build of scipy may round otherwise).
    tol = {"rtol": 0, "atol": 1e-11 * np.abs(x).max()}
    np.testing.assert_allclose(_filtfilt((5.0, 20.0), 180.0, x), want_band, **tol)
    got_band, got_high = _filtfilt_two((5.0, 20.0), (15.0, None), 180.0, x)
    np.testing.assert_allclose(got_band, want_band, **tol)
    want_high = sps.sosfiltfilt(high, x, padlen=pad)
    np.testing.assert_allclose(got_high, want_high, **tol)


@pytest.mark.parametrize("width", [1, 4, 27])
def test_envelope_power_is_the_moving_mean_of_squared_slopes(width):
    from scipy import ndimage

    rng = np.random.default_rng(width)
    a, b = rng.standard_normal(500), rng.standard_normal(500)
    p_a, p_b = (
        ndimage.uniform_filter1d(np.gradient(v) ** 2, width, mode="nearest") for v in (a, b)
    )
    assert np.allclose(_slope_power(a, b, width), p_a * p_a * p_b, rtol=1e-9)


def _rhythm(fs: float, seconds: float, rr_s: float, seed: int, p_waves: bool = False):
    """A regular rhythm of narrow QRS complexes with small T waves and, with `p_waves`, a
    conducted P wave before each and a blocked one between (2:1 AV block)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * fs)) / fs
    beats = np.arange(0.25, seconds - 0.1, rr_s)
    beats += rng.normal(0, 0.005, len(beats))
    x = 0.02 * rng.standard_normal(len(t))

    def wave(at, amplitude, width):
        return amplitude * np.exp(-0.5 * ((t - at) / width) ** 2)

    for b in beats:
        x += wave(b, 1.0, 0.012) + wave(b + 0.03, -0.25, 0.012) + wave(b + 0.22, 0.2, 0.04)
        if p_waves:
            x += wave(b - 0.18, 0.15, 0.025) + wave(b + rr_s / 2 - 0.1, 0.15, 0.025)
    return x, np.round(beats * fs).astype(np.int64)


@pytest.mark.parametrize(
    ("rr_s", "p_waves", "seed"), [(0.4, False, 0), (0.4, False, 2), (0.4, False, 3), (1.7, True, 0)]
)
def test_detector_needs_no_learning_period(rr_s, p_waves, seed):
    # 60 s at 128 Hz. At 150/min every envelope peak 250 ms apart is a beat, which once
    # seeded the noise level at the beats' height: 10-24 beats were missed before the
    # thresholds were settled on the first seconds and applied from the first sample. At
    # 35/min with blocked P waves only a sixth of the peaks are beats, which once seeded
    # the signal level at a P wave's height, and P waves were taken for beats.
    x, ref = _rhythm(128.0, 60.0, rr_s, seed, p_waves)
    det = detect_qrs(x, 128.0)
    assert match_beats(ref, det, 128.0) == Match(len(ref), 0, 0)
    assert abs(det[0] - ref[0]) <= 2


def test_detector_reports_beats_cut_by_the_record_ends_only_when_inside():
    fs = 128.0
    x, ref = _rhythm(fs, 30.0, 0.8, 1)
    for start in (ref[0] - 3, ref[1] + 3):  # R peak 3 samples inside, or just outside
        y = x[start : ref[-1] + 3]
        det = detect_qrs(y, fs)
        inside = ref[(ref >= start) & (ref < ref[-1] + 3)] - start
        assert match_beats(inside, det, fs) == Match(len(inside), 0, 0), start


@pytest.mark.parametrize(("fs", "lag_s"), [(128.0, 0.2), (360.0, 0.2), (360.0, -0.2)])
def test_detector_finds_the_beat_next_to_an_electrode_motion_step(fs, lag_s):
    # Every other beat has a 2-mV step of electrode motion 200 ms after (or before) it,
    # decaying in 100 ms: steeper in the envelope than the beat, so the envelope's peak
    # there is the step. Before the beats were compared with the record's median beat, each
    # of those steps was reported instead of its beat (75 FP, 75 FN).
    x, ref = _rhythm(fs, 120.0, 0.8, 0)
    t = np.arange(len(x)) / fs
    sign = np.random.default_rng(0).choice([-1.0, 1.0], len(ref[1::2]))
    for b, s in zip(ref[1::2], sign, strict=True):
        after = np.maximum(t - (b / fs + lag_s), 0.0)
        x += np.where(after > 0, 2.0 * s * np.exp(-after / 0.1), 0.0)
    assert match_beats(ref, detect_qrs(x, fs), fs) == Match(len(ref), 0, 0)


@pytest.mark.parametrize(("slope", "is_beat"), [(0.3, False), (0.95, True)])
def test_a_peak_as_steep_as_the_beats_is_no_p_wave_whatever_follows(slope, is_beat):
    # Decisions over hand-made candidates at 100 Hz: beats of slope 1 every 0.7 s, then a
    # peak of `slope` followed 0.3 s later by one three times steeper (a QRS, or an artefact
    # such as LUDB 109's closing electrode step). A shallow peak there is that QRS's P wave; a
    # peak as steep as the beats is itself a beat (LUDB 109's last beat was called a P wave).
    fs, config = 100.0, DetectorConfig()
    pos = np.array([50, 120, 190, 260, 330, 360], dtype=np.int64)
    height = np.ones(len(pos))
    steepest = np.array([1.0, 1.0, 1.0, 1.0, slope, 3.0])
    beats = _decide(pos, height, steepest, 1.0, 0.1, 25, 36, config, fs)
    assert beats.tolist() == [50, 120, 190, 260, *([330] if is_beat else []), 360]


def _mitdb(shared: Path, name: str) -> tuple[np.ndarray, float, np.ndarray]:
    rec = read_record(shared / "mitdb" / name, channels=[0])
    ann = read_annotations(rec.path)
    return rec.signal[:, 0], rec.fs, reference_beats(ann.sample, ann.symbol)


@pytest.mark.parametrize("name", ["100", "101", "103"])
def test_detector_on_mitdb_records(shared_ecg, name):
    x, fs, ref = _mitdb(shared_ecg, name)
    m = match_beats(ref, detect_qrs(x, fs), fs)
    assert m.se >= 0.99 and m.ppv >= 0.99, m


def test_detector_finds_the_first_beats_of_a_one_minute_piece(shared_ecg):
    # Minute 26 of MIT-BIH 202 (flutter, then AF, near 140/min) at 128 Hz, scored whole: the
    # detector without a settled start missed the 6 beats of its first 8 s.
    x, fs, ref = _mitdb(shared_ecg, "202")
    y = sps.resample_poly(x, 16, 45, padtype="line")  # 360 -> 128 Hz
    ref = np.round(ref * 128 / fs).astype(np.int64)
    lo, hi = 26 * 60 * 128, 27 * 60 * 128
    piece = ref[(ref >= lo) & (ref < hi)] - lo
    m = match_beats(piece, detect_qrs(y[lo:hi], 128.0), 128.0)
    assert m.fn == 0 and m.fp <= 1, m


@pytest.mark.parametrize(
    ("name", "se", "ppv"), [("118e06", 0.98, 0.84), ("119e06", 0.98, 0.84), ("118e00", 0.955, 0.76)]
)
def test_detector_under_electrode_motion_noise(shared_ecg, name, se, ppv):
    # NSTDB at 6 and 0 dB, lead 0. Before the envelope weighed in the slope above 15 Hz,
    # where electrode motion has little energy, 119e06 had +P 0.79 (xqrs: 0.85). Before the
    # beats were compared with the record's median beat, 118e00 had Se 0.929 (xqrs: 0.955).
    rec = read_record(shared_ecg / "nstdb" / name, channels=[0])
    ann = read_annotations(rec.path)
    ref = reference_beats(ann.sample, ann.symbol)
    m = match_beats(ref, detect_qrs(rec.signal[:, 0], rec.fs), rec.fs)
    assert m.se >= se and m.ppv >= ppv, m


@pytest.mark.parametrize("fs_new", [128, 1000])
def test_detector_is_rate_invariant(shared_ecg, fs_new):
    x, fs, ref = _mitdb(shared_ecg, "103")
    y = sps.resample_poly(x, fs_new, int(fs))
    m = match_beats(np.round(ref * fs_new / fs), detect_qrs(y, fs_new), fs_new)
    assert m.se >= 0.99 and m.ppv >= 0.99, m


# --- CLI ---------------------------------------------------------------------------------


def _write_record(folder: Path, name: str, signal: np.ndarray, fs: float, beats=None) -> Path:
    digital = np.where(np.isnan(signal), -32768, np.rint(signal * 200)).astype(np.int16)
    wfdb.wrsamp(
        name,
        fs=fs,
        units=["mV"],
        sig_name=["MLII"],
        d_signal=digital[:, None],
        fmt=["16"],
        adc_gain=[200.0],
        baseline=[0],
        write_dir=str(folder),
    )
    if beats is not None:
        sample, symbol = beats
        wfdb.wrann(name, "atr", np.asarray(sample), list(symbol), write_dir=str(folder))
    return folder / name


def test_cli_json_scores_a_folder(tmp_path, capsys):
    rec = synth_record(1.0, 250.0, 11)
    sample, symbol = rec.beats()
    _write_record(tmp_path, "s1", rec.signal[:, 0], 250.0, (sample, symbol))
    _write_record(tmp_path, "s2", rec.signal[:, 0], 250.0)  # no annotations: detect only
    assert main(["qrs", str(tmp_path), "--json", "--workers", "1", "--positions"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["gross"]) == {"se", "ppv", "f1", "tp", "fp", "fn"}
    assert out["tolerance_s"] == 0.15 and out["scored"] == "whole record"
    assert out["vf_excluded"] is False
    scored, unscored = out["records"]
    assert Path(scored["record"]).name == "s1" and scored["tp"] + scored["fn"] == len(sample)
    assert out["gross"]["tp"] == scored["tp"] and scored["se"] >= 0.99
    assert "tp" not in unscored and unscored["n_detected"] == len(unscored["positions"])
    assert unscored["positions"] == scored["positions"]


def test_cli_out_writes_the_detections_as_wfdb_annotations(tmp_path, capsys):
    rec = synth_record(1.0, 250.0, 11)
    data = tmp_path / "data"
    for folder in ("a", "b"):  # one record name in two folders
        (data / folder).mkdir(parents=True)
        _write_record(data / folder, "s1", rec.signal[:, 0], 250.0, rec.beats())
    noise = np.random.default_rng(0).normal(0.0, 0.01, 2500)  # 10 s of a lead with no heart
    _write_record(data / "a", "flat", noise, 250.0)
    out = tmp_path / "det"
    args = ["qrs", str(data), "--json", "--workers", "1", "--positions", "--out", str(out)]
    assert main(args) == 0
    said = capsys.readouterr()
    rows = {Path(r["record"]).parent.name + "/" + Path(r["record"]).name: r
            for r in json.loads(said.out)["records"]}  # fmt: skip
    assert "annotation" not in rows["a/s1"]  # what --out keeps is not printed
    for key in ("a/s1", "b/s1"):
        ann = wfdb.rdann(str(out / key), "qrs")
        assert ann.fs == 250 and set(ann.symbol) == {"N"}
        assert ann.sample.tolist() == rows[key]["positions"]
        ref = read_annotations(data / key)
        assert match_beats(reference_beats(ref.sample, ref.symbol), ann.sample, 250.0).se > 0.99
    assert rows["a/flat"]["n_detected"] == 0 and not (out / "a" / "flat.qrs").exists()
    assert "no file for 1 record(s) without a detected beat: flat" in said.err
    assert main(args) == 2  # an existing --out is not replaced unasked
    assert "--overwrite" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0
    assert main(["qrs", str(data), "--out", str(data / "a" / "det")]) == 2  # inside an input


def test_cli_out_keeps_every_file_inside_out_and_apart(tmp_path, capsys, monkeypatch):
    rec = synth_record(0.5, 250.0, 11)
    data = tmp_path / "data"
    for folder in (data, data / "x" / "a", data / "y" / "a", data / "a_2"):
        folder.mkdir(parents=True, exist_ok=True)
        _write_record(folder, "s1", rec.signal[:, 0], 250.0)
    monkeypatch.chdir(data / "x")
    assert main(["qrs", "..", "--out", str(tmp_path / "det"), "--workers", "1"]) == 0
    files = sorted(str(p.relative_to(tmp_path / "det")) for p in (tmp_path / "det").rglob("*.*"))
    # a real folder a_2 keeps its name: the second `a` is numbered past it
    assert files == ["a/s1.qrs", "a_2/s1.qrs", "a_3/s1.qrs", "data/s1.qrs", "index.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "det"]
    index = (tmp_path / "det" / "index.csv").read_text().splitlines()
    assert index[0] == "record,file,annotations"
    of = dict(line.split(",")[:2] for line in index[1:])
    assert of == {"../s1": "data/s1.qrs", "../a_2/s1": "a_2/s1.qrs", "../x/a/s1": "a/s1.qrs",
                  "../y/a/s1": "a_3/s1.qrs"}  # fmt: skip


def test_cli_counts_the_detections_of_a_beat_free_reference_as_false(tmp_path, capsys):
    rec = synth_record(1.0, 250.0, 11)
    sample, symbol = rec.beats()
    _write_record(tmp_path, "s1", rec.signal[:, 0], 250.0, (sample, symbol))
    _write_record(tmp_path, "s2", rec.signal[:, 0], 250.0, ([10], ["+"]))  # a rhythm mark only
    assert main(["qrs", str(tmp_path), "--json", "--workers", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    beats, free = out["records"]
    assert free["n_reference"] == 0 and free["se"] is None and free["tp"] == 0
    assert free["fp"] == free["n_detected"] > 0 and free["ppv"] == 0.0
    assert out["gross"]["fp"] == beats["fp"] + free["fp"] and out["gross"]["tp"] == beats["tp"]
    assert out["gross"]["se"] == beats["se"] and out["gross"]["ppv"] < beats["ppv"]
    assert main(["qrs", str(tmp_path / "s2"), "--workers", "1"]) == 0  # the table: Se "-"
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[:4] == ["s2", "-", "0.0000", "0.0000"]
    assert main(["qrs", str(tmp_path), "--json", "--workers", "1", "--span", "annotated"]) == 0
    out = json.loads(capsys.readouterr().out)  # no annotated span: not scored
    assert "tp" not in out["records"][1] and out["gross"]["fp"] == out["records"][0]["fp"]


def test_cli_table_and_lead_by_name(tmp_path, capsys):
    rec = synth_record(1.0, 360.0, 5)
    path = _write_record(tmp_path, "r", rec.signal[:, 0], 360.0, rec.beats())
    assert main(["qrs", str(path), "--lead", "mlii", "--workers", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["record", "Se", "+P", "F1"]
    assert lines[1].split()[0] == "r" and lines[2].split()[0] == "gross"
    assert "whole record" in lines[-1] and "not excluded" in lines[-1]
    assert main(["qrs", str(path), "--lead", "V5"]) == 2
    assert "no such lead" in capsys.readouterr().err
    assert main(["qrs", str(path), "--lead", "lead II", "--workers", "1"]) == 2  # II, not MLII
    assert "no such lead" in capsys.readouterr().err
    assert main(["qrs", str(path), "--lead", "ML II", "--workers", "1"]) == 0


@pytest.mark.parametrize("kind", ["flat", "nan"])
def test_cli_bad_signal_is_one_line_error_or_skip(tmp_path, capsys, kind):
    x = np.full(3600, 0.1 if kind == "flat" else np.nan)
    _write_record(tmp_path, "bad", x, 360.0)
    assert main(["qrs", str(tmp_path / "bad"), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad" in err[0] and ("flat" in err[0] or "NaN" in err[0])
    # Skipped, and nothing left to score: still an error, that says so.
    assert main(["qrs", str(tmp_path / "bad"), "--json", "--skip-bad", "--workers", "1"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == "" and "Traceback" not in captured.err
    assert err[0].startswith("heartlm: skipping") and "bad" in err[0]
    assert err[-1] == f"heartlm: error: {tmp_path}: all 1 records were skipped (see above)"
    rec = synth_record(0.5, 360.0, 3)
    _write_record(tmp_path, "good", rec.signal[:, 0], 360.0, rec.beats())
    assert main(["qrs", str(tmp_path), "--json", "--skip-bad", "--workers", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gross"] is not None and [Path(s["record"]).name for s in out["skipped"]] == ["bad"]


def test_detector_finds_the_last_beat_of_ludb_109_before_an_electrode_step(shared_ecg, capsys):
    # LUDB 109 lead ii ends in an electrode step 0.33 s after its last beat, three times
    # steeper than the beat: the beat was once taken for the step's P wave and missed.
    args = ["qrs", str(shared_ecg / "ludb" / "109"), "--lead", "ii", "--annotations", "ii"]
    assert main([*args, "--span", "annotated", "--json", "--workers", "1"]) == 0
    (rec,) = json.loads(capsys.readouterr().out)["records"]
    assert (rec["tp"], rec["fp"], rec["fn"]) == (rec["n_reference"], 0, 0)


def test_cli_scores_ludb_inside_the_annotated_span(shared_ecg, capsys):
    args = ["qrs", str(shared_ecg / "ludb" / "1"), "--lead", "ii", "--annotations", "ii"]
    assert main([*args, "--span", "annotated", "--json", "--workers", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    (rec,) = out["records"]
    assert out["scored"] == "annotated span" and rec["fs"] == 500.0 and rec["lead"] == "ii"
    assert rec["fp"] == 0 and rec["fn"] == 0 and rec["tp"] == rec["n_reference"] > 5
    # The whole record holds beats before and after the annotated ones: they count as FP there.
    assert main([*args, "--json", "--workers", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["gross"]["fp"] > 0
