"""Tests of `heartlm tokenize`: codebook, rhythm bins, shards and their reader, bad input."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from heartlm import shards
from heartlm.cli import main
from heartlm.errors import HeartlmError
from heartlm.log import logger
from heartlm.shards import NUM_SPECIAL, UNK
from heartlm.store import TABLE_DTYPE, RecordEntry, StoreWriter
from heartlm.tokens import Codebook, TokenizeConfig, TokenSet, tokenize
from heartlm.tokens.codebook import cluster_sums, train_kmeans
from heartlm.tokens.rhythm import N_BINS, rhythm_tokens

W = 64
V = 2  # AAMI code of class V
REGULAR_RHYTHM = NUM_SPECIAL + (N_BINS // 2) * N_BINS + N_BINS // 2  # both RR ratios near 1


def _templates() -> np.ndarray:
    t = np.linspace(-1, 1, W)
    narrow_qrs = np.exp(-((t / 0.05) ** 2))
    inverted = -0.8 * np.exp(-((t / 0.12) ** 2))
    wide_v = 1.5 * np.exp(-(((t - 0.3) / 0.2) ** 2)) - np.exp(-(((t + 0.3) / 0.1) ** 2))
    return np.stack([narrow_qrs, inverted, wide_v])


def _write_store(
    folder: Path, n_records: int = 3, beats: int = 300, seed: int = 0, fs: float = 100.0
) -> Path:
    """A store whose beats are 3 templates (template k labelled AAMI class k: N, S, V) with
    random gain, offset and noise; every 10th beat is premature (RR before short, after long)."""
    rng = np.random.default_rng(seed)
    templates = _templates()
    w = StoreWriter(folder, fs=fs, pre_samples=W // 2, post_samples=W // 2)
    for r in range(n_records):
        label = rng.integers(0, 3, beats)
        x = templates[label] * rng.uniform(0.5, 2.0, (beats, 1))
        x += rng.normal(0, 0.1, (beats, 1)) + rng.normal(0, 0.02, (beats, W))
        table = np.zeros(beats, TABLE_DTYPE)
        rr = np.full(beats + 1, 0.8)
        rr[10::10] = 0.5  # premature beat i: short RR before (rr[i]), long after (rr[i + 1])
        rr[11::10] = 1.1
        table["rr_prev"], table["rr_next"] = rr[:-1], rr[1:]
        table["rr_prev"][0] = table["rr_next"][-1] = np.nan
        table["aami"] = label
        table["rhythm"] = 1
        table["sample"] = np.arange(beats) * 80
        w.append(RecordEntry(f"r{r}", "synthetic", "x", fs, "I", beats * 80), x, table)
    w.close()
    return folder


@pytest.fixture(autouse=True)
def _fresh_log_handlers():
    """`main()` binds heartlm's log handler to the sys.stderr of its test; drop it after."""
    yield
    logger.handlers.clear()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return _write_store(tmp_path / "store")


def _config(**kw) -> TokenizeConfig:
    return TokenizeConfig(**{"vocab": 3, "sample": 10_000, "iters": 20, "device": "cpu", **kw})


def test_round_trip_and_alignment(store, tmp_path):
    from heartlm.store import BeatStore

    tokenize(store, tmp_path / "tok", _config())
    ts = TokenSet.load(tmp_path / "tok")
    s = BeatStore(store)
    assert len(ts) == len(s) == 900 and ts.vocab_size == NUM_SPECIAL + 3
    np.testing.assert_array_equal(ts.aami, s.table["aami"])
    np.testing.assert_array_equal(ts.rhythm_label, s.table["rhythm"])
    assert list(ts.boundaries) == [0, 300, 600, 900]
    assert [r["name"] for r in ts.records] == ["r0", "r1", "r2"]
    assert ts.meta["codebook_hash"] == Codebook.load(tmp_path / "tok").content_hash
    assert json.loads((tmp_path / "tok" / "run.json").read_text())["stage"] == "tokenize"


def test_same_template_same_code_and_v_beats_carry_v(store, tmp_path):
    tokenize(store, tmp_path / "tok", _config())
    ts = TokenSet.load(tmp_path / "tok")
    morph, aami = np.asarray(ts.morph), np.asarray(ts.aami)
    code_of = {c: set(morph[aami == c].tolist()) for c in range(3)}
    assert all(len(codes) == 1 for codes in code_of.values()), code_of
    assert len(set.union(*code_of.values())) == 3  # three templates, three codes
    v_code = next(iter(code_of[V]))
    np.testing.assert_array_equal(aami[morph == v_code], V)


def test_deterministic_under_seed(store, tmp_path):
    config = _config(vocab=8, seed=7, sample=500)
    tokenize(store, tmp_path / "a", config)
    tokenize(store, tmp_path / "b", config)
    a, b = TokenSet.load(tmp_path / "a"), TokenSet.load(tmp_path / "b")
    np.testing.assert_array_equal(a.morph, b.morph)
    np.testing.assert_array_equal(a.rhythm, b.rhythm)
    assert a.meta["codebook_hash"] == b.meta["codebook_hash"]


def test_reused_codebook_gives_identical_tokens(store, tmp_path):
    tokenize(store, tmp_path / "a", _config(vocab=8))
    tokenize(store, tmp_path / "b", _config(codebook=tmp_path / "a" / "codebook.json", seed=99))
    a, b = TokenSet.load(tmp_path / "a"), TokenSet.load(tmp_path / "b")
    np.testing.assert_array_equal(a.morph, b.morph)
    assert a.meta["codebook_hash"] == b.meta["codebook_hash"]
    other = _write_store(tmp_path / "other", n_records=1, seed=5)
    tokenize(other, tmp_path / "c", _config(codebook=tmp_path / "a"))
    assert TokenSet.load(tmp_path / "c").meta["codebook_hash"] == a.meta["codebook_hash"]


def test_rhythm_premature_beat_differs_from_regular():
    rr = np.full(41, 0.8)
    rr[20], rr[21] = 0.5, 1.1  # beat 20: premature, then a compensatory pause
    tokens = rhythm_tokens(rr[:-1], rr[1:], np.array([0, 40]))
    assert tokens[10] == REGULAR_RHYTHM
    assert tokens[20] != REGULAR_RHYTHM
    before, after = divmod(int(tokens[20]) - NUM_SPECIAL, N_BINS)
    assert before < N_BINS // 2 < after  # short before, long after
    rr_prev, rr_next = rr[:-1].copy(), rr[1:].copy()
    rr_prev[0], rr_next[-1] = np.nan, np.nan
    edge = rhythm_tokens(rr_prev, rr_next, np.array([0, 40]))
    assert edge[0] == UNK and edge[-1] == UNK and edge[1] != UNK


def test_rhythm_stream_in_pipeline(store, tmp_path):
    tokenize(store, tmp_path / "tok", _config())
    rhythm = np.asarray(TokenSet.load(tmp_path / "tok").rhythm)
    assert rhythm[0] == UNK and rhythm[299] == UNK and rhythm[300] == UNK
    assert rhythm[5] != rhythm[10]  # beat 10 of each record is premature
    assert rhythm[310] == rhythm[10]


def test_unusable_beats_get_unk(tmp_path):
    folder = tmp_path / "store"
    rng = np.random.default_rng(1)
    x = _templates()[rng.integers(0, 3, 50)] + rng.normal(0, 0.02, (50, W))
    x[3] = np.nan
    x[7] = 0.1  # flat: a lead off
    x[9] *= 1000  # far beyond any ECG amplitude
    table = np.zeros(50, TABLE_DTYPE)
    w = StoreWriter(folder, fs=100, pre_samples=W // 2, post_samples=W // 2)
    w.append(RecordEntry("r", "synthetic", "x", 100, "I", 5000), x, table)
    w.close()
    tokenize(folder, tmp_path / "tok", _config())
    morph = np.asarray(TokenSet.load(tmp_path / "tok").morph)
    assert set(np.flatnonzero(morph == UNK).tolist()) == {3, 7, 9}


def test_kmeans_recovers_separated_clusters():
    g = torch.Generator().manual_seed(0)
    centres = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]])
    x = centres.repeat_interleave(100, dim=0) + 0.1 * torch.randn(400, 2, generator=g)
    c, fit = train_kmeans(x, 4, iters=20, seed=0)
    found = sorted(c.round().tolist())
    assert found == sorted(centres.tolist())
    assert fit["mean_sq_dist"] < 0.1


def test_kmeans_on_identical_rows_seeds_and_converges():
    """Every D² is zero: the seeding's integer CDF is flat and must still pick a row."""
    c, fit = train_kmeans(torch.ones(40, 3), 4, iters=3, seed=0)
    assert torch.equal(c, torch.ones(4, 3)) and fit["mean_sq_dist"] == 0


def test_cluster_sums_add_each_cluster_s_rows_and_leave_the_deterministic_mode_as_it_was():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(500, 3, generator=g)
    code = torch.randint(0, 7, (500,), generator=g)
    code[code == 5] = 4  # cluster 5 empty: its sum is zero
    expected = torch.stack([x[code == j].sum(dim=0) for j in range(7)])
    assert not torch.are_deterministic_algorithms_enabled()
    torch.testing.assert_close(cluster_sums(x, code, 7), expected)
    assert not torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        cluster_sums(x, code, 7)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.gpu
def test_gpu_kmeans_gives_the_same_centroids_on_every_run():
    """Many rows per cluster, so CUDA's atomic adds would land in different orders."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200_000, 64, generator=g).cuda()
    runs = [train_kmeans(x, 64, iters=10, seed=0)[0].cpu() for _ in range(3)]
    for other in runs[1:]:
        assert torch.equal(runs[0], other)


def _tokenized(store: Path, tmp_path: Path) -> Path:
    tokenize(store, tmp_path / "tok", _config())
    return tmp_path / "tok"


def test_truncated_and_wrong_shards_rejected(store, tmp_path):
    tok = _tokenized(store, tmp_path)
    morph = tok / "morph.bin"
    raw = morph.read_bytes()
    morph.write_bytes(raw[:-2])
    with pytest.raises(HeartlmError, match="truncated"):
        TokenSet.load(tok)
    morph.write_bytes(raw[:7])
    with pytest.raises(HeartlmError, match="header"):
        TokenSet.load(tok)
    morph.write_bytes(raw[:8] + struct.pack("<I", 9) + raw[12:])
    with pytest.raises(HeartlmError, match="version 9"):
        TokenSet.load(tok)
    morph.write_bytes(raw)
    shards.write_shard(tok / "aami.bin", np.zeros(5, np.int8))
    with pytest.raises(HeartlmError, match="n_beats"):
        TokenSet.load(tok)


def test_wrong_tokens_json_and_stream_dtype_rejected(store, tmp_path):
    tok = _tokenized(store, tmp_path)
    meta = json.loads((tok / "tokens.json").read_text())
    shards.write_shard(tok / "rhythm.bin", np.zeros(900, np.int8))
    with pytest.raises(HeartlmError, match="expected uint16"):
        TokenSet.load(tok)
    (tok / "tokens.json").write_text(json.dumps({**meta, "version": 1}))
    with pytest.raises(HeartlmError, match="version 1"):
        TokenSet.load(tok)
    (tok / "tokens.json").write_text("{not json")
    with pytest.raises(HeartlmError, match="not valid JSON"):
        TokenSet.load(tok)
    with pytest.raises(HeartlmError, match=r"no tokens\.json"):
        TokenSet.load(store)


def test_out_of_vocabulary_and_bad_boundaries_rejected(store, tmp_path):
    tok = _tokenized(store, tmp_path)
    morph = np.array(TokenSet.load(tok).morph)
    morph[5] = 500
    shards.write_shard(tok / "morph.bin", morph)
    with pytest.raises(HeartlmError, match="outside the vocabulary"):
        TokenSet.load(tok)
    morph[5] = NUM_SPECIAL
    shards.write_shard(tok / "morph.bin", morph)
    shards.write_shard(tok / "boundaries.bin", np.array([0, 400, 600, 900], np.int64))
    with pytest.raises(HeartlmError, match="disagrees"):
        TokenSet.load(tok)


def test_decode_writes_png_and_report(store, tmp_path, capsys):
    assert main(["tokenize", str(store), "--out", str(tmp_path / "tok"), "--vocab", "3",
                 "--device", "cpu", "--decode"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "perplexity" in printed and "NRMSE" in printed
    report = json.loads((tmp_path / "tok" / "decode" / "report.json").read_text())
    assert report["usage"]["used"] == 3 and report["usage"]["dead"] == 0
    assert 2.5 < report["usage"]["perplexity"] <= 3.0  # three templates, about equally common
    assert report["reconstruction"]["correlation"]["median"] > 0.95
    assert report["reconstruction"]["beats_scored"] == 900
    png = (tmp_path / "tok" / "decode" / "reconstruction.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def _cli_error(argv: list[str], capsys) -> str:
    capsys.readouterr()  # what earlier steps of the test logged is not the command's output
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("heartlm: error:") and "\n" not in err
    return err


def test_empty_store_refused(tmp_path, capsys):
    w = StoreWriter(tmp_path / "empty", fs=100, pre_samples=W // 2, post_samples=W // 2)
    w.close()
    err = _cli_error(["tokenize", str(tmp_path / "empty"), "--out", str(tmp_path / "t")], capsys)
    assert "no beats" in err and not (tmp_path / "t").exists()


def test_vocab_larger_than_beats_refused(store, tmp_path, capsys):
    err = _cli_error(
        ["tokenize", str(store), "--out", str(tmp_path / "t"), "--vocab", "5000"], capsys
    )
    assert "--vocab 5000" in err and "900" in err
    assert not (tmp_path / "t").exists()


def test_codebook_of_other_window_or_rate_refused(store, tmp_path, capsys):
    tokenize(store, tmp_path / "tok", _config())
    other_fs = _write_store(tmp_path / "fs", n_records=1, fs=360.0)
    err = _cli_error(["tokenize", str(other_fs), "--out", str(tmp_path / "t"),
                      "--codebook", str(tmp_path / "tok" / "codebook.json")], capsys)  # fmt: skip
    assert "360 Hz" in err and "100 Hz" in err
    w = StoreWriter(tmp_path / "wide", fs=100, pre_samples=W // 2, post_samples=W)
    w.append(
        RecordEntry("r", "d", "x", 100, "I", 10),
        np.zeros((4, W + W // 2)),
        np.zeros(4, TABLE_DTYPE),
    )
    w.close()
    err = _cli_error(["tokenize", str(tmp_path / "wide"), "--out", str(tmp_path / "t"),
                      "--codebook", str(tmp_path / "tok")], capsys)  # fmt: skip
    assert f"{W}-sample" in err and f"{W + W // 2} samples" in err
    assert not (tmp_path / "t").exists()


def test_existing_output_refused_unless_overwrite(store, tmp_path, capsys):
    out = tmp_path / "tok"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    err = _cli_error(["tokenize", str(store), "--out", str(out), "--vocab", "3"], capsys)
    assert "--overwrite" in err
    assert (out / "precious.txt").read_text() == "keep me"
    argv = ["tokenize", str(store), "--out", str(out), "--vocab", "3", "--overwrite"]
    assert main(argv) == 0
    assert not (out / "precious.txt").exists() and len(TokenSet.load(out)) == 900


def test_bad_flag_values_are_one_line_errors(store, tmp_path, capsys):
    err = _cli_error(["tokenize", str(store), "--out", str(tmp_path / "t"), "--vocab", "1"], capsys)
    assert "--vocab" in err
    err = _cli_error(["tokenize", str(tmp_path / "nothing"), "--out", str(tmp_path / "t")], capsys)
    assert "not a beat store" in err


@pytest.mark.gpu
def test_gpu_assignment_matches_cpu(store, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    tokenize(store, tmp_path / "cpu", _config(vocab=8))
    codebook = tmp_path / "cpu" / "codebook.json"
    tokenize(store, tmp_path / "gpu", _config(codebook=codebook, device="cuda"))
    cpu, gpu = TokenSet.load(tmp_path / "cpu"), TokenSet.load(tmp_path / "gpu")
    # float32 sums differ in order between devices; only near-ties may flip.
    assert np.mean(np.asarray(cpu.morph) == np.asarray(gpu.morph)) > 0.99
    np.testing.assert_array_equal(cpu.rhythm, gpu.rhythm)


@pytest.mark.parametrize(
    ("change", "says"),
    [({"records": ["r0", "r1", "r2"]}, 'records[0] "r0" is not a JSON object'),
     ({"records": None}, "records null is not a list of JSON objects"),
     ({"n_beats": "lots"}, 'n_beats "lots" is not an integer'),
     ({"n_beats": None}, "n_beats null is not an integer"),
     ({"vocab_size": None}, "vocab_size null is not an integer"),
     ({"features": 5}, "features 5 is not a list of strings"),
     ({"version": "2"}, 'version "2" is not an integer')],
)  # fmt: skip
def test_tokens_json_field_of_the_wrong_type_is_one_error_naming_it(store, tmp_path, change, says):
    tok = _tokenized(store, tmp_path)
    path = tok / "tokens.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(HeartlmError) as caught:
        TokenSet.load(tok)
    assert caught.value.path == str(path) and caught.value.message == says


def test_codebook_version_written_as_a_string_is_named_as_such(store, tmp_path, capsys):
    tok = _tokenized(store, tmp_path)
    path = tok / "codebook.json"
    meta = json.loads(path.read_text())
    path.write_text(json.dumps({**meta, "version": str(meta["version"])}))
    argv = ["tokenize", str(store), "--out", str(tmp_path / "t"), "--codebook", str(tok)]
    err = _cli_error(argv, capsys)
    assert err == f'heartlm: error: {path}: version "{meta["version"]}" is not an integer'
    assert not (tmp_path / "t").exists()


def test_store_label_code_out_of_range_is_refused_before_tokens_are_written(
    store, tmp_path, capsys
):
    table = np.memmap(store / "table.bin", dtype=TABLE_DTYPE, mode="r+")
    table["aami"][5] = 99
    table.flush()
    del table
    err = _cli_error(["tokenize", str(store), "--out", str(tmp_path / "t")], capsys)
    assert err == f"heartlm: error: {store / 'table.bin'}: holds aami 99, outside -1 .. 4"
    assert not (tmp_path / "t").exists()
