"""`heartlm ingest`: real records against their reference annotations, other rates, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import wfdb
from scipy import signal

from heartlm.cli import main
from heartlm.ecg.annfile import read_mit_annotations
from heartlm.ecg.labels import AAMI_CLASSES, RHYTHMS, SYMBOL_TO_AAMI
from heartlm.errors import HeartlmError
from heartlm.ingest import IngestConfig, ingest
from heartlm.ingest.beats import rhythm_from_comments
from heartlm.ingest.filters import bandpass_resample, map_positions
from heartlm.ingest.leads import pick_lead
from heartlm.ingest.pipeline import _ordered
from heartlm.store import BeatStore

V, AFIB = AAMI_CLASSES.index("V"), RHYTHMS.index("AFIB")


# ---------- helpers ----------


def _mitdb_100(shared: Path, seconds: float = 30) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Lead MLII of mitdb/100 (mV, 360 Hz) and its annotations over the first `seconds`."""
    n = int(seconds * 360)
    rec = wfdb.rdrecord(str(shared / "mitdb" / "100"), sampto=n, channels=[0])
    ann = wfdb.rdann(str(shared / "mitdb" / "100"), "atr", sampto=n - 1)
    return rec.p_signal[:, 0], np.asarray(ann.sample), list(ann.symbol)


def _toy(seconds: float = 30, fs: float = 360) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """A toy ECG (narrow R waves on a noisy baseline) with its beat annotations: bad-input
    tests need a valid record to damage, not real data, so they run without ../shared."""
    rng = np.random.default_rng(0)
    t = np.arange(int(seconds * fs)) / fs
    beats_s = np.cumsum(rng.uniform(0.7, 0.9, int(seconds)))
    beats_s = beats_s[beats_s < seconds - 0.05]
    x = 0.02 * rng.standard_normal(len(t)) + 0.1 * np.sin(2 * np.pi * 0.3 * t)
    for b in beats_s:
        x += 1.2 * np.exp(-0.5 * ((t - b) / 0.012) ** 2)
    symbol = ["V" if i % 5 == 4 else "N" for i in range(len(beats_s))]
    return x, np.rint(beats_s * fs).astype(int), symbol


def _write(folder: Path, name: str, x: np.ndarray, fs: float, sample=None, symbol=None) -> Path:
    """A one-lead record; NaN samples are written as WFDB's invalid value (missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    digital = np.where(np.isnan(x), -32768, np.rint(np.nan_to_num(x) * 1000)).astype(np.int64)
    wfdb.wrsamp(name, fs=fs, units=["mV"], sig_name=["MLII"], d_signal=digital[:, None],
                fmt=["16"], adc_gain=[1000.0], baseline=[0], write_dir=str(folder))  # fmt: skip
    if sample is not None:
        wfdb.wrann(name, "atr", np.asarray(sample), list(symbol), write_dir=str(folder))
    return folder / name


def _n_beats(symbols: list[str]) -> int:
    return sum(s in SYMBOL_TO_AAMI for s in symbols)


def _cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(["ingest", *argv])
    return code, capsys.readouterr().err


def _assert_one_line_error(code: int, err: str, path_part: str, problem: str) -> None:
    lines = [line for line in err.strip().splitlines() if line.startswith("heartlm: error:")]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert path_part in lines[0] and problem in lines[0], lines[0]


def _nothing_written(parent: Path, out: Path) -> None:
    assert not out.exists()
    assert not [p for p in parent.iterdir() if p.name.startswith(f".{out.name}.")]


@pytest.fixture
def good(tmp_path) -> Path:
    """A 30 s single-lead toy record with reference annotations, written by wfdb."""
    x, sample, symbol = _toy()
    return _write(tmp_path / "src", "good", x, 360, sample, symbol)


@pytest.fixture(scope="module")
def real_store(tmp_path_factory) -> tuple[BeatStore, dict]:
    """mitdb 100, 201, 208 and nstdb 118e06 ingested once, with two worker processes."""
    from conftest import SHARED_ECG

    if not (SHARED_ECG / "mitdb").is_dir():
        pytest.skip(f"real ECG databases not found at {SHARED_ECG}")
    out = tmp_path_factory.mktemp("real") / "store"
    sources = [SHARED_ECG / "mitdb" / r for r in ("100", "201", "208")]
    sources.append(SHARED_ECG / "nstdb" / "118e06")
    info = ingest(sources, out, IngestConfig(workers=2))
    return BeatStore(out), info


# ---------- real databases ----------


def test_real_counts_match_reference_annotations(real_store):
    store, info = real_store
    for i, rec in enumerate(store.records):
        ann = wfdb.rdann(rec.source, "atr")
        rows = store.table[store.record_slice(i)]
        annotated = _n_beats(ann.symbol)
        assert len(rows) + rec.extra["dropped_beats"] == annotated, rec.name
        assert rec.lead == "MLII" and rec.beat_source == "annotations"
        # Every row's class is the AAMI class of its reference symbol.
        expected = [AAMI_CLASSES.index(SYMBOL_TO_AAMI[s.decode()]) for s in rows["symbol"]]
        np.testing.assert_array_equal(rows["aami"], expected)
    assert info["counts"]["beats"] == len(store)
    assert info["counts"]["beats_found"] == len(store) + info["counts"]["dropped_beats"]


def test_real_classes_and_rhythms(real_store):
    store, _ = real_store
    by_name = {r.name: i for i, r in enumerate(store.records)}
    rows_208 = store.table[store.record_slice(by_name["208"])]
    ann = wfdb.rdann(store.records[by_name["208"]].source, "atr")
    n_v = sum(s in ("V", "E") for s in ann.symbol)
    assert n_v > 900
    assert abs(int((rows_208["aami"] == V).sum()) - n_v) <= 2  # at most the edge beats dropped
    rows_201 = store.table[store.record_slice(by_name["201"])]
    assert (rows_201["rhythm"] == AFIB).sum() > 300
    assert (store.table[store.record_slice(by_name["100"])]["rhythm"] != AFIB).all()


def test_real_positions_rr_and_centring(real_store):
    store, _ = real_store
    fs, pre = store.fs, store.pre_samples
    for i, rec in enumerate(store.records):
        rows = store.table[store.record_slice(i)]
        gaps = np.diff(rows["sample"]) / fs
        np.testing.assert_allclose(rows["rr_next"][:-1], gaps, rtol=1e-6)
        np.testing.assert_allclose(rows["rr_prev"][1:], gaps, rtol=1e-6)
        # Table samples stay within the alignment radius of the reference positions.
        ann = wfdb.rdann(rec.source, "atr")
        ref = np.array(
            [s for s, y in zip(ann.sample, ann.symbol, strict=True) if y in SYMBOL_TO_AAMI]
        )
        radius = 0.04 * fs + 1  # --align plus rounding to the store's rate
        ref = ref[np.searchsorted(ref, (rows["sample"] - radius) * 360 / fs)]
        assert np.abs(rows["sample"] - ref * fs / 360).max() <= radius
        if rec.db != "mitdb":
            continue
        w = np.asarray(store.beats[store.record_slice(i)])
        c, left, right = w[:, pre], w[:, pre - 1], w[:, pre + 1]
        extremum = ((c >= left) & (c >= right)) | ((c <= left) & (c <= right))
        assert extremum.mean() >= 0.99, rec.name
        assert store.window_samples == 163 == store.beats.shape[1]  # 0.25 s + 0.40 s at 250 Hz


def test_ludb_per_lead_annotations_and_header_rhythm(shared_ecg, tmp_path):
    ludb = shared_ecg / "ludb"
    afib = next(h for h in sorted(ludb.glob("*.hea")) if "fibrillation" in h.read_text())
    records = [ludb / "1", afib.with_suffix("")]
    info = ingest(records, tmp_path / "s", IngestConfig(annotations="atr,ii", workers=1))
    store = BeatStore(tmp_path / "s")
    for i, rec in enumerate(store.records):
        ann = wfdb.rdann(rec.source, "ii")
        rows = store.table[store.record_slice(i)]
        assert len(rows) + rec.extra["dropped_beats"] == ann.symbol.count("N")
        assert rec.lead == "ii" and rec.fs_source == 500
        assert (rows["aami"] == -1).all()  # delineation files mark QRS complexes, not classes
    assert (store.table[store.record_slice(1)]["rhythm"] == AFIB).all()
    assert (store.table[store.record_slice(0)]["rhythm"] == RHYTHMS.index("SBR")).all()
    assert info["counts"]["aami"] == {"unlabelled": len(store)}


def test_detect_when_no_annotations(shared_ecg, tmp_path):
    pytest.importorskip("heartlm.qrs")
    x, sample, symbol = _mitdb_100(shared_ecg)
    good = _write(tmp_path / "src", "good", x, 360, sample, symbol)
    ref = wfdb.rdann(str(good), "atr")
    (good.parent / "good.atr").unlink()
    info = ingest([good], tmp_path / "s", IngestConfig(workers=1))
    store = BeatStore(tmp_path / "s")
    assert store.records[0].beat_source == "detect" and info["counts"]["records_detected"] == 1
    assert (store.table["aami"] == -1).all() and (store.table["symbol"] == b"").all()
    n_ref = _n_beats(ref.symbol)
    assert abs(len(store) + store.records[0].extra["dropped_beats"] - n_ref) <= 2


@pytest.mark.parametrize("fs", [128, 1000])
@pytest.mark.parametrize("source", ["mitdb", "toy"])
def test_other_sampling_rates(request, tmp_path, fs, source):
    if source == "mitdb":
        x, sample, symbol = _mitdb_100(request.getfixturevalue("shared_ecg"))
    else:
        x, sample, symbol = _toy()
    up, down = (16, 45) if fs == 128 else (25, 9)
    y = signal.resample_poly(x, up, down)
    at_fs = np.rint(sample * fs / 360).astype(int)
    _write(tmp_path / "a", "r360", x, 360, sample, symbol)
    _write(tmp_path / "b", f"r{fs}", y, fs, at_fs, symbol)
    ingest([tmp_path / "a"], tmp_path / "s360", IngestConfig(workers=1))
    ingest([tmp_path / "b"], tmp_path / "sfs", IngestConfig(workers=1))
    a, b = BeatStore(tmp_path / "s360"), BeatStore(tmp_path / "sfs")
    assert b.records[0].fs_source == fs and b.fs == 250
    assert len(b) == len(a) and len(a) + a.records[0].extra["dropped_beats"] == _n_beats(symbol)
    assert np.abs(a.table["sample"] - b.table["sample"]).max() <= 1
    np.testing.assert_array_equal(a.table["aami"], b.table["aami"])
    # Same beats, same shape: the windows agree up to resampling error.
    corr = [np.corrcoef(u, v)[0, 1] for u, v in zip(a.beats, b.beats, strict=True)]
    assert np.median(corr) > 0.95


def test_workers_give_identical_store(good, tmp_path):
    x, sample, symbol = _toy(seconds=20)
    again = _write(tmp_path / "src2", "again", -x, 360, sample, symbol)
    sources = [good.parent, again]
    ingest(sources, tmp_path / "one", IngestConfig(workers=1))
    ingest(sources, tmp_path / "two", IngestConfig(workers=2))
    for name in ("beats.f32", "table.bin"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


def test_config_round_trip_through_run_json(good, tmp_path):
    config = IngestConfig(lead="mlii", fs=200, pre=0.2, post=0.3, band=(1, 30), workers=1)
    ingest([good], tmp_path / "s", config)
    again = IngestConfig.from_run_json(tmp_path / "s")
    assert again == config
    store = BeatStore(tmp_path / "s")
    assert (store.fs, store.pre_samples, store.post_samples) == (200, 40, 60)


# ---------- small pieces ----------


def test_lead_fallback_order():
    assert pick_lead(["V1", "MLII"]) == 1
    assert pick_lead(["i", "ii", "iii"]) == 1
    assert pick_lead(["V1", "V5"]) == 1
    assert pick_lead(["V1", "V5"], "v1") == 0
    assert pick_lead(["ECG1", "ECG2"]) == 0
    assert pick_lead(["V1", "V5"], "MLII,v5,v1") == 1  # a list: the first the record has
    assert pick_lead(["SpO2", "EKG", "ECG II"]) == 2  # EDF labels: type prefix, then the lead
    assert pick_lead(["SpO2", "EKG"]) == 1  # no known lead: the first ECG signal
    assert pick_lead(["V1", "lead II"]) == 1  # the word "lead" first, as some exports write
    assert pick_lead(["V1", "ECG Lead II"]) == 1
    assert pick_lead(["V1", "ML II"]) == 1
    assert pick_lead(["ECG1", "Lead_V5"], "v5") == 1
    with pytest.raises(HeartlmError, match="--lead MLII: no such lead"):
        pick_lead(["ECG1", "ECG2"], "MLII")


def test_rhythm_from_header_comments():
    assert rhythm_from_comments(["<age>: 51", "Rhythm: Atrial fibrillation."]) == AFIB
    assert rhythm_from_comments(["Rhythm: Sinus rhythm."]) == RHYTHMS.index("N")
    assert rhythm_from_comments(["Rhythm: Junctional."]) == RHYTHMS.index("other")
    assert rhythm_from_comments(["69 M 1085 1629 x1"]) is None


def test_records_in_flight_are_bounded():
    in_flight, peak = 0, 0

    class Done:
        def __init__(self, value):
            self.value = value

        def result(self):
            nonlocal in_flight
            in_flight -= 1
            return self.value

    def submit(fn, item, config):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        return Done(fn(item, config))

    got = list(_ordered(submit, lambda i, c: i * 2, list(range(50)), None, workers=3))
    assert got == [i * 2 for i in range(50)] and peak <= 6


# ---------- bad input ----------


def test_missing_and_truncated_dat(good, tmp_path, capsys):
    dat = good.parent / "good.dat"
    data = dat.read_bytes()
    dat.write_bytes(data[: len(data) // 2])
    code, err = _cli(capsys, str(good), "--out", str(tmp_path / "out"))
    _assert_one_line_error(code, err, "good.dat", "truncated")
    _nothing_written(tmp_path, tmp_path / "out")
    dat.unlink()
    code, err = _cli(capsys, str(good), "--out", str(tmp_path / "out"))
    _assert_one_line_error(code, err, "good.dat", "signal file is missing")
    _nothing_written(tmp_path, tmp_path / "out")


def test_malformed_header(good, tmp_path, capsys):
    (good.parent / "good.hea").write_text("good one 360 abc\nnot a signal line\n")
    code, err = _cli(capsys, str(good.parent), "--out", str(tmp_path / "out"))
    _assert_one_line_error(code, err, "good.hea", "malformed header")
    _nothing_written(tmp_path, tmp_path / "out")


def test_annotation_without_its_signal(good, tmp_path, capsys):
    shutil.copy(good.parent / "good.atr", good.parent / "lost.atr")
    code, err = _cli(capsys, str(good.parent), "--out", str(tmp_path / "out"))
    _assert_one_line_error(code, err, "lost.atr", "without its record")
    code, err = _cli(capsys, str(good.parent / "lost.atr"), "--out", str(tmp_path / "out"))
    _assert_one_line_error(code, err, "lost.atr", "without its .hea")
    _nothing_written(tmp_path, tmp_path / "out")


def test_unknown_symbols_are_reported_not_mapped(tmp_path, capsys):
    x, sample, symbol = _toy()
    symbol = ["n" if i == 5 else s for i, s in enumerate(symbol)]  # 'n': escape beat, unmapped
    rec = _write(tmp_path / "src", "odd", x, 360, sample, symbol)
    code, err = _cli(capsys, str(rec), "--out", str(tmp_path / "out"), "--workers", "1")
    _assert_one_line_error(code, err, "odd.atr", "'n'")
    _nothing_written(tmp_path, tmp_path / "out")
    _write(tmp_path / "src", "fine", x, 360, *_toy()[1:])
    args = [str(tmp_path / "src"), "--out", str(tmp_path / "out"), "--skip-bad", "--workers", "1"]
    code, err = _cli(capsys, *args)
    assert code == 0 and "odd.atr" in err
    info = json.loads((tmp_path / "out" / "run.json").read_text())
    assert [Path(s["record"]).name for s in info["skipped"]] == ["odd.atr"]
    store = BeatStore(tmp_path / "out")
    assert [r.name for r in store.records] == ["fine"]


@pytest.mark.parametrize(
    "damage, problem",
    [("flat", "flat"), ("nan", "all missing"), ("gappy", "no stretch without a gap")],
)
def test_flat_or_missing_signal(tmp_path, capsys, damage, problem):
    x, sample, symbol = _toy(seconds=10)
    if damage == "flat":
        x = np.zeros_like(x)
    elif damage == "nan":
        x = np.full_like(x, np.nan)
    else:  # 0.55 s gaps every 0.6 s: no stretch holds a 0.65 s window
        x = np.where(np.arange(len(x)) % 216 < 198, np.nan, x)
    rec = _write(tmp_path / "src", "bad", x, 360, sample, symbol)
    code, err = _cli(capsys, str(rec), "--out", str(tmp_path / "out"))
    _assert_one_line_error(code, err, "src/bad:", problem)
    _nothing_written(tmp_path, tmp_path / "out")


def test_record_shorter_than_one_window(tmp_path, capsys):
    x, _, _ = _toy(seconds=1)
    rec = _write(tmp_path / "src", "short", x[:200], 360)
    code, err = _cli(capsys, str(rec), "--out", str(tmp_path / "out"), "--beats", "detect")
    _assert_one_line_error(code, err, "short", "shorter than one beat window")
    _nothing_written(tmp_path, tmp_path / "out")


def test_folder_without_records(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, err = _cli(capsys, str(tmp_path / "empty"), "--out", str(tmp_path / "out"))
    _assert_one_line_error(code, err, "empty", "no WFDB or EDF records")
    _nothing_written(tmp_path, tmp_path / "out")


def test_bad_flag_is_one_line(good, tmp_path, capsys):
    code, err = _cli(capsys, str(good), "--out", str(tmp_path / "out"), "--band", "30,10")
    _assert_one_line_error(code, err, "", "--band")


def test_existing_store_refused_unless_overwrite(good, tmp_path, capsys):
    out = tmp_path / "out"
    assert _cli(capsys, str(good), "--out", str(out), "--workers", "1")[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, err = _cli(capsys, str(good), "--out", str(out), "--fs", "200")
    _assert_one_line_error(code, err, str(out), "already holds results")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # A failing --overwrite run leaves the old store in place too.
    (good.parent / "good.dat").unlink()
    code, err = _cli(capsys, str(good), "--out", str(out), "--overwrite")
    assert code == 2 and {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def test_overwrite_replaces(good, tmp_path, capsys):
    out = tmp_path / "out"
    assert _cli(capsys, str(good), "--out", str(out), "--workers", "1")[0] == 0
    assert _cli(capsys, str(good), "--out", str(out), "--fs", "200", "--overwrite")[0] == 0
    assert BeatStore(out).fs == 200


def test_skip_bad_lists_the_skipped_record(good, tmp_path, capsys):
    _write(good.parent, "flat", np.zeros(3600), 360)
    out = tmp_path / "out"
    code, err = _cli(capsys, str(good.parent), "--out", str(out), "--skip-bad", "--workers", "2")
    assert code == 0 and "skipping" in err and "flat" in err
    info = json.loads((out / "run.json").read_text())
    assert [Path(s["record"]).name for s in info["skipped"]] == ["flat"]
    assert "flat" in info["skipped"][0]["problem"]
    assert [r.name for r in BeatStore(out).records] == ["good"]


# ---------- filters, annotation reader, lead choice ----------


@pytest.mark.parametrize("fs_in", [128, 360, 500, 1000])
def test_filter_keeps_peaks_in_place(fs_in):
    x = np.zeros(int(fs_in * 20), np.float32)
    spikes = np.arange(2, 18, 1.3)
    x[np.rint(spikes * fs_in).astype(int)] = 1.0
    y = bandpass_resample(x, fs_in, 250, (0.5, 40))
    assert len(y) == int(np.ceil(len(x) * 250 / fs_in))
    found = signal.find_peaks(y, height=0.5 * y.max())[0]
    np.testing.assert_array_equal(found, map_positions(np.rint(spikes * fs_in), fs_in, 250))


def test_fast_annotation_reader_agrees_with_wfdb(shared_ecg):
    files = [*shared_ecg.glob("mitdb/*.atr"), *shared_ecg.glob("nstdb/*.atr")]
    files += sorted(shared_ecg.glob("ludb/*.ii"))[:20]
    assert len(files) > 60
    for f in files:
        fast = read_mit_annotations(f.with_suffix(""), f.suffix[1:])
        ref = wfdb.rdann(str(f.with_suffix("")), f.suffix[1:])
        assert fast is not None, f
        np.testing.assert_array_equal(fast.sample, ref.sample)
        assert fast.symbol == ref.symbol and fast.aux_note == list(ref.aux_note), f


def test_lead_by_name_and_fallback(shared_ecg, tmp_path):
    rec = shared_ecg / "mitdb" / "101"
    info = ingest([rec], tmp_path / "v1", IngestConfig(lead="v1", workers=1))
    assert BeatStore(tmp_path / "v1").records[0].lead == "V1"
    assert info["counts"]["lead_fallbacks"] == 0
    info = ingest([rec], tmp_path / "v5", IngestConfig(lead="V5,MLII", workers=1))
    assert BeatStore(tmp_path / "v5").records[0].lead == "MLII"
    assert info["counts"]["lead_fallbacks"] == 1
    with pytest.raises(HeartlmError, match="--lead V5: no such lead"):
        ingest([rec], tmp_path / "none", IngestConfig(lead="V5", workers=1))
    assert not (tmp_path / "none").exists()


def test_missing_annotations_in_annotations_mode(good, tmp_path, capsys):
    code, err = _cli(capsys, str(good), "--out", str(tmp_path / "out"), "--beats", "annotations",
                     "--annotations", "qrs")  # fmt: skip
    _assert_one_line_error(code, err, "good.hea", "no .qrs annotation file")
    _nothing_written(tmp_path, tmp_path / "out")


def test_rate_too_low_for_the_band(tmp_path, capsys):
    x, sample, symbol = _toy(seconds=10)
    rec = _write(tmp_path / "src", "slow", x[::6], 60, sample // 6, symbol)
    code, err = _cli(capsys, str(rec), "--out", str(tmp_path / "out"))
    _assert_one_line_error(code, err, "slow.hea", "too low for --band")
    assert _cli(capsys, str(rec), "--out", str(tmp_path / "out"), "--band", "0.5,25")[0] == 0
