"""Save-then-load tests for the two on-disk contracts: the beat store and token shards."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from heartlm import shards
from heartlm.errors import HeartlmError
from heartlm.store import TABLE_DTYPE, BeatStore, RecordEntry, StoreWriter


def _table(n: int) -> np.ndarray:
    t = np.zeros(n, TABLE_DTYPE)
    t["sample"] = np.arange(n) * 300
    t["aami"] = np.arange(n) % 5
    return t


def test_store_round_trip(tmp_path):
    w = StoreWriter(tmp_path, fs=360, pre_samples=90, post_samples=126)
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 216)), rng.normal(size=(5, 216))
    w.append(RecordEntry("100", "mitdb", "x/100", 360, "MLII", 1000), a, _table(3))
    w.append(RecordEntry("101", "mitdb", "x/101", 360, "MLII", 1000), b, _table(5))
    w.close()
    s = BeatStore(tmp_path)
    assert len(s) == 8 and s.window_samples == 216
    np.testing.assert_allclose(s.beats[s.record_slice(1)], b.astype(np.float32))
    assert list(s.table["record"]) == [0, 0, 0, 1, 1, 1, 1, 1]
    assert s.records[1].start == 3


def test_store_rejects_truncated_beats(tmp_path):
    w = StoreWriter(tmp_path, fs=360, pre_samples=2, post_samples=2)
    w.append(RecordEntry("r", "db", "r", 360, "I", 10), np.ones((4, 4)), _table(4))
    w.close()
    with open(tmp_path / "beats.f32", "r+b") as f:
        f.truncate(20)
    with pytest.raises(HeartlmError, match="truncated"):
        BeatStore(tmp_path)


def test_shard_round_trip_and_rejections(tmp_path):
    x = np.arange(1000, dtype=np.uint16)
    p = tmp_path / "morph.bin"
    shards.write_shard(p, x)
    np.testing.assert_array_equal(shards.read_shard(p, np.uint16), x)
    with pytest.raises(HeartlmError, match="expected int8"):
        shards.read_shard(p, np.int8)
    raw = p.read_bytes()
    (tmp_path / "cut.bin").write_bytes(raw[:-2])
    with pytest.raises(HeartlmError, match="truncated"):
        shards.read_shard(tmp_path / "cut.bin")
    (tmp_path / "bad.bin").write_bytes(b"NOTSHARD" + raw[8:])
    with pytest.raises(HeartlmError, match="magic"):
        shards.read_shard(tmp_path / "bad.bin")
    (tmp_path / "short.bin").write_bytes(raw[:10])
    with pytest.raises(HeartlmError, match="header"):
        shards.read_shard(tmp_path / "short.bin")


def _small_store(folder) -> None:
    w = StoreWriter(folder, fs=360, pre_samples=2, post_samples=2)
    w.append(RecordEntry("r", "db", "r", 360, "I", 10), np.ones((4, 4)), _table(4))
    w.append(RecordEntry("s", "db", "s", 360, "I", 10), np.ones((3, 4)), _table(3))
    w.close()


@pytest.mark.parametrize(
    ("change", "says"),
    [(lambda d: d["records"][1].update(zzz=10), "records[1] has an unknown field 'zzz'"),
     (lambda d: d.update(records=None), "records null is not a list"),
     (lambda d: d.update(records=["r", "s"]), 'records[0] "r" is not a JSON object'),
     (lambda d: d["records"][0].update(start="x"), 'records[0].start "x" is not an integer'),
     (lambda d: d.update(fs="abc"), 'fs "abc" is not a number'),
     (lambda d: d.update(fs=-250), "fs -250 is not a positive sampling rate"),
     (lambda d: d.update(pre_samples=500),
      "window_samples 4 is not pre_samples 500 + post_samples 2"),
     (lambda d: d.update(pre_samples=-1, post_samples=5),
      "pre_samples -1 puts the R peak outside the beat window of 4 samples"),
     (lambda d: d.update(n_beats=None), "n_beats null is not an integer"),
     (lambda d: d.update(version="1"), 'version "1" is not an integer')],
)  # fmt: skip
def test_store_json_of_the_wrong_type_or_value_is_one_error_naming_the_field(
    tmp_path, change, says
):
    _small_store(tmp_path)
    path = tmp_path / "store.json"
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))
    with pytest.raises(HeartlmError) as caught:
        BeatStore(tmp_path)
    assert caught.value.path == str(path) and caught.value.message == says


@pytest.mark.parametrize(
    ("column", "value", "says"),
    [("aami", 99, "holds aami 99, outside -1 .. 4"),
     ("aami", -2, "holds aami -2, outside -1 .. 4"),
     ("rhythm", 99, "holds rhythm 99, outside -1 .. "),
     ("record", 2, "holds record 2, outside 0 .. 1")],
)  # fmt: skip
def test_store_table_codes_out_of_range_are_refused_naming_table_bin(tmp_path, column, value, says):
    _small_store(tmp_path)
    table = np.memmap(tmp_path / "table.bin", dtype=TABLE_DTYPE, mode="r+")
    table[column][5] = value
    table.flush()
    del table
    with pytest.raises(HeartlmError, match=re.escape(says)) as caught:
        BeatStore(tmp_path)
    assert caught.value.path == str(tmp_path / "table.bin")


def test_typed_json_fields_check_list_items_inside_a_union_and_refuse_nan(tmp_path):
    from heartlm.runinfo import json_field

    path = tmp_path / "f.json"
    assert json_field({"a": ["x"]}, "a", list[str] | None, path) == ["x"]
    assert json_field({}, "a", list[str] | None, path) is None
    assert json_field({"a": 2}, "a", float, path) == 2.0
    for value, kind, says in (([1, 2], list[str] | None, "a[0] 1 is not a string"),
                              (float("nan"), float, "a NaN is not a number"),
                              (True, int, "a true is not an integer")):  # fmt: skip
        with pytest.raises(HeartlmError, match=re.escape(says)):
            json_field({"a": value}, "a", kind, path)
