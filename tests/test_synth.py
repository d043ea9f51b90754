"""heartlm synth: WFDB output, determinism, labels that sit on the drawn beats, rhythm realism."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import wfdb
from scipy.signal import butter, sosfiltfilt

from heartlm.cli import main
from heartlm.ecg.labels import RHYTHMS, SYMBOL_TO_AAMI
from heartlm.ingest import IngestConfig, ingest
from heartlm.labelled.windows import afib_window_label
from heartlm.store import BeatStore
from heartlm.synth import corpus as corpus_module
from heartlm.synth import synth_record, write_corpus
from heartlm.synth.corpus import SynthConfig, record_kind, write_config, write_signal
from heartlm.synth.noise import add_flutter_waves
from heartlm.synth.patient import Patient, draw_patient


def _record_files(folder: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(folder.iterdir())
        if p.suffix in (".hea", ".dat", ".atr")
    }


def test_same_seed_same_bytes_whatever_the_workers_and_other_seed_differs(tmp_path):
    common = dict(records=3, minutes=0.5, fs=250, afib_fraction=0.5)
    write_corpus(tmp_path / "a", seed=7, workers=1, **common)
    write_corpus(tmp_path / "b", seed=7, workers=2, **common)
    write_corpus(tmp_path / "c", seed=8, workers=1, **common)
    a, b, c = (_record_files(tmp_path / x) for x in "abc")
    assert len(a) == 9 and a == b
    assert a.keys() == c.keys()
    assert all(a[name] != c[name] for name in a if name.endswith((".dat", ".atr")))


@pytest.mark.parametrize("fs", [128, 250, 360, 500, 1000])
def test_records_read_back_with_wfdb(tmp_path, fs):
    write_corpus(tmp_path / "c", records=2, minutes=0.5, fs=fs, seed=3, workers=1)
    assert (tmp_path / "c" / "RECORDS").read_text().split() == ["s0000", "s0001"]
    for i in range(2):
        rec = wfdb.rdrecord(str(tmp_path / "c" / f"s000{i}"))
        ann = wfdb.rdann(str(tmp_path / "c" / f"s000{i}"), "atr")
        mem = synth_record(0.5, fs, (3, i))
        assert rec.fs == fs and rec.sig_name == ["MLII", "V1"] and rec.units == ["mV", "mV"]
        assert rec.p_signal.shape == (round(30 * fs), 2)
        # The file holds the in-memory signal up to the 5 uV quantisation step.
        assert np.abs(rec.p_signal - mem.signal).max() <= 0.5 / 200 + 1e-9
        assert np.array_equal(ann.sample, mem.ann_sample)
        assert ann.symbol == mem.ann_symbol
        assert [a or "" for a in ann.aux_note] == mem.ann_aux


def test_fast_signal_writer_matches_wfdb_wrsamp(tmp_path):
    rec = synth_record(0.2, 360, 11)
    (tmp_path / "ours").mkdir()
    (tmp_path / "wfdb").mkdir()
    write_signal(tmp_path / "ours", "x", rec.signal, rec.fs, rec.sig_names, comments=["c"])
    wfdb.wrsamp(
        "x",
        fs=rec.fs,
        units=["mV", "mV"],
        sig_name=rec.sig_names,
        p_signal=np.round(rec.signal * 200) / 200,
        fmt=["16", "16"],
        adc_gain=[200.0, 200.0],
        baseline=[0, 0],
        comments=["c"],
        write_dir=str(tmp_path / "wfdb"),
    )
    assert _record_files(tmp_path / "ours") == _record_files(tmp_path / "wfdb")


def test_one_lead(tmp_path):
    write_corpus(tmp_path / "c", records=1, minutes=0.2, fs=360, seed=0, leads=1, workers=1)
    rec = wfdb.rdrecord(str(tmp_path / "c" / "s0000"))
    assert rec.sig_name == ["MLII"] and rec.p_signal.shape[1] == 1


def test_symbols_are_mitbih_beats_and_rhythms():
    for kind in (dict(), dict(afib=True), dict(paced=True), dict(flutter=True)):
        rec = synth_record(1, 360, 5, **kind)
        _, symbols = rec.beats()
        assert len(symbols) > 40 and set(symbols) <= set(SYMBOL_TO_AAMI)
        rhythms = [aux for sym, aux in zip(rec.ann_symbol, rec.ann_aux, strict=True) if sym == "+"]
        assert rhythms and all(aux.startswith("(") and aux[1:] in RHYTHMS for aux in rhythms)
        assert np.all(np.diff(rec.ann_sample) > 0)
    assert "(AFIB" in synth_record(1, 360, 5, afib=True).ann_aux
    assert "(AFL" in synth_record(1, 360, 5, flutter=True).ann_aux
    assert set(synth_record(1, 360, 5, paced=True).beats()[1]) & {"/", "f"}


def _peak_errors(rec) -> np.ndarray:
    """Distance (samples) from each beat label to the band-passed lead 0's largest peak of the
    label's own polarity within 30 ms: the R peak, or a wide beat's dominant lobe."""
    fs = rec.fs
    sos = butter(2, [0.5, min(40.0, 0.45 * fs)], btype="band", fs=fs, output="sos")
    bp = sosfiltfilt(sos, rec.signal[:, 0])
    sample, _ = rec.beats()
    h = round(0.03 * fs)
    idx = np.clip(sample[:, None] + np.arange(-h, h + 1)[None, :], 0, len(bp) - 1)
    signed = bp[idx] * np.sign(bp[sample])[:, None]
    return idx[np.arange(len(sample)), signed.argmax(axis=1)] - sample


@pytest.mark.parametrize("fs", [128, 360, 1000])
def test_labels_sit_on_the_drawn_peak(fs):
    for kind in (dict(), dict(afib=True), dict(paced=True)):
        clean = synth_record(1, fs, 2, noise=0.0, **kind)
        assert np.abs(_peak_errors(clean)).max() <= max(1, round(0.002 * fs)), kind
        # Noise moves the apparent top of a wide (V, paced, fusion) lobe by a few samples; a
        # narrow QRS keeps its label within 4 ms, and no label strays as far as 35 ms.
        noisy = synth_record(1, fs, 2, **kind)
        errors = np.abs(_peak_errors(noisy))
        narrow = np.isin(noisy.beats()[1], ["N", "A"])
        assert narrow.sum() > (0 if "paced" in kind else 40), kind
        assert errors[narrow].max(initial=0) <= max(1, round(0.004 * fs)), kind
        assert errors.max() <= 0.035 * fs, kind


def _rr_by_rhythm(rec) -> dict[str, np.ndarray]:
    """RR intervals (s) between consecutive N beats, grouped by the rhythm they fall in."""
    rhythm, out = "", {}
    prev = None
    for sample, sym, aux in zip(rec.ann_sample, rec.ann_symbol, rec.ann_aux, strict=True):
        if sym == "+":
            rhythm, prev = aux, None
            continue
        if sym == "N" and prev is not None and prev[1] == "N":
            out.setdefault(rhythm, []).append((sample - prev[0]) / rec.fs)
        prev = (sample, sym)
    return {k: np.array(v) for k, v in out.items()}


def test_afib_rr_is_irregularly_irregular():
    rr = _rr_by_rhythm(synth_record(4, 250, 1, afib=True))
    assert len(rr["(AFIB"]) > 50 and len(rr["(N"]) > 50

    def irregularity(x):
        return np.median(np.abs(np.diff(x))) / np.median(x)

    assert irregularity(rr["(AFIB"]) > 4 * irregularity(rr["(N"])


def _mean_p_wave(rec, rhythm: str) -> tuple[int, float]:
    """Largest |mean lead-0 deflection| 300-60 ms before N beats that follow a long RR."""
    fs, rows, current, prev = rec.fs, [], "", None
    for sample, sym, aux in zip(rec.ann_sample, rec.ann_symbol, rec.ann_aux, strict=True):
        if sym == "+":
            current = aux
            continue
        if sym == "N" and current == rhythm and prev is not None and sample - prev > 0.75 * fs:
            window = rec.signal[sample - round(0.3 * fs) : sample - round(0.06 * fs), 0]
            rows.append(window - window[-1])
        prev = sample
    return len(rows), float(np.abs(np.mean(rows, axis=0)).max())


def test_afib_beats_have_no_p_wave():
    rec = synth_record(4, 250, 1, afib=True, noise=0.0)
    n_sinus, sinus = _mean_p_wave(rec, "(N")
    n_afib, afib = _mean_p_wave(rec, "(AFIB")
    assert n_sinus >= 20 and n_afib >= 20
    assert sinus > 0.07 and afib < 0.3 * sinus


def _beats_with_neighbours(symbol_wanted: str, seeds=range(6)):
    found = []
    for seed in seeds:
        sample, symbol = synth_record(3, 360, seed).beats()
        t = sample / 360.0
        for i in range(2, len(symbol) - 1):
            if symbol[i] == symbol_wanted and all(symbol[j] == "N" for j in (i - 2, i - 1, i + 1)):
                found.append((t[i - 1] - t[i - 2], t[i] - t[i - 1], t[i + 1] - t[i]))
    return np.array(found)


def test_pvcs_are_early_with_a_compensatory_pause():
    ref, before, after = _beats_with_neighbours("V").T
    assert len(ref) >= 10
    assert np.all(before < 0.85 * ref) and np.all(after > before)
    # Full compensatory pause: the two RRs around the PVC add up to two sinus cycles.
    assert np.all(np.abs((before + after) / (2 * ref) - 1) < 0.15)
    assert abs(np.median((before + after) / (2 * ref)) - 1) < 0.05


def test_pacs_are_early_and_reset_the_sinus_node():
    ref, before, after = _beats_with_neighbours("A").T
    assert len(ref) >= 10
    assert np.all(before < 0.9 * ref)
    assert np.median((before + after) / (2 * ref)) < 0.95  # less than a compensatory pause


def test_run_json_counts_match_the_annotation_files(tmp_path):
    info = write_corpus(tmp_path / "c", records=20, minutes=0.5, fs=128, seed=4, workers=2)
    assert json.loads((tmp_path / "c" / "run.json").read_text())["counts"] == info["counts"]
    symbols, afib = Counter(), 0
    for hea in sorted((tmp_path / "c").glob("*.hea")):
        ann = wfdb.rdann(str(hea.with_suffix("")), "atr")
        symbols.update(s for s in ann.symbol if s != "+")
        afib += "(AFIB" in ann.aux_note
    classes = Counter()
    for sym, count in symbols.items():
        classes[SYMBOL_TO_AAMI[sym]] += count
    counts = info["counts"]
    assert counts["symbols"] == dict(symbols)
    assert counts["classes"] == {c: classes[c] for c in "NSVFQ"}
    assert counts["beats"] == sum(symbols.values())
    assert counts["afib_records"] == afib == 6  # 30 % of 20, spread exactly
    assert counts["paced_records"] >= 1
    assert counts["classes"]["N"] > 0.75 * counts["beats"]
    assert 0 < counts["classes"]["V"] + counts["classes"]["S"] < 0.2 * counts["beats"]


@pytest.mark.parametrize(
    ("flags", "flag"),
    [
        (["--fs", "50"], "--fs"),
        (["--fs", "2000"], "--fs"),
        (["--records", "0"], "--records"),
        (["--minutes", "0"], "--minutes"),
        (["--minutes", "0.01"], "--minutes"),
        (["--afib-fraction", "2"], "--afib-fraction"),
        (["--flutter-fraction", "1.5"], "--flutter-fraction"),
        (["--fusion-fraction", "-0.1"], "--fusion-fraction"),
        (["--workers", "0"], "--workers"),
        (["--seed", "-1"], "--seed"),
        (["--sick-sinus-coupling", "0.9,0.8"], "--sick-sinus-coupling"),
        (["--sick-sinus-coupling", "0.9"], "--sick-sinus-coupling"),
        (["--sick-sinus-ectopy", "0.5,1"], "--sick-sinus-ectopy"),
        (["--sick-sinus-ectopy", "nan,0.9"], "--sick-sinus-ectopy"),
    ],
)
def test_bad_flags_are_one_line_errors(tmp_path, capsys, flags, flag):
    code = main(["synth", str(tmp_path / "out"), *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and flag in err[0] and "Traceback" not in err[0]
    assert list(tmp_path.iterdir()) == []


def test_existing_output_is_refused_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    args = ["synth", str(out), "--records", "1", "--minutes", "0.1", "--workers", "1"]
    assert main(args) == 2
    assert str(out) in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "precious"
    assert main([*args, "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "RECORDS", "run.json", "s0000.atr", "s0000.dat", "s0000.hea"
    ]  # fmt: skip


def test_a_failed_run_leaves_nothing(tmp_path, monkeypatch):
    real = corpus_module.write_record

    def failing(folder, i, config):
        if i == 2:
            raise RuntimeError("disk full")
        return real(folder, i, config)

    monkeypatch.setattr(corpus_module, "write_record", failing)
    with pytest.raises(RuntimeError):
        write_corpus(tmp_path / "out", records=4, minutes=0.1, fs=128, seed=0, workers=1)
    assert list(tmp_path.iterdir()) == []


def test_sick_sinus_patients_have_more_ectopic_than_sinus_beats():
    rec = synth_record(5.0, 250, (4, 0), sick_sinus=True)
    symbols = np.array(rec.ann_symbol)
    beats = np.isin(symbols, ["N", "A"])
    assert set(symbols[beats]) == {"N", "A"} and beats.sum() == np.isin(symbols, list(
        SYMBOL_TO_AAMI)).sum()  # fmt: skip
    assert (symbols == "A").sum() > (symbols == "N").sum()  # the usual beat is ectopic
    assert "(SBR" in rec.ann_aux and "(AFIB" not in rec.ann_aux
    t = np.asarray(rec.ann_sample)[beats] / 250
    rr, kind = np.diff(t), symbols[beats][1:]
    # slow sinus node with pauses; atrial beats come early
    assert np.median(rr[kind == "N"]) > 1.15 and rr[kind == "N"].max() > 2.0
    assert np.median(rr[kind == "A"]) < 0.85 * np.median(rr[kind == "N"])
    assert "(SBR" not in synth_record(5.0, 250, (4, 0)).ann_aux


def _atrial_rr(rec) -> tuple[np.ndarray, float]:
    """RR (s) before each atrial ectopic beat whose previous beat is one too (inside a run,
    so a share of the ectopic focus's cycle, not a pause), and the share of beats that are A."""
    symbols = np.array(rec.ann_symbol)
    beats = np.isin(symbols, ["N", "A"])
    t, kind = np.asarray(rec.ann_sample)[beats] / rec.fs, symbols[beats]
    rr = np.diff(t)
    in_run = (kind[1:] == "A") & (kind[:-1] == "A")
    return rr[in_run], float((kind == "A").mean())


def test_sick_sinus_ectopy_and_coupling_ranges_shape_the_atrial_beats():
    seed = (4, 0)  # the same patient: hr_bpm is drawn before either range is read
    usual_rr, usual_share = _atrial_rr(synth_record(5.0, 250, seed, sick_sinus=True))
    late_rr, _ = _atrial_rr(synth_record(5.0, 250, seed, sick_sinus=True,
                                         sick_sinus_coupling=(0.9, 0.95)))  # fmt: skip
    # the same sinus cycle: the ectopic RR scales with the coupling's range (0.7 -> 0.925)
    assert np.median(late_rr) / np.median(usual_rr) == pytest.approx(0.925 / 0.7, rel=0.05)
    _, many = _atrial_rr(synth_record(5.0, 250, seed, sick_sinus=True,
                                      sick_sinus_ectopy=(0.93, 0.95)))  # fmt: skip
    assert many > 0.85 > usual_share
    # the earliest coupling allowed still fills the record to its end
    early = synth_record(5.0, 250, seed, sick_sinus=True, sick_sinus_ectopy=(0.95, 0.98),
                         sick_sinus_coupling=(0.3, 0.35))  # fmt: skip
    assert early.ann_sample[-1] / early.fs > 5.0 * 60 - 5


def _flutter_fit(rr: np.ndarray) -> tuple[np.ndarray, float]:
    """Fit one atrial cycle (240-340 per minute) that makes every RR a whole 2, 3 or 4 cycles:
    the ratio of each RR, and the largest distance (s) of an RR from its multiple."""
    cycles = np.linspace(60 / 340, 60 / 240, 4001)
    multiples_CK = cycles[:, None] * np.array([2, 3, 4])[None, :]
    off_CR = np.abs(rr[None, :, None] - multiples_CK[:, None, :]).min(axis=2)
    best = int(off_CR.max(axis=1).argmin())
    return np.rint(rr / cycles[best]).astype(int), float(off_CR[best].max())


def test_flutter_rr_is_whole_multiples_of_the_flutter_cycle_with_variable_block():
    rec = synth_record(5.0, 250, (4, 0), flutter=True)
    assert "(AFL" in rec.ann_aux and "(AFIB" not in rec.ann_aux
    rr = _rr_by_rhythm(rec)
    assert len(rr["(AFL"]) > 100 and len(rr["(N"]) > 50
    ratio, worst = _flutter_fit(rr["(AFL"])
    assert worst < 0.015  # every RR within 15 ms of 2, 3 or 4 atrial cycles
    assert set(ratio) <= {2, 3, 4} and sum(np.bincount(ratio) >= 5) >= 2  # variable block
    # The same fit fails on AF's irregularly irregular RR and on sinus rhythm.
    afib = _rr_by_rhythm(synth_record(5.0, 250, (4, 0), afib=True))["(AFIB"]
    assert _flutter_fit(afib)[1] > 0.05 and _flutter_fit(rr["(N"])[1] > 0.05


def _patient(flutter: list[tuple[float, float]]) -> Patient:
    no_ectopy = dict.fromkeys("AVFQf", 0.0)
    p = Patient(70, 0.0, 0.2, 0.0, 0.0, no_ectopy, False, 1.0, [], 0.7, 0.2, flutter=flutter)
    p.flutter_cycle_s, p.flutter_mv = 0.2, 0.15
    return p


def test_flutter_waves_are_a_regular_sawtooth_inside_episodes_only():
    fs = 250.0
    signal_LN = np.zeros((2, round(16 * fs)))
    add_flutter_waves(np.random.default_rng(0), _patient([(4.0, 12.0)]), signal_LN, fs)
    inside = signal_LN[:, round(5 * fs) : round(11 * fs)]
    assert np.ptp(inside[0]) == pytest.approx(2 * 0.15, abs=0.01)
    assert 0.3 < np.ptp(inside[1]) / np.ptp(inside[0]) < 0.7  # smaller in V1
    period = round(0.2 * fs)
    assert np.allclose(inside[0, period:], inside[0, :-period], atol=1e-9)  # regular
    assert (np.diff(inside[0]) < 0).mean() > 0.7  # inverted: slow downslope, quick upstroke
    assert not signal_LN[:, : round(3.5 * fs)].any() and not signal_LN[:, round(12.5 * fs) :].any()
    # Without flutter nothing is added and no random number is drawn.
    rng, untouched = np.random.default_rng(1), np.zeros((2, 100))
    add_flutter_waves(rng, _patient([]), untouched, fs)
    assert not untouched.any() and rng.uniform() == np.random.default_rng(1).uniform()


def _corpus_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for name, data in _record_files(folder).items():
        digest.update(name.encode())
        digest.update(data)
    return digest.hexdigest()


# sha256 of the corpus below as written before --flutter-fraction existed (normal, paced,
# sick-sinus and AFIB records); it changes only if numpy's random streams or maths change.
GOLDEN_CORPUS = "be91953a831307151e80897da286cdd31176a57f4888fd071887c9c8360e40dd"


GOLDEN_CONFIG = dict(records=4, minutes=0.5, fs=250, seed=5, afib_fraction=0.5,
                     paced_fraction=0.25, sick_sinus_fraction=0.25)  # fmt: skip
"""The corpus GOLDEN_CORPUS digests."""


def _changed_by(tmp_path: Path, **extra: float) -> tuple[list[str], dict[str, bytes], dict]:
    """The files of the golden corpus (its digest checked first) that `extra` changes, the
    changed corpus's files, and its run.json counts."""
    write_config(tmp_path / "off", SynthConfig(**GOLDEN_CONFIG), workers=1, overwrite=False)
    assert _corpus_digest(tmp_path / "off") == GOLDEN_CORPUS
    on_config = SynthConfig(**GOLDEN_CONFIG, **extra)
    write_config(tmp_path / "on", on_config, workers=1, overwrite=False)
    off, on = _record_files(tmp_path / "off"), _record_files(tmp_path / "on")
    assert off.keys() == on.keys()
    counts = json.loads((tmp_path / "on" / "run.json").read_text())["counts"]
    return [n for n in off if off[n] != on[n]], on, counts


def test_flutter_leaves_every_other_record_byte_identical(tmp_path):
    flutter = SynthConfig(**GOLDEN_CONFIG, flutter_fraction=0.25)
    assert [record_kind(i, flutter)[3] for i in range(4)] == [True, False, False, False]
    changed, on, counts = _changed_by(tmp_path, flutter_fraction=0.25)
    assert changed == ["s0000.atr", "s0000.dat", "s0000.hea"]
    assert "flutter=True" in on["s0000.hea"].decode()
    assert counts["flutter_records"] == 1 and counts["flutter_episodes"] >= 1
    a, b = synth_record(0.5, 250, (4, 0)), synth_record(0.5, 250, (4, 0), flutter=False)
    assert np.array_equal(a.signal, b.signal) and np.array_equal(a.ann_sample, b.ann_sample)
    assert (a.ann_symbol, a.ann_aux) == (b.ann_symbol, b.ann_aux)


@pytest.mark.parametrize("afib_fraction", [0.5, 1.0])
def test_flutter_records_have_no_afib_and_no_pacing(afib_fraction):
    config = SynthConfig(
        afib_fraction=afib_fraction,
        flutter_fraction=0.5,
        paced_fraction=0.1,
        sick_sinus_fraction=0.1,
    )
    kinds = np.array([record_kind(i, config) for i in range(100)])
    assert kinds.sum(axis=1).max() == 1  # at most one kind per record
    # Pacing displaces flutter, sick sinus displaces AFIB, flutter displaces AFIB.
    assert kinds.sum(axis=0).tolist() == [40, 10, 10, 40, 0, 0, 0]  # afib, paced, sick, flutter, …


def test_ingest_labels_flutter_beats_afl_and_not_afib(tmp_path):
    config = SynthConfig(records=1, minutes=1.0, fs=250, seed=2, flutter_fraction=1.0)
    write_config(tmp_path / "c", config, workers=1, overwrite=False)
    ann = wfdb.rdann(str(tmp_path / "c" / "s0000"), "atr")
    assert "(AFL" in ann.aux_note and "(AFIB" not in ann.aux_note
    ingest([tmp_path / "c"], tmp_path / "store", IngestConfig(workers=1))
    rhythm = BeatStore(tmp_path / "store").table["rhythm"]
    afl, sinus = RHYTHMS.index("AFL"), RHYTHMS.index("N")
    assert set(rhythm.tolist()) == {afl, sinus} and (rhythm == afl).sum() >= 20
    assert afib_window_label(rhythm[rhythm == afl]) == 0


def _beats_in(rec, aux: str) -> tuple[np.ndarray, np.ndarray]:
    """(times in s, symbols) of the beats inside `aux` episodes of a synthetic record."""
    rhythm, times, symbols = "", [], []
    for sample, sym, note in zip(rec.ann_sample, rec.ann_symbol, rec.ann_aux, strict=True):
        if sym == "+":
            rhythm = note
        elif rhythm == aux:
            times.append(sample / rec.fs)
            symbols.append(sym)
    return np.array(times), np.array(symbols)


def _bigeminy_seed(every: int, symbol: str) -> int:
    """A record index of corpus seed 11 whose bigeminy patient has this pattern."""
    for i in range(100):
        p = draw_patient(np.random.default_rng((11, i)), 300.0, 2, False, False, bigeminy=True)
        if (p.bigeminy_every, p.bigeminy_symbol) == (every, symbol):
            return i
    raise AssertionError("no such patient")


@pytest.mark.parametrize(("every", "aux"), [(2, "(B"), (3, "(T")])
def test_ventricular_bigeminy_repeats_its_pattern_with_a_compensatory_pause(every, aux):
    seed = _bigeminy_seed(every, "V")
    rec = synth_record(5.0, 250, (11, seed), bigeminy=True)
    patient = draw_patient(np.random.default_rng((11, seed)), 300.0, 2, False, False, bigeminy=True)
    sinus = 60.0 / patient.hr_bpm
    assert aux in rec.ann_aux and "(AFIB" not in rec.ann_aux
    t, sym = _beats_in(rec, aux)
    assert len(t) > 60
    v = np.flatnonzero(sym[1:-1] == "V") + 1
    gaps = np.diff(v)
    assert (gaps == every).mean() > 0.95  # every 2nd or 3rd beat, beats at the edges aside
    before, after = t[v] - t[v - 1], t[v + 1] - t[v]
    inside = (before < 2.0) & (after < 2.0)  # not across the gap between two episodes
    before, after = before[inside], after[inside]
    assert inside.mean() > 0.9
    # The sinus node keeps its schedule: the RR around a PVC spans two sinus cycles.
    assert np.mean(np.abs(before + after - 2 * sinus) < 0.05 * 2 * sinus) > 0.95
    coupling = before / sinus
    assert 0.5 < np.median(coupling) < 0.8 and np.std(coupling) < 0.05  # a fixed coupling


def test_atrial_bigeminy_resets_the_sinus_node_and_keeps_the_sinus_label():
    seed = _bigeminy_seed(2, "A")
    rec = synth_record(5.0, 250, (11, seed), bigeminy=True)
    patient = draw_patient(np.random.default_rng((11, seed)), 300.0, 2, False, False, bigeminy=True)
    sinus = 60.0 / patient.hr_bpm
    assert not {"(B", "(T", "(AFIB"} & set(rec.ann_aux)  # sinus rhythm with premature beats
    sym = np.array([s for s in rec.ann_symbol if s != "+"])
    t = np.array([x for x, s in zip(rec.ann_sample, rec.ann_symbol, strict=True) if s != "+"])
    a = np.flatnonzero(sym[1:-1] == "A") + 1
    assert len(a) > 50 and (sym[a - 1] == "N").all()
    before, after = (t[a] - t[a - 1]) / rec.fs, (t[a + 1] - t[a]) / rec.fs
    assert np.median(before) < 0.85 * sinus  # premature
    # The sinus node starts again from the premature beat: no compensatory pause.
    assert 0.98 < np.median(after) / sinus < 1.12


def _only_its_record_changes(tmp_path: Path, kind: str) -> int:
    """With a quarter of the golden corpus of `kind` (a RecordKind field, `--KIND-fraction`),
    one record is of that kind and not AFIB, and only its files change; its index."""
    config = SynthConfig(**GOLDEN_CONFIG, **{f"{kind}_fraction": 0.25})
    chosen = [i for i in range(4) if getattr(record_kind(i, config), kind)]
    assert len(chosen) == 1 and not record_kind(chosen[0], config).afib
    changed, on, counts = _changed_by(tmp_path, **{f"{kind}_fraction": 0.25})
    name = f"s{chosen[0]:04d}"
    assert changed == [f"{name}.atr", f"{name}.dat", f"{name}.hea"]
    assert f"{kind}=True" in on[f"{name}.hea"].decode()
    assert counts[f"{kind}_records"] == 1
    return chosen[0]


def test_bigeminy_leaves_every_other_record_byte_identical(tmp_path):
    _only_its_record_changes(tmp_path, "bigeminy")


def test_ingest_labels_ventricular_bigeminy_b_and_not_afib(tmp_path):
    seed = _bigeminy_seed(2, "V")
    config = SynthConfig(records=seed + 1, minutes=5.0, fs=250, seed=11, bigeminy_fraction=1.0,
                         afib_fraction=0.0, paced_fraction=0.0)  # fmt: skip
    assert record_kind(seed, config).bigeminy
    write_config(tmp_path / "c", config, workers=1, overwrite=False)
    ingest([tmp_path / "c" / f"s{seed:04d}"], tmp_path / "store", IngestConfig(workers=1))
    rhythm = BeatStore(tmp_path / "store").table["rhythm"]
    bigeminy = rhythm == RHYTHMS.index("B")
    assert bigeminy.sum() >= 60 and set(rhythm.tolist()) == {RHYTHMS.index("N"), RHYTHMS.index("B")}
    assert afib_window_label(rhythm[bigeminy]) == 0


def test_afib_with_ectopy_leaves_every_other_record_byte_identical(tmp_path):
    _only_its_record_changes(tmp_path, "afib_ectopy")


def test_fusion_leaves_every_other_record_byte_identical(tmp_path):
    chosen = _only_its_record_changes(tmp_path, "fusion")
    # the record is the fusion patient's: what synth_record draws for one
    written = wfdb.rdann(str(tmp_path / "on" / f"s{chosen:04d}"), "atr")
    drawn = synth_record(0.5, 250, (5, chosen), fusion=True)
    assert written.symbol == drawn.ann_symbol and (written.sample == drawn.ann_sample).all()
    assert drawn.ann_symbol != synth_record(0.5, 250, (5, chosen)).ann_symbol


def test_a_fusion_patient_s_fusion_beats_blend_its_beats_in_proportions_that_vary():
    """Frequent F beats on the sinus schedule (not premature, as a PVC is), each one of
    several blends whose QRS lies between the sinus beat's and the ventricular beat's."""
    from heartlm.synth.rhythm import draw_beats

    for i in range(4):
        rng = np.random.default_rng((3, i))
        patient = draw_patient(rng, 300.0, 2, False, False, fusion=True)
        beats = draw_beats(rng, patient, 300.0)
        normal, ventricular = patient.templates["N"][0], patient.templates["V"][0]
        blends = patient.templates["F"]
        assert len(blends) == 4 and not patient.afib
        r_wave = np.abs(normal.offset).argmin()  # the sinus R wave, at the beat's time
        shares = []
        for blend in blends:
            # the P wave whole, as the atria are activated as usual
            assert np.allclose(blend.amp_KL[blend.offset == normal.offset[0]], normal.amp_KL[0])
            r = np.flatnonzero((blend.offset == 0) & (blend.width == normal.width[r_wave]))
            share = blend.amp_KL[r[0], 0] / normal.amp_KL[r_wave, 0]
            assert np.isclose(np.abs(blend.amp_KL).sum() - np.abs(normal.amp_KL[0]).sum(),
                              share * np.abs(normal.amp_KL[1:]).sum()
                              + (1 - share) * np.abs(ventricular.amp_KL).sum())  # fmt: skip
            shares.append(share)
        assert 0.2 <= min(shares) <= max(shares) <= 0.8 and len(set(np.round(shares, 6))) == 4
        f = np.flatnonzero(beats.symbol == "F")
        assert 0.04 < len(f) / len(beats.symbol) < 0.15
        assert len(set(beats.variant[f].tolist())) >= 3
        sinus = 60.0 / patient.hr_bpm
        f = f[(f > 0) & (beats.symbol[f - 1] == "N")]
        assert np.median(np.diff(beats.time)[f - 1]) > 0.85 * sinus
    usual = draw_patient(np.random.default_rng((3, 0)), 300.0, 2, False, False)
    assert len(usual.templates["F"]) == 1


def _v_share_in_af(rec) -> tuple[float, int]:
    """The share of V beats among the beats inside AFIB episodes, and how many beats those are."""
    rhythm, in_af, v = "", 0, 0
    for symbol, aux in zip(rec.ann_symbol, rec.ann_aux, strict=True):
        if symbol == "+":
            rhythm = aux
        elif rhythm == "(AFIB":
            in_af, v = in_af + 1, v + (symbol == "V")
    return v / max(in_af, 1), in_af


def test_afib_with_ectopy_puts_frequent_ventricular_beats_inside_its_af():
    shares = []
    for i in range(6):
        rec = synth_record(5.0, 250, (3, i), afib_ectopy=True)
        patient = draw_patient(np.random.default_rng((3, i)), 300.0, 2, False, False,
                               afib_ectopy=True)  # fmt: skip
        share, beats = _v_share_in_af(rec)
        assert beats >= 100 and patient.afib and 0.1 <= patient.afib_v <= 0.25
        assert abs(share - patient.afib_v) < 0.08  # drawn per beat at the patient's share
        shares.append(share)
    assert min(shares) > 0.05 and max(shares) < 0.33
    # The usual AF patient's ventricular beats in AF stay at half its sinus rate.
    usual = [_v_share_in_af(synth_record(5.0, 250, (3, i), afib=True))[0] for i in range(6)]
    assert np.median(usual) < np.median(shares)
