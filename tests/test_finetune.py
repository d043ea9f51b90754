"""Fine-tuning: split constants, the DS2 guard, window labelling rules, objectives, end to end."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from heartlm.ecg.labels import RHYTHMS
from heartlm.errors import HeartlmError
from heartlm.finetune.objectives import (
    AfibWindows,
    afib_targets,
    beat_afib_targets,
    drop_morphology,
    keep_table,
    keep_window,
)
from heartlm.labelled import splits
from heartlm.labelled import windows as data
from heartlm.labelled.splits import RecordRef

AFIB, NSR = RHYTHMS.index("AFIB"), RHYTHMS.index("N")


def _mitdb(names, db="mitdb", positive=()):
    return [
        RecordRef(index=i, name=n, db=db, n_beats=100, positive=n in positive)
        for i, n in enumerate(names)
    ]


def test_split_constants_are_the_inter_patient_split():
    ds1, ds2, paced = set(splits.MITDB_DS1), set(splits.MITDB_DS2), set(splits.MITDB_PACED)
    assert len(ds1) == len(splits.MITDB_DS1) == 22 and len(ds2) == 22
    assert not ds1 & ds2 and not paced & (ds1 | ds2)
    assert len(ds1 | ds2 | paced) == 48
    assert set(splits.MITDB_AFIB) & ds1 == {"201", "203"}


def test_ds2_guard_raises_for_training_and_validation():
    with pytest.raises(HeartlmError, match="DS2 records 100, 232 would be used for training"):
        splits.check_not_test_records(_mitdb(["101", "232", "100"]), "training")
    # A record called 100 in another database is not DS2.
    splits.check_not_test_records(_mitdb(["100"], db="synth"), "training")
    long_name = _mitdb(["100"], db="mit-bih-arrhythmia-database-1.0.0")
    with pytest.raises(HeartlmError, match="DS2"):
        splits.check_not_test_records(long_name, "validation")


def test_default_beat_split_is_ds1_only_and_val_from_ds1():
    all48 = _mitdb(sorted(splits.MITDB_DS1 + splits.MITDB_DS2 + splits.MITDB_PACED))
    split = splits.split_records(all48, "beats", val_fraction=0.2, seed=3)
    train = {r.name for r in split.train}
    val = {r.name for r in split.val}
    assert train | val == set(splits.MITDB_DS1) and not train & val
    assert len(val) == round(0.2 * 22)
    other = splits.split_records(all48, "beats", val_fraction=0.2, seed=4)
    assert {r.name for r in other.val} != val or len(val) == 22  # the seed matters


def test_selecting_a_ds2_record_for_training_raises():
    all48 = _mitdb(sorted(splits.MITDB_DS1 + splits.MITDB_DS2))
    with pytest.raises(HeartlmError, match="DS2 records 100 would be used for training"):
        splits.split_records(all48, "beats", 0.2, 0, select=["101", "106", "mitdb/100"])
    with pytest.raises(HeartlmError, match="does not hold: 999"):
        splits.split_records(all48, "beats", 0.2, 0, select=["999"])


def test_afib_split_is_stratified_and_never_uses_ds2():
    recs = _mitdb(["201", "203", "202", "101", "106", "108", "109"], positive=splits.MITDB_AFIB)
    ludb = [
        RecordRef(index=10 + i, name=str(i), db="ludb", n_beats=10, positive=i < 4)
        for i in range(10)
    ]
    split = splits.split_records(recs + ludb, "afib", val_fraction=0.25, seed=0)
    names = {r.key for r in split.train + split.val}
    assert "mitdb/202" not in names
    assert any(r.positive for r in split.val) and any(r.positive for r in split.train)


def test_a_record_and_its_lead_copies_stay_on_one_side_and_ds2_copies_never_train():
    ds1 = sorted(splits.MITDB_DS1)
    pool = _mitdb(ds1) + [RecordRef(100 + i, n, "mitdb_V1", 100) for i, n in enumerate(ds1)]
    for seed in range(5):
        split = splits.split_records(pool, "beats", val_fraction=0.2, seed=seed)
        val = {r.name for r in split.val}
        assert not val & {r.name for r in split.train}  # no lead of a validation recording trains
        assert len(val) == round(0.2 * 22) and len(split.val) == 2 * len(val)
    # another lead of MIT-BIH's records is MIT-BIH: a DS2 copy is refused like its source
    assert splits.is_mitdb("mitdb_V1") and splits.is_mitdb("/data/mitdb_MLII")
    assert not splits.is_mitdb("mitdb_v1") and not splits.is_mitdb("synth_sick")
    with pytest.raises(HeartlmError, match="DS2 records 232 would be used for training"):
        splits.check_not_test_records(_mitdb(["232"], db="mitdb_V1"), "training")
    default = splits.split_records(pool + _mitdb(["232"], db="mitdb_V1"), "beats", 0.0, 0)
    assert {r.key for r in default.train} == {r.key for r in pool}


def test_empty_and_unsplittable_pools_are_errors():
    unlabelled = [RecordRef(0, "a", "x", 10, has_labels=False)]
    with pytest.raises(HeartlmError, match="empty training split"):
        splits.split_records(unlabelled, "afib", 0.2, 0)
    with pytest.raises(HeartlmError, match="cannot be split"):
        splits.split_records([RecordRef(0, "a", "x", 10)], "beats", 0.2, 0)
    only = splits.split_records([RecordRef(0, "a", "x", 10)], "beats", 0.0, 0)
    assert len(only.train) == 1 and not only.val


def test_afib_window_rule_half_or_more():
    assert data.afib_window_label(np.array([AFIB, AFIB, NSR, NSR])) == 1  # exactly 50 %
    assert data.afib_window_label(np.array([AFIB, NSR, NSR, NSR])) == 0
    assert data.afib_window_label(np.array([0, 0, 0])) == data.IGNORE  # no rhythm known
    afl = RHYTHMS.index("AFL")
    assert data.afib_window_label(np.array([afl, afl, afl, AFIB])) == 0  # flutter is not AFIB


def test_afib_targets_on_device_follow_the_same_rule():
    rng = np.random.default_rng(0)
    codes = rng.choice([0, NSR, AFIB, RHYTHMS.index("AFL")], size=(64, 8), p=[0.1, 0.4, 0.4, 0.1])
    valid = rng.random((64, 8)) > 0.2
    valid[:, 0] = True
    got = afib_targets(torch.from_numpy(codes), torch.from_numpy(valid)).numpy()
    want = [data.afib_window_label(c[v]) for c, v in zip(codes, valid, strict=True)]
    np.testing.assert_array_equal(got, want)


def test_afib_beat_loss_teaches_each_beat_with_the_head_that_pools_into_the_window():
    from types import SimpleNamespace

    from heartlm.model.config import model_config
    from heartlm.model.hlm import HeartLM

    torch.manual_seed(0)
    model = HeartLM(
        model_config("tiny", vocab_size=30, rhythm_vocab_size=9, max_len=8, dropout=0.0)
    )
    rng = np.random.default_rng(0)
    label = torch.from_numpy(rng.choice([NSR, AFIB, 0], size=(6, 8), p=[0.5, 0.4, 0.1]))
    valid = torch.ones(6, 8, dtype=torch.bool)
    valid[0, 5:] = False
    batch = SimpleNamespace(morph=torch.randint(5, 30, (6, 8)), rhythm=torch.randint(5, 9, (6, 8)),
                            valid=valid, rhythm_label=label, key=torch.arange(6),
                            features=None)  # fmt: skip
    model.eval()
    # The window's logits are the valid mean of the beats' logits from the same head.
    window = model(batch.morph, batch.rhythm, valid_BT=valid, head="window")
    beats = model(batch.morph, batch.rhythm, valid_BT=valid, head="window_beats")
    w = valid[..., None].float()
    torch.testing.assert_close((beats * w).sum(1) / w.sum(1), window)
    # Beat targets: each beat's own rhythm; pads, unknown rhythm and unlabelled windows ignored.
    target = beat_afib_targets(label, valid, torch.tensor([True] * 5 + [False]))
    assert (target[0, 5:] == data.IGNORE).all() and (target[5] == data.IGNORE).all()
    assert (target[label == 0] == data.IGNORE).all()
    np.testing.assert_array_equal(
        target[:5][valid[:5] & (label[:5] > 0)],
        (label[:5][valid[:5] & (label[:5] > 0)] == AFIB).long(),
    )
    window_only, with_beats = AfibWindows([1.0, 1.0]), AfibWindows([1.0, 1.0], beat_loss=0.5)
    model.train()  # dropout 0: training and evaluation give the same logits
    loss_w, sums_w = window_only(model, batch)
    loss_b, sums_b = with_beats(model, batch)
    # The beats' mean cross-entropy is added with its weight; the window's sums are kept.
    every = beat_afib_targets(label, valid, torch.ones(6, dtype=torch.bool))
    beat_ce = torch.nn.functional.cross_entropy(beats.flatten(0, 1), every.flatten(),
                                                ignore_index=data.IGNORE)  # fmt: skip
    torch.testing.assert_close(loss_b, loss_w + 0.5 * beat_ce)
    torch.testing.assert_close(sums_b["loss_sum"], sums_w["loss_sum"])
    # With half the windows' labels dropped, their beats teach nothing either.
    half = AfibWindows([1.0, 1.0], label_fraction=0.5, seed=3, beat_loss=0.5)
    dropped = ~keep_window(batch.key, 0.5, 3)
    assert 0 < dropped.sum() < 6
    other = SimpleNamespace(**{**vars(batch), "rhythm_label": torch.where(
        dropped[:, None], torch.full_like(label, AFIB), label)})  # fmt: skip
    torch.testing.assert_close(half(model, batch)[0], half(model, other)[0])
    model.eval()  # validation scores the window alone
    torch.testing.assert_close(with_beats(model, batch)[0], window_only(model, batch)[0])


def test_windows_cover_every_beat_once_and_pad_short_records():
    n = [10, 3, 0, 7]
    boundaries = np.concatenate([[0], np.cumsum(n)])
    total = boundaries[-1]
    streams = data.Streams(
        morph=np.arange(total, dtype=np.uint16) + 5,
        rhythm=np.full(total, 6, np.uint16),
        aami=(np.arange(total) % 5).astype(np.int8),
        rhythm_label=np.full(total, AFIB, np.int8),
        boundaries=boundaries,
    )
    w = data.cut_windows(streams, [0, 1, 2, 3], window=4, stride=2, task="beats")
    scored = w.beat[w.scored]
    assert sorted(scored.tolist()) == list(range(total))  # each beat scored exactly once
    short = w.record == 1
    assert short.sum() == 1 and w.pad[short].sum() == 1  # 3 beats padded to 4
    assert (w.morph[w.pad] == 0).all() and (w.beat_label[w.pad] == data.IGNORE).all()
    np.testing.assert_array_equal(w.beat_label[~w.pad], streams.aami[w.beat[~w.pad]])
    # Record 0 (10 beats, W=4, stride 2): starts 0, 2, 4, 6 (last ends at the record's end).
    np.testing.assert_array_equal(w.beat[w.record == 0][:, 0], [0, 2, 4, 6])
    a = data.cut_windows(streams, [1], window=4, stride=4, task="afib")
    assert a.window_label.tolist() == [1] and (a.beat_label == data.IGNORE).all()


def test_context_windows_score_each_block_once_inside_its_context():
    n = [20, 5, 0]
    boundaries = np.concatenate([[0], np.cumsum(n)])
    total = boundaries[-1]
    # Record 0: AFIB from beat 10 on, so its blocks of 4 are labelled by their own beats.
    label = np.full(total, RHYTHMS.index("N"), np.int8)
    label[10:20] = AFIB
    streams = data.Streams(
        morph=np.arange(total, dtype=np.uint16) + 5,
        rhythm=np.full(total, 6, np.uint16),
        aami=np.zeros(total, np.int8),
        rhythm_label=label,
        boundaries=boundaries,
    )
    w = data.cut_context_windows(streams, [0, 1, 2], context=8, block=4)
    blocks = data.cut_windows(streams, [0, 1, 2], window=4, stride=4, task="afib")
    assert w.morph.shape == (len(blocks), 8)
    # The scored beats are exactly the plain 4-beat windows' beats, block by block.
    for row, scored, plain, plain_pad in zip(w.beat, w.scored, blocks.beat, blocks.pad,
                                             strict=True):  # fmt: skip
        np.testing.assert_array_equal(row[scored], plain[~plain_pad])
    np.testing.assert_array_equal(w.window_label, blocks.window_label)
    assert w.window_label[w.record == 0].tolist() == [0, 0, 1, 1, 1]
    # Every window stays inside its record and centres its block where the record allows.
    for row, pad, rec in zip(w.beat, w.pad, w.record, strict=True):
        assert (row[~pad] >= boundaries[rec]).all() and (row[~pad] < boundaries[rec + 1]).all()
    assert w.beat[w.record == 0][2, 0] == 6  # block 8..11 sits at positions 2..5
    short = w.record == 1  # 5 beats: one context window padded to 8, two blocks in it
    assert short.sum() == 2 and (w.pad[short].sum(axis=1) == 3).all()
    with pytest.raises(ValueError, match="block"):
        data.cut_context_windows(streams, [0], context=4, block=8)


def test_a_lead_copy_keeps_the_labels_of_the_beats_its_record_keeps():
    rng = np.random.default_rng(0)
    record = rng.integers(-1, 5, 200)  # -1: an unlabelled beat
    other = rng.integers(0, 5, 150)
    # mitdb/101, ludb/7, then 101's copies: in V1, with its last beat lost, with its first
    # beat lost, and one whose labels fit 101's at neither end
    misfit = rng.integers(0, 5, 199)
    labels = np.concatenate([record, other, record, record[:-1], record[1:], misfit])
    bounds = np.array([0, 200, 350, 550, 749, 948, 1147])
    recordings = ["mitdb/101", "ludb/7", *["mitdb/101"] * 4]
    kept = data.keep_recording_label_fraction(labels, bounds, recordings, 0.1, seed=3)
    # the share is drawn over the two recordings' first records, exactly as without copies
    firsts = np.concatenate([record, other])
    np.testing.assert_array_equal(kept[:350], data.keep_label_fraction(firsts, 0.1, seed=3))
    np.testing.assert_array_equal(kept[350:550], kept[:200])  # the copy: the same beats
    np.testing.assert_array_equal(kept[550:749], kept[:199])  # aligned at its start
    np.testing.assert_array_equal(kept[749:948], kept[1:200])  # aligned at its end
    assert (kept[948:] == data.IGNORE).all()  # a copy that cannot be aligned: none
    # all labels, or no copies: what keep_label_fraction keeps
    np.testing.assert_array_equal(
        data.keep_recording_label_fraction(labels, bounds, recordings, 1.0, 3), labels)  # fmt: skip
    distinct = ["a", "b", "c", "d", "e", "f"]
    np.testing.assert_array_equal(
        data.keep_recording_label_fraction(labels, bounds, distinct, 0.1, 3),
        data.keep_label_fraction(labels, 0.1, 3))  # fmt: skip
    # heartlm finetune draws its share so, reading each record's recording from its refs
    from heartlm.finetune.pipeline import _label_share
    from heartlm.train.data import TokenData

    n = len(labels)
    part = TokenData(morph=np.zeros(n, np.int32), rhythm=np.zeros(n, np.int32), aami=labels,
                     rhythm_label=np.zeros(n, np.int8), boundaries=bounds, records=[],
                     vocab_size=20, rhythm_vocab_size=9, meta={})  # fmt: skip
    refs = [RecordRef(0, "101", "mitdb", 200), RecordRef(1, "7", "ludb", 150),
            RecordRef(2, "101", "mitdb_V1", 200), RecordRef(3, "101", "mitdb_V5", 199),
            RecordRef(4, "101", "mitdb_V2", 199), RecordRef(5, "101", "mitdb_V4", 199)]  # fmt: skip
    share = types.SimpleNamespace(label_fraction=0.1, keep_labels_of=[])
    np.testing.assert_array_equal(_label_share(part, refs, share, 3), kept)
    # --keep-labels-of ludb: ludb/7 keeps every label; the share is drawn from 101 alone and
    # its copies follow it
    share.keep_labels_of = ["ludb"]
    whole = _label_share(part, refs, share, 3)
    np.testing.assert_array_equal(whole[200:350], other)
    np.testing.assert_array_equal(whole[:200], data.keep_label_fraction(record, 0.1, seed=3))
    np.testing.assert_array_equal(whole[350:550], whole[:200])


def test_keep_labels_of_is_recorded(corpus, tmp_path):
    ft = tmp_path / "kept"
    assert _finetune(corpus, ft, "--label-fraction", "0.1", "--keep-labels-of", "syn") == 0
    info = json.loads((ft / "finetune.json").read_text())
    assert (info["label_fraction"], info["keep_labels_of"]) == (0.1, ["syn"])


def test_label_fraction_keeps_a_seeded_fraction():
    labels = np.where(np.arange(1000) % 10 == 0, -1, np.arange(1000) % 5)
    kept = data.keep_label_fraction(labels, 0.1, seed=1)
    assert (kept >= 0).sum() == 90  # 10 % of the 900 labelled beats
    assert ((kept >= 0) <= (labels >= 0)).all()
    np.testing.assert_array_equal(kept, data.keep_label_fraction(labels, 0.1, seed=1))
    assert not np.array_equal(kept, data.keep_label_fraction(labels, 0.1, seed=2))
    with pytest.raises(ValueError, match="--label-fraction"):
        data.keep_label_fraction(labels, 0.0, seed=1)
    keys = torch.arange(10_000)
    assert keep_window(keys, 0.1, seed=0).float().mean().item() == pytest.approx(0.1, abs=0.02)


def test_class_weights_balance_and_clip():
    labels = np.array([0] * 90 + [1] * 9 + [2] * 1 + [-1] * 5)
    w = data.class_weights(labels, 5, max_weight=10.0)
    np.testing.assert_allclose(w[:2], [100 / (3 * 90), 100 / (3 * 9)])
    assert w[2] == 10.0 and w[3] == 0.0 and w[4] == 0.0


# --- end to end on a tiny synthetic corpus: synth -> ingest -> tokenize -> pretrain -> finetune


def test_class_weight_power_softens_the_balance():
    labels = np.array([0] * 90 + [1] * 9 + [2] * 1)
    full = data.class_weights(labels, 5, max_weight=1e9)
    np.testing.assert_allclose(data.class_weights(labels, 5, 1e9, power=0.5)[:3], full[:3] ** 0.5)
    np.testing.assert_allclose(data.class_weights(labels, 5, 1e9, power=0.0), [1, 1, 1, 0, 0])


def test_afib_label_fraction_keeps_the_same_windows_every_epoch():
    from heartlm.train.data import TokenData, WindowSampler

    n = 4000
    d = TokenData(
        morph=np.full(n, 10, np.int32), rhythm=np.full(n, 41, np.int32),
        aami=np.zeros(n, np.int8), rhythm_label=np.ones(n, np.int8),
        boundaries=np.array([0, n]), records=["r"], vocab_size=20, rhythm_vocab_size=69,
    )  # fmt: skip
    s = WindowSampler(d, 32, 16, seed=0)
    n_pos = 10 * s.n_windows
    table = keep_table(s, n_pos, 0.1, seed=0)
    order = torch.cat([s.permutation(e) for e in range(10)])
    labelled = set(order[table].tolist())  # windows whose label is ever used
    assert len(labelled) == round(0.1 * s.n_windows)
    assert table.float().mean().item() == pytest.approx(0.1, abs=0.01)


def test_morph_dropout_only_in_training_and_only_real_beats():
    from types import SimpleNamespace

    model = torch.nn.Linear(1, 1)
    morph = torch.full((8, 64), 7)
    valid = torch.ones(8, 64, dtype=torch.bool)
    valid[:, 60:] = False
    features = torch.ones(8, 64, 3)
    shape = torch.tensor([True, True, False])
    batch = SimpleNamespace(morph=morph, valid=valid, features=features)
    out, feats = drop_morphology(model, batch, 0.5, shape)
    assert (out[:, 60:] == 7).all()
    assert 0.35 < (out[:, :60] == 1).float().mean().item() < 0.65
    dropped = out == 1
    assert (feats[dropped][:, :2] == 0).all() and (feats[dropped][:, 2] == 1).all()
    assert (feats[~dropped] == 1).all()
    model.eval()
    assert drop_morphology(model, batch, 0.5, shape)[0] is morph


@pytest.mark.parametrize("inputs", ["relative", "rhythm", "rhythm-ectopy"])
def test_morph_dropout_is_refused_where_the_inputs_hide_what_it_drops(
    corpus, tmp_path, capsys, inputs
):
    """These inputs show no beat its code or absolute shape, so the option could only change
    the random stream; with inputs that show them it trains."""
    out = tmp_path / inputs
    assert _finetune(corpus, out, "--morph-dropout", "0.3", "--inputs", inputs) == 2
    err = capsys.readouterr().err
    assert f"--inputs {inputs} hides from every beat already" in err, err
    assert not out.exists()
    assert _finetune(corpus, tmp_path / "all", "--morph-dropout", "0.3", "--inputs", "all") == 0


def test_max_class_weight_is_refused_where_no_class_is_weighted(corpus, tmp_path, capsys):
    """--class-weight-power 0 weighs every class 1: a clip on the weights would do nothing."""
    out = tmp_path / "run"
    args = ("--class-weight-power", "0", "--max-class-weight", "5")
    assert _finetune(corpus, out, *args) == 2
    assert "--class-weight-power 0 sets to 1 for every class" in capsys.readouterr().err
    assert not out.exists()


def test_label_smoothing_trains_against_smoothed_targets_and_validates_plainly():
    from types import SimpleNamespace

    from heartlm.finetune.objectives import BeatClasses

    torch.manual_seed(0)
    logits = torch.randn(2, 6, 5)
    target = torch.tensor([[0, 1, 2, 3, 4, data.IGNORE]] * 2)

    class Head(torch.nn.Module):
        def forward(self, morph, rhythm, **_):
            return logits

    batch = SimpleNamespace(morph=torch.zeros(2, 6, dtype=torch.long), rhythm=None, valid=None,
                            features=None, aami=target)  # fmt: skip
    weight = [1.0, 2.0, 3.0, 4.0, 5.0]
    model = Head().train()
    smoothed, plain = BeatClasses(weight, label_smoothing=0.2), BeatClasses(weight)
    flat, t = logits.reshape(-1, 5), target.reshape(-1)
    keep = t >= 0
    logp = flat[keep].log_softmax(-1)
    # (1 - e) on the label and e spread over the 5 classes, each beat weighted by its class.
    soft = torch.full_like(logp, 0.2 / 5)
    soft[torch.arange(len(soft)), t[keep]] += 0.8
    w = torch.tensor(weight)[t[keep]]
    want = (w * -(soft * logp).sum(-1)).sum() / keep.sum()
    torch.testing.assert_close(smoothed(model, batch)[0], want)
    assert smoothed(model, batch)[0] > plain(model, batch)[0]  # these logits are not uniform
    model.eval()  # validation: the plain cross-entropy, comparable with runs without it
    torch.testing.assert_close(smoothed(model, batch)[0], plain(model, batch)[0])


def test_the_per_beat_network_s_own_loss_is_added_in_training_only():
    from types import SimpleNamespace

    from heartlm.finetune.objectives import BeatClasses, _weighted_loss

    torch.manual_seed(0)
    encoder, network = torch.randn(2, 6, 5), torch.randn(2, 6, 5)
    target = torch.tensor([[0, 1, 2, 3, 4, data.IGNORE]] * 2)

    class Parts(torch.nn.Module):
        def forward(self, morph, rhythm, head, **_):
            return (encoder, network) if head == "beat_parts" else encoder + network

    batch = SimpleNamespace(morph=torch.zeros(2, 6, dtype=torch.long), rhythm=None, valid=None,
                            features=None, aami=target)  # fmt: skip
    weight = [1.0, 2.0, 3.0, 4.0, 5.0]
    model = Parts().train()
    with_net, plain = BeatClasses(weight, mlp_loss=0.5), BeatClasses(weight)
    t = target.reshape(-1)
    summed, sums = _weighted_loss((encoder + network).reshape(-1, 5), t, torch.tensor(weight))
    alone, _ = _weighted_loss(network.reshape(-1, 5), t, torch.tensor(weight))
    loss, got = with_net(model, batch)
    torch.testing.assert_close(loss, summed + 0.5 * alone)
    torch.testing.assert_close(plain(model, batch)[0], summed)
    assert {k: v.item() for k, v in got.items()} == {k: v.item() for k, v in sums.items()}
    model.eval()  # validation scores the sum alone
    torch.testing.assert_close(with_net(model, batch)[0], summed)
    # --beat-mlp-loss-skip S: the network's own loss leaves S beats out, the sum's keeps them
    skip_s = BeatClasses(weight, mlp_loss=0.5, mlp_skip=[1])
    model.train()
    without_s, _ = _weighted_loss(network.reshape(-1, 5), t.masked_fill(t == 1, data.IGNORE),
                                  torch.tensor(weight))  # fmt: skip
    assert not torch.isclose(without_s, alone)
    torch.testing.assert_close(skip_s(model, batch)[0], summed + 0.5 * without_s)
    # --beat-encoder-loss: the transformer's own logits too, alone or beside the network's
    mine, _ = _weighted_loss(encoder.reshape(-1, 5), t, torch.tensor(weight))
    both = BeatClasses(weight, mlp_loss=0.5, encoder_loss=2.0)
    torch.testing.assert_close(both(model, batch)[0], summed + 0.5 * alone + 2.0 * mine)
    torch.testing.assert_close(BeatClasses(weight, encoder_loss=2.0)(model, batch)[0],
                               summed + 2.0 * mine)  # fmt: skip
    model.eval()
    torch.testing.assert_close(both(model, batch)[0], summed)


def _cli(*argv: str) -> int:
    from heartlm.cli import main

    return main([str(a) for a in argv])


@pytest.mark.parametrize(
    "flag",
    ["--max-class-weight", "--afib-beat-loss", "--label-smoothing", "--beat-mlp-loss",
     "--beat-encoder-loss"],
)  # fmt: skip
def test_a_nan_weight_is_refused_before_training(tmp_path, capsys, flag):
    """NaN passes `< bound` checks: --max-class-weight nan made every loss NaN, exported; an
    infinite loss term's weight does the same."""
    args = ["finetune", tmp_path / "pre", "--data", tmp_path / "tok", "--out", tmp_path / "ft"]
    loss_terms = ("--afib-beat-loss", "--beat-mlp-loss", "--beat-encoder-loss")
    for value in ("nan", "inf") if flag in loss_terms else ("nan",):
        assert _cli(*args, "--task", "afib", flag, value) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"heartlm: error: {flag} must be") and "\n" not in err, err
        assert not (tmp_path / "ft").exists()


def test_head_first_from_scratch_is_refused(tmp_path, capsys):
    args = ["finetune", tmp_path / "pre", "--data", tmp_path / "tok", "--out", tmp_path / "ft"]
    assert _cli(*args, "--from-scratch", "--head-first", "0.25") == 2
    assert "with --from-scratch it would hold random weights" in capsys.readouterr().err
    assert not (tmp_path / "ft").exists()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A pretrained tiny run on 6 one-minute synthetic records (half with AFIB episodes)."""
    from heartlm.ingest import IngestConfig, ingest
    from heartlm.synth import write_corpus
    from heartlm.tokens import TokenizeConfig, tokenize

    root = tmp_path_factory.mktemp("ft")
    write_corpus(root / "syn", records=6, minutes=1.0, fs=360, seed=0, afib_fraction=0.5, workers=1)
    ingest([root / "syn"], root / "store", IngestConfig(workers=1))
    tokenize(root / "store", root / "tok", TokenizeConfig(vocab=32, device="cpu"))
    args = ["pretrain", root / "tok", "--out", root / "pre", "--preset", "tiny", "--window", "16"]
    args += ["--batch", "8", "--steps", "4", "--warmup", "1", "--device", "cpu"]
    assert _cli(*args) == 0
    return root


def _finetune(corpus, out, *extra):
    args = ["finetune", corpus / "pre", "--data", corpus / "tok", "--out", out, "--window", "16"]
    args += ["--batch", "8", "--steps", "4", "--val-every", "2", "--warmup", "1"]
    return _cli(*args, "--device", "cpu", *extra)


def test_finetune_patience_stops_after_validations_without_a_better_f1(corpus, tmp_path, capsys):
    assert _finetune(corpus, tmp_path / "none", "--patience", "2", "--val-fraction", "0") == 2
    assert "--patience stops on the validation score: it needs validation records" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "none").exists()
    # a rate too small to move a weight: every validation repeats the first one's F1
    run = tmp_path / "early"
    assert _finetune(corpus, run, "--steps", "40", "--lr", "1e-12", "--patience", "1") == 0
    result = json.loads((run / "result.json").read_text())
    assert (result["step"], result["stopped_early"], result["best_step"]) == (4, True, 4)


def _evaluate_json(capsys, ft, data, *extra) -> dict:

    capsys.readouterr()
    assert _cli("evaluate", ft, data, "--json", *extra) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def beats_run(corpus):
    assert _finetune(corpus, corpus / "ft_beats") == 0
    return corpus / "ft_beats"


def test_finetune_beats_writes_a_self_contained_run(beats_run, corpus):

    layout = ("model.safetensors", "config.json", "metrics.jsonl", "run.json")
    layout += ("codebook.safetensors", "codebook.json", "lineage.json", "finetune.json")
    for name in layout:
        assert (beats_run / name).is_file(), name
    assert not (beats_run / "checkpoints").exists()
    info = json.loads((beats_run / "finetune.json").read_text())
    assert info["task"] == "beats" and info["window"] == 16
    assert not set(info["train_records"]) & set(info["val_records"])
    assert len(info["train_records"]) + len(info["val_records"]) == 6
    assert info["best"]["step"] in (2, 4)
    assert info["best"]["criterion"] == "val_f1" and 0.0 <= info["best"]["val_f1"] <= 1.0
    lineage = json.loads((beats_run / "lineage.json").read_text())
    assert lineage["ingest"]["fs"] == 250.0 and lineage["codebook_hash"]
    assert not list(corpus.glob(".ft_beats*"))  # no staging folder left behind


@pytest.mark.parametrize("inputs", ["no-heart-rate", "relative", "rhythm", "rhythm-ectopy"])
def test_inputs_hide_the_same_columns_in_the_saved_model(corpus, tmp_path, capsys, inputs):
    from heartlm.inputs import RATE_FEATURES, hidden_columns

    assert _finetune(corpus, tmp_path / "ft", "--inputs", inputs) == 0
    names = json.loads((corpus / "tok" / "tokens.json").read_text())["features"]
    saved = json.loads((tmp_path / "ft" / "config.json").read_text())
    saved = saved.get("model", saved)
    hidden = [names[i] for i in saved["absolute_columns"]]
    assert set(RATE_FEATURES) <= set(hidden)
    assert saved["absolute_columns"] == hidden_columns(names, inputs)
    assert saved["relative_only"] is (inputs != "no-heart-rate")  # codes visible there only
    assert _evaluate_json(capsys, tmp_path / "ft", corpus / "tok")["n_beats"] > 0


def test_pretraining_reads_what_its_inputs_keep_and_fine_tuning_sets_its_own(corpus, tmp_path,
                                                                            capsys):  # fmt: skip
    """`pretrain --inputs relative`: the encoder never sees a code or an absolute column;
    fine-tuning it reads what its own --inputs says, --inputs all included."""
    from heartlm.inputs import hidden_columns

    names = json.loads((corpus / "tok" / "tokens.json").read_text())["features"]
    pre = tmp_path / "pre_rel"
    args = ["pretrain", corpus / "tok", "--out", pre, "--preset", "tiny", "--window", "16",
            "--batch", "8", "--steps", "2", "--warmup", "1", "--device", "cpu",
            "--objective", "next", "--inputs", "relative"]  # fmt: skip
    assert _cli(*args) == 0
    saved = json.loads((pre / "config.json").read_text())
    saved = saved.get("model", saved)
    assert saved["relative_only"] is True
    assert saved["absolute_columns"] == hidden_columns(names, "relative") != []
    for inputs, codes_hidden in (("all", False), ("rhythm", True)):
        out = tmp_path / f"ft_{inputs}"
        args = ["finetune", pre, "--data", corpus / "tok", "--out", out, "--window", "16",
                "--batch", "8", "--steps", "2", "--warmup", "1", "--device", "cpu",
                "--inputs", inputs]  # fmt: skip
        capsys.readouterr()
        assert _cli(*args) == 0
        # Shown what pretraining hid (codes, absolute columns) it says so; hiding more is quiet.
        warned = "pretrained without the morphology codes and" in capsys.readouterr().err
        assert warned is (inputs == "all")
        tuned = json.loads((out / "config.json").read_text())
        tuned = tuned.get("model", tuned)
        assert tuned["relative_only"] is codes_hidden
        assert tuned["absolute_columns"] == hidden_columns(names, inputs)
        assert _evaluate_json(capsys, out, corpus / "tok")["n_beats"] > 0


def test_contrastive_pretraining_runs_validates_and_fine_tunes(corpus, tmp_path, capsys):
    """`pretrain --objective contrastive`: a causal run whose validation accuracy is how
    often it picks the next beat; fine-tuning reads it bidirectionally."""
    pre = tmp_path / "pre_choice"
    args = ["pretrain", corpus / "tok", "--out", pre, "--preset", "tiny", "--window", "16",
            "--batch", "8", "--steps", "4", "--warmup", "1", "--device", "cpu", "--val-every",
            "2", "--objective", "contrastive", "--feature-target", "all", "--code-weight",
            "0"]  # fmt: skip
    assert _cli(*args) == 0
    saved = json.loads((pre / "config.json").read_text())
    assert saved["objective"] == "contrastive" and saved["model"]["causal"] is True
    rows = [json.loads(line) for line in (pre / "metrics.jsonl").read_text().splitlines()]
    accuracy = [r["val_acc"] for r in rows if "val_acc" in r]
    assert accuracy and all(0.0 <= a <= 1.0 for a in accuracy)
    out = tmp_path / "ft_choice"
    ft = ["finetune", pre, "--data", corpus / "tok", "--out", out, "--window", "16", "--batch",
          "8", "--steps", "2", "--warmup", "1", "--device", "cpu", "--task", "afib",
          "--inputs", "rhythm"]  # fmt: skip
    assert _cli(*ft) == 0
    tuned = json.loads((out / "config.json").read_text())["model"]
    assert tuned["causal"] is False and tuned["choice_critic"] is True
    from safetensors.torch import load_file

    before, after = load_file(pre / "model.safetensors"), load_file(out / "model.safetensors")
    assert torch.equal(before["choice_key.0.weight"], after["choice_key.0.weight"])  # still
    assert not torch.equal(before["window_head.weight"], after["window_head.weight"])
    assert _evaluate_json(capsys, out, corpus / "tok")["task"] == "afib"


def test_pretraining_dropout_is_the_model_s_and_fine_tuning_keeps_or_replaces_it(
    corpus, tmp_path, capsys
):
    """`pretrain --dropout`: saved in the run's model, active in training only; fine-tuning
    keeps it unless given its own --dropout; a value outside [0, 1) is refused."""
    from heartlm.model import load_pretrained

    args = ["pretrain", corpus / "tok", "--preset", "tiny", "--window", "16", "--batch", "8",
            "--steps", "2", "--warmup", "1", "--device", "cpu", "--objective", "next"]  # fmt: skip
    for bad in ("1", "nan"):
        assert _cli(*args, "--out", tmp_path / "bad", "--dropout", bad) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("heartlm: error: --dropout must be in [0, 1)") and "\n" not in err
        assert not (tmp_path / "bad").exists()
    pre = tmp_path / "pre_drop"
    assert _cli(*args, "--out", pre, "--dropout", "0.3") == 0
    model, _ = load_pretrained(pre)
    assert model.cfg.dropout == 0.3
    morph = torch.randint(5, 30, (2, 16))
    rhythm = torch.randint(5, 9, (2, 16))
    features = torch.randn(2, 16, model.cfg.n_features) if model.cfg.n_features else None
    kwargs = {"features_BTF": features} if features is not None else {}
    model.train()
    assert not torch.equal(model(morph, rhythm, **kwargs), model(morph, rhythm, **kwargs))
    model.eval()
    torch.testing.assert_close(model(morph, rhythm, **kwargs), model(morph, rhythm, **kwargs))
    for extra, expected in (((), 0.3), (("--dropout", "0.1"), 0.1)):
        out = tmp_path / f"ft{len(extra)}"
        ft = ["finetune", pre, "--data", corpus / "tok", "--out", out, "--window", "16",
              "--batch", "8", "--steps", "2", "--warmup", "1", "--device", "cpu"]  # fmt: skip
        assert _cli(*ft, *extra) == 0
        tuned = json.loads((out / "config.json").read_text())
        assert tuned.get("model", tuned)["dropout"] == expected


def test_periodic_feature_embedding_carries_from_pretraining_to_fine_tuning(corpus, tmp_path,
                                                                            capsys):  # fmt: skip
    from safetensors.torch import load_file

    pre = tmp_path / "pre_plr"
    args = ["pretrain", corpus / "tok", "--out", pre, "--preset", "tiny", "--window", "16",
            "--batch", "8", "--steps", "4", "--warmup", "1", "--device", "cpu",
            "--feature-embedding", "periodic"]  # fmt: skip
    assert _cli(*args) == 0
    for extra in ((), ("--from-scratch",)):
        out = tmp_path / f"ft{len(extra)}"
        args = ["finetune", pre, "--data", corpus / "tok", "--out", out, "--window", "16",
                "--batch", "8", "--steps", "2", "--warmup", "1", "--device", "cpu",
                *extra]  # fmt: skip
        assert _cli(*args) == 0
        saved = json.loads((out / "config.json").read_text())
        assert saved.get("model", saved)["feature_embedding"] == "periodic"
        assert any(k.startswith("feature_emb.") for k in load_file(out / "model.safetensors"))
        assert _evaluate_json(capsys, out, corpus / "tok")["n_beats"] > 0


def test_evaluate_refuses_options_it_would_pass_over(corpus, tmp_path, capsys):
    """--records with --all-records, and the WFDB reading options with a token folder: each
    is refused with one line instead of being ignored."""
    out = tmp_path / "ft"
    assert _finetune(corpus, out) == 0
    capsys.readouterr()
    for extra, said in ((("--records", "s0000", "--all-records"), "give one"),
                        (("--lead", "MLII"), "this is a token folder"),
                        (("--annotations", "atr"), "this is a token folder")):  # fmt: skip
        assert _cli("evaluate", out, corpus / "tok", *extra) == 2
        assert said in capsys.readouterr().err
    assert _evaluate_json(capsys, out, corpus / "tok", "--records", "s0000")["n_beats"] > 0


def test_a_per_beat_network_is_added_to_a_pretrained_encoder_and_kept_by_evaluate(
    corpus, tmp_path, capsys
):
    from safetensors.torch import load_file

    out = tmp_path / "ft_mlp"
    args = ["finetune", corpus / "pre", "--data", corpus / "tok", "--out", out, "--window", "16",
            "--batch", "8", "--steps", "2", "--warmup", "1", "--device", "cpu",
            "--beat-mlp", "8"]  # fmt: skip
    assert _cli(*args) == 0
    assert json.loads((out / "config.json").read_text())["model"]["beat_mlp"] == 8
    n_features = len(json.loads((corpus / "tok" / "tokens.json").read_text())["features"])
    weights = load_file(out / "model.safetensors")
    assert weights["beat_mlp.hidden.weight"].shape == (8, 3 * n_features + 2)
    assert _evaluate_json(capsys, out, corpus / "tok")["n_beats"] > 0
    assert _cli(*args[:-2], "--beat-mlp", "-1", "--overwrite") == 2
    assert "--beat-mlp must be >= 0, not -1" in capsys.readouterr().err
    assert _cli(*args, "--task", "afib", "--overwrite") == 2
    assert "--beat-mlp feeds the beat head: only with --task beats" in capsys.readouterr().err
    # its own loss: the network trains differently, the encoder's head with it
    own = tmp_path / "ft_mlp_loss"
    assert _cli(*[own if a == out else a for a in args], "--beat-mlp-loss", "1") == 0
    assert json.loads((own / "finetune.json").read_text())["beat_mlp_loss"] == 1.0
    capsys.readouterr()
    trained = load_file(own / "model.safetensors")
    for name in ("beat_mlp.hidden.weight", "beat_head.weight"):
        assert not torch.equal(trained[name], weights[name])
    # the transformer's own loss beside the network's: another model, recorded
    blended = tmp_path / "ft_encoder_loss"
    assert _cli(*[blended if a == out else a for a in args], "--beat-mlp-loss", "1",
                "--beat-encoder-loss", "1") == 0  # fmt: skip
    assert json.loads((blended / "finetune.json").read_text())["beat_encoder_loss"] == 1.0
    from heartlm.finetune.pipeline import OBJECTIVE_SETTINGS

    assert "beat_encoder_loss" in OBJECTIVE_SETTINGS, "a resume must keep this loss's weight"
    capsys.readouterr()
    assert not torch.equal(load_file(blended / "model.safetensors")["beat_head.weight"],
                           trained["beat_head.weight"])  # fmt: skip
    for loss, afib_refusal in (
        ("--beat-mlp-loss", "--beat-mlp-loss trains the per-beat network: only with --task beats"),
        ("--beat-encoder-loss", "--beat-encoder-loss is a beat-class loss: only with --task beats"),
    ):  # fmt: skip
        assert _cli(*args[:-2], loss, "1", "--overwrite") == 2
        said = capsys.readouterr().err.strip()
        assert said.endswith("this model has none (--beat-mlp WIDTH)") and "\n" not in said
        assert _cli(*args, "--task", "afib", loss, "1", "--overwrite") == 2
        assert afib_refusal in capsys.readouterr().err
    skipping = tmp_path / "ft_mlp_loss_skip"
    assert _cli(*[skipping if a == out else a for a in args], "--beat-mlp-loss", "1",
                "--beat-mlp-loss-skip", "S") == 0  # fmt: skip
    assert json.loads((skipping / "finetune.json").read_text())["beat_mlp_loss_skip"] == ["S"]
    for extra, said in ((("--beat-mlp-loss-skip", "S"), "give --beat-mlp-loss W > 0 too"),
                        (("--beat-mlp-loss", "1", "--beat-mlp-loss-skip", "S,X"), "not X"),
                        (("--beat-mlp-loss", "1", "--beat-mlp-loss-skip", "N,S,V,F,Q"),
                         "leaves every class out")):  # fmt: skip
        assert _cli(*args, *extra, "--overwrite") == 2
        assert said in capsys.readouterr().err


def test_beat_logits_weigh_the_transformer_and_the_per_beat_network_by_their_share():
    from heartlm.labelled.predict import beat_logits

    torch.manual_seed(0)
    encoder, network = torch.randn(2, 6, 5), torch.randn(2, 6, 5)

    class Parts(torch.nn.Module):
        def forward(self, morph, rhythm, head, **_):
            return (encoder, network) if head == "beat_parts" else encoder + network

    model, x = Parts(), torch.zeros(2, 6, dtype=torch.long)
    assert torch.equal(beat_logits(model, x, x, None, None), encoder + network)
    assert torch.equal(beat_logits(model, x, x, None, None, 0.5), encoder + network)  # exact
    for share, expected in ((0.0, 2 * encoder), (1.0, 2 * network),
                            (0.75, 0.5 * encoder + 1.5 * network)):  # fmt: skip
        torch.testing.assert_close(beat_logits(model, x, x, None, None, share), expected)
    # one share per class: each class's logit weighs the two parts by its own share
    per_class = np.array([0.25, 0.0, 1.0, 0.5, 0.75])
    mixed = beat_logits(model, x, x, None, None, per_class)
    for c, share in enumerate(per_class):
        alone = beat_logits(model, x, x, None, None, share)
        torch.testing.assert_close(mixed[..., c], alone[..., c])


def test_beat_mlp_shares_parse_one_share_or_one_per_class_and_name_the_bad_item():
    from heartlm.labelled.shares import format_shares, named_shares, parse_shares

    assert parse_shares(["0.25"]).tolist() == [0.25] * 5
    assert parse_shares(["0.25", "V=1"]).tolist() == [0.25, 0.25, 1.0, 0.25, 0.25]
    assert parse_shares(["S=0", "V=1"]).tolist() == [0.5, 0.0, 1.0, 0.5, 0.5]  # the rest trained
    assert named_shares(parse_shares(["1"])) == 1.0
    named = named_shares(parse_shares(["0.25", "V=1"]))
    assert named == {"N": 0.25, "S": 0.25, "V": 1.0, "F": 0.25, "Q": 0.25}
    assert format_shares(named) == "N=0.25 S=0.25 V=1 F=0.25 Q=0.25"
    for items, said in ((["X=1"], "CLASS one of N, S, V, F, Q"), (["=1"], "CLASS one of"),
                        (["V=high"], "'high' is not a number"), (["V=2"], "within 0 and 1, not 2"),
                        (["nan"], "within 0 and 1"), (["0.2", "0.3"], "every class's share twice"),
                        (["V=1", "V=0"], "names V twice")):  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(said)):
            parse_shares(items)


def test_evaluate_beat_mlp_share_scores_the_parts_and_refuses_what_it_cannot_weigh(
    beats_run, corpus, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "ft_share"
    assert (
        _cli(
            "finetune",
            corpus / "pre",
            "--data",
            corpus / "tok",
            "--out",
            out,
            "--window",
            "16",
            "--batch",
            "8",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--device",
            "cpu",
            "--beat-mlp",
            "8",
            "--beat-mlp-loss",
            "1",
            "--beat-encoder-loss",
            "1",
        )
        == 0
    )
    for views in ("1", "2"):
        plain = _evaluate_json(capsys, out, corpus / "tok", "--views", views)
        trained = _evaluate_json(capsys, out, corpus / "tok", "--views", views,
                                 "--beat-mlp-share", "0.5")  # fmt: skip
        assert trained["beat_mlp_share"] == 0.5 and "beat_mlp_share" not in plain
        assert trained["confusion"] == plain["confusion"]
        assert trained["offset_counts"] == plain["offset_counts"]
        alone = _evaluate_json(capsys, out, corpus / "tok", "--views", views,
                               "--beat-mlp-share", "1")  # fmt: skip
        assert alone["beat_mlp_share"] == 1.0 and alone["n_beats"] == plain["n_beats"]
    assert _cli("evaluate", out, corpus / "tok", "--beat-mlp-share", "0.25") == 0
    assert "per-beat network's share 0.25" in capsys.readouterr().out
    # every window of every ensemble member, at one view or several, is weighed by the share
    from heartlm.labelled import predict

    other = tmp_path / "ft_share_seed1"
    assert _cli("finetune", corpus / "pre", "--data", corpus / "tok", "--out", other, "--window",
                "16", "--batch", "8", "--steps", "2", "--warmup", "1", "--device", "cpu",
                "--beat-mlp", "8", "--seed", "1") == 0  # fmt: skip
    asked: list[tuple[int, float | None]] = []
    weigh = predict.beat_logits

    def recorded(model, *args):
        asked.append((id(model), args[-1]))
        return weigh(model, *args)

    monkeypatch.setattr(predict, "beat_logits", recorded)
    for views in ("1", "2"):
        asked.clear()
        _evaluate_json(capsys, out, corpus / "tok", "--views", views, "--ensemble", other,
                       "--beat-mlp-share", "0.25")  # fmt: skip
        assert len({model for model, _ in asked}) == 2, views
        assert all(np.all(share == 0.25) for _, share in asked), views
    per_class = _evaluate_json(capsys, out, corpus / "tok", "--beat-mlp-share", "0.25,V=1")
    assert per_class["beat_mlp_share"] == {"N": 0.25, "S": 0.25, "V": 1.0, "F": 0.25, "Q": 0.25}
    assert per_class["n_beats"] == plain["n_beats"]
    assert _cli("evaluate", out, corpus / "tok", "--beat-mlp-share", "0,V=1") == 0
    assert "per-beat network's share N=0 S=0 V=1 F=0 Q=0" in capsys.readouterr().out
    for bad in ("1.5", "-0.1", "nan", "0.5,V=2"):
        assert _cli("evaluate", out, corpus / "tok", "--beat-mlp-share", bad) == 2
        err = capsys.readouterr().err.strip()
        assert "--beat-mlp-share must be within 0 and 1" in err and "\n" not in err, err
    assert _cli("evaluate", out, corpus / "tok", "--beat-mlp-share", "0.5,V=2") == 2
    assert "not 2 for V" in capsys.readouterr().err
    for bad, said in (("X=1", "want S or CLASS=S"), ("", "'' is not a number")):
        assert _cli("evaluate", out, corpus / "tok", "--beat-mlp-share", bad) == 2
        assert said in capsys.readouterr().err
    # a settings file written before shares per class holds one number, and still reads
    old = tmp_path / "old.yaml"
    old.write_text("beat_mlp_share: 0.25\n")
    assert _cli("evaluate", out, corpus / "tok", "--config", old, "--json") == 0
    assert json.loads(capsys.readouterr().out)["beat_mlp_share"] == 0.25
    # the Python API takes one share or one per class, and refuses any other length
    from heartlm.evaluate.scoring import evaluate

    with pytest.raises(HeartlmError, match="one for each of the 5 classes"):
        evaluate(out, corpus / "tok", device="cpu", beat_mlp_share=np.array([0.5, 1.0]))
    for runs in ((beats_run,), (out, "--ensemble", beats_run)):  # the main run, or a member
        assert _cli("evaluate", runs[0], corpus / "tok", *runs[1:],
                    "--beat-mlp-share", "0.5") == 2  # fmt: skip
        err = capsys.readouterr().err.strip()
        assert "this run has none (finetune --beat-mlp)" in err and str(beats_run) in err, err


def test_local_statistics_are_added_to_a_pretrained_encoder_and_kept_by_evaluate(
    corpus, tmp_path, capsys
):
    from safetensors.torch import load_file

    out = tmp_path / "ft_stats"
    args = ["finetune", corpus / "pre", "--data", corpus / "tok", "--out", out, "--window", "16",
            "--batch", "8", "--steps", "2", "--warmup", "1", "--device", "cpu", "--task", "afib",
            "--local-stats", "4"]  # fmt: skip
    assert _cli(*args) == 0
    assert json.loads((out / "config.json").read_text())["model"]["local_stats"] == 4
    n_features = len(json.loads((corpus / "tok" / "tokens.json").read_text())["features"])
    assert load_file(out / "model.safetensors")["stats_proj.weight"].shape == (64, 4 * n_features)
    assert _evaluate_json(capsys, out, corpus / "tok")["task"] == "afib"
    assert _cli(*args[:-2], "--local-stats", "-1", "--overwrite") == 2
    assert "--local-stats must be >= 0, not -1" in capsys.readouterr().err
    from heartlm.model import HeartLM, model_config

    featureless = HeartLM(model_config("tiny", vocab_size=45, max_len=16))
    featureless.save_pretrained(tmp_path / "nofeat")
    args[1], args[args.index("--out") + 1] = tmp_path / "nofeat", tmp_path / "ft_nofeat"
    assert _cli(*args) == 2
    err = capsys.readouterr().err
    assert "--local-stats needs an encoder pretrained with beat features" in err
    assert not (tmp_path / "ft_nofeat" / "model.safetensors").exists()


def test_evaluate_beats_json_has_the_documented_keys(beats_run, corpus, capsys):
    rep = _evaluate_json(capsys, beats_run, corpus / "tok")
    assert {"accuracy", "per_class", "confusion", "task", "n_beats"} <= set(rep)
    assert rep["task"] == "beats" and set(rep["per_class"]) == {"N", "S", "V", "F", "Q"}
    for scores in rep["per_class"].values():
        assert {"se", "ppv", "f1", "support"} == set(scores)
        assert all(0.0 <= scores[k] <= 1.0 for k in ("se", "ppv", "f1"))
    cm = np.array(rep["confusion"])
    assert cm.shape == (5, 5) and cm.sum() == rep["n_beats"] > 0
    assert [s["support"] for s in rep["per_class"].values()] == cm.sum(axis=1).tolist()
    assert 0.0 <= rep["accuracy"] <= 1.0
    for threshold in ("0.5", "0.3"):  # the default too, given: a beats run has no AFIB call
        assert _cli("evaluate", beats_run, corpus / "tok", "--afib-threshold", threshold) == 2
        assert "--afib-threshold is for AFIB runs" in capsys.readouterr().err


def test_evaluate_class_offsets_shift_the_calls_as_their_counts_say(beats_run, corpus, capsys):
    """An offset's confusion matrix is the grid's row at that offset; a larger offset on a
    class calls it more often; bad offsets are one line each."""
    from heartlm.labelled.offsets import CLASS_OFFSETS

    plain = _evaluate_json(capsys, beats_run, corpus / "tok")
    grid = plain["offset_counts"]
    assert grid["offsets"] == list(CLASS_OFFSETS) and "class_offsets" not in plain
    assert grid["confusion"]["V"][CLASS_OFFSETS.index(0.0)] == plain["confusion"]
    called_v = [np.asarray(cm)[:, 2].sum() for cm in grid["confusion"]["V"]]
    assert called_v == sorted(called_v) and called_v[-1] > called_v[0]
    moved = _evaluate_json(capsys, beats_run, corpus / "tok", "--class-offset", "V=1.5")
    assert moved["class_offsets"] == {"V": 1.5}
    assert moved["confusion"] == grid["confusion"]["V"][CLASS_OFFSETS.index(1.5)]
    assert moved["confusion"] != plain["confusion"]
    capsys.readouterr()
    assert _cli("evaluate", beats_run, corpus / "tok", "--class-offset", "V=1.5") == 0
    assert "class offsets V=+1.5" in capsys.readouterr().out
    for bad, said in (("X=1", "want CLASS=X with CLASS one of N, S, V, F, Q"),
                      ("V=nan", "must be within"), ("V=1,V=2", "names V twice"),
                      ("V=big", "'big' is not a number")):  # fmt: skip
        assert _cli("evaluate", beats_run, corpus / "tok", "--class-offset", bad) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and "\n" not in err, err


def test_evaluate_views_average_overlapping_windows_over_the_same_beats(beats_run, corpus, capsys):
    one = _evaluate_json(capsys, beats_run, corpus / "tok")
    four = _evaluate_json(capsys, beats_run, corpus / "tok", "--views", "4")
    assert (one["views"], four["views"]) == (1, 4)
    assert four["n_beats"] == one["n_beats"]  # every labelled beat scored once
    assert [c["support"] for c in four["per_class"].values()] == [
        c["support"] for c in one["per_class"].values()
    ]
    assert _cli("evaluate", beats_run, corpus / "tok", "--views", "0") == 2
    assert "--views 0" in capsys.readouterr().err
    assert _cli("evaluate", beats_run, corpus / "tok", "--views", "17") == 2  # window 16
    assert "--views 17: a count from 1 to the run's window (16)" in capsys.readouterr().err
    # --afib-window on a beats run is refused even where it equals the window
    assert _cli("evaluate", beats_run, corpus / "tok", "--afib-window", "16") == 2
    assert "applies to AFIB runs" in capsys.readouterr().err
    capsys.readouterr()
    assert _cli("evaluate", beats_run, corpus / "tok", "--views", "4") == 0
    assert "averaged over 4 overlapping windows" in capsys.readouterr().out


def test_per_record_names_carry_the_database_where_two_records_share_a_name(
    beats_run, corpus, tmp_path, capsys
):
    def clash(meta):
        meta["records"][0]["name"], meta["records"][0]["db"] = "101", "synth"
        meta["records"][1]["name"], meta["records"][1]["db"] = "101", "ludb"

    rep = _evaluate_json(capsys, beats_run, _copy_tokens(corpus, tmp_path / "clash", clash))
    names = [r["record"] for r in rep["per_record"]]
    assert {"synth/101", "ludb/101"} <= set(names) and len(set(names)) == len(names)
    plain = _evaluate_json(capsys, beats_run, corpus / "tok")  # no clash: bare names
    assert not any("/" in r["record"] for r in plain["per_record"])


def test_averaged_predictions_follow_each_beat_across_windows():
    """A stand-in model whose beat logits depend on the beat's own token only: averaging over
    any overlapping windows must give every beat its own token's class."""
    from heartlm.labelled.predict import averaged_beat_outputs, centre_weights, predicted_classes

    class OwnToken(torch.nn.Module):
        def forward(self, morph, rhythm, valid_BT=None, head="beat", features_BTF=None):
            return torch.nn.functional.one_hot(morph % 5, 5).float() * 4.0

    n = [23, 5]
    boundaries = np.concatenate([[0], np.cumsum(n)])
    total = boundaries[-1]
    streams = data.Streams(
        morph=(np.arange(total, dtype=np.uint16) * 7 + 5),
        rhythm=np.full(total, 6, np.uint16),
        aami=np.zeros(total, np.int8),
        rhythm_label=np.zeros(total, np.int8),
        boundaries=boundaries,
    )
    w = data.cut_windows(streams, [0, 1], window=8, stride=2, task="beats")
    beat, prob = averaged_beat_outputs(OwnToken(), w, 3, torch.device("cpu"))
    cls = predicted_classes(prob)
    np.testing.assert_array_equal(beat, np.arange(total))
    np.testing.assert_array_equal(cls, streams.morph.astype(np.int64) % 5)
    weight = centre_weights(8)
    np.testing.assert_allclose(weight, weight[::-1])
    assert weight.min() > 0 and weight[3] == weight.max() > weight[0]


def _one_record(total: int) -> data.Streams:
    """One record of `total` beats whose tokens count up from 5."""
    return data.Streams(
        morph=np.arange(total, dtype=np.uint16) + 5,
        rhythm=np.full(total, 6, np.uint16),
        aami=np.zeros(total, np.int8),
        rhythm_label=np.zeros(total, np.int8),
        boundaries=np.array([0, total]),
    )


def test_afib_validation_f1_calls_no_record_too_short_to_call(monkeypatch):
    """Fine-tuning selects by the F1 `evaluate` reports: a record of 5 beats (under
    AFIB_MIN_BEATS) gets no call there, so it must not move the validation F1 either."""
    from heartlm.finetune import selection
    from heartlm.labelled.windows import AFIB

    n = [16, 16, 5]  # an AF record, a sinus one, a 5-beat AF fragment
    rhythm = np.concatenate([np.full(16, AFIB), np.zeros(16), np.full(5, AFIB)]).astype(np.int8)
    val = types.SimpleNamespace(
        morph=np.full(sum(n), 7, np.uint16), rhythm=np.full(sum(n), 6, np.uint16),
        aami=np.zeros(sum(n), np.int8), rhythm_label=rhythm, features=None,
        boundaries=np.cumsum([0, *n]), records=["af", "sinus", "fragment"],
    )  # fmt: skip
    f1 = selection.ValidationF1(val, "afib", 16, torch.device("cpu"))
    # the model calls the AF record AF, the sinus record not, and misses the fragment
    monkeypatch.setattr(selection, "afib_scores", lambda *_: np.array([0.9, 0.1, 0.1]))
    assert f1.on_validation(None)["val_f1"] == 1.0  # with the fragment counted: 2/3


def test_averaged_predictions_trust_the_windows_that_centre_a_beat():
    """A stand-in model that calls class 3 in the middle half of every window and class 2 at
    its edges: each interior beat sits twice in the middle and twice at an edge of its 4
    windows, so only the centre weighting decides, and it must decide for the middle."""
    from heartlm.labelled.predict import averaged_beat_outputs, predicted_classes

    class ByPosition(torch.nn.Module):
        def forward(self, morph, rhythm, valid_BT=None, head="beat", features_BTF=None):
            middle = torch.zeros(morph.shape[1], dtype=torch.bool)
            middle[morph.shape[1] // 4 : 3 * morph.shape[1] // 4] = True
            cls = torch.where(middle, 3, 2).expand(morph.shape[0], -1)
            return torch.nn.functional.one_hot(cls, 5).float() * 6.0

    total = 40
    streams = _one_record(total)
    w = data.cut_windows(streams, [0], window=8, stride=2, task="beats")
    cls = predicted_classes(averaged_beat_outputs(ByPosition(), w, 4, torch.device("cpu"))[1])
    assert (cls[8:-8] == 3).all()  # interior beats: the centring windows' class
    assert (cls[:2] == 2).all()  # the record's first beats are only ever at an edge


def test_a_block_is_scored_from_its_own_beats_inside_the_context():
    """The block score is the window head on the mean of the block's beats, not the whole
    context's: a stand-in whose per-beat AFIB logit is the beat's token."""
    from heartlm.labelled.predict import afib_scores

    class OwnToken(torch.nn.Module):
        def forward(self, morph, rhythm, valid_BT=None, head="window_beats", features_BTF=None):
            assert head == "window_beats"
            logit = (morph.float() - 20.0) / 4.0
            return torch.stack([torch.zeros_like(logit), logit], dim=-1)

    total = 40
    streams = _one_record(total)
    w = data.cut_context_windows(streams, [0], context=16, block=4)
    got = afib_scores(OwnToken(), w, 3, torch.device("cpu"), scored_block=True)
    token = streams.morph.astype(np.float64)
    for score, beats, scored, pad in zip(got, w.beat, w.scored, w.pad, strict=True):
        block = ((token[beats[scored]] - 20.0) / 4.0).mean()
        whole = ((token[beats[~pad]] - 20.0) / 4.0).mean()
        assert score == pytest.approx(1 / (1 + np.exp(-block)), rel=1e-5)
        assert block == whole or score != pytest.approx(1 / (1 + np.exp(-whole)), rel=1e-5)


def test_evaluate_on_raw_wfdb_at_another_rate(beats_run, corpus, capsys):

    from heartlm.synth import write_corpus

    # Training records were 360 Hz (store at 250 Hz); these are 500 Hz and never seen.
    write_corpus(corpus / "syn500", records=2, minutes=0.5, fs=500, seed=7, workers=1)
    rep = _evaluate_json(capsys, beats_run, corpus / "syn500")
    synth_info = json.loads((corpus / "syn500" / "run.json").read_text())
    labelled = sum(synth_info["counts"]["classes"].values())
    # Every labelled beat is scored once (annotations give the beats; edges may drop a few).
    assert labelled - 4 <= rep["n_beats"] <= labelled
    assert rep["n_records"] == 2
    # The same records as a token folder give the same answer as the raw WFDB path.
    tok = _evaluate_json(capsys, beats_run, corpus / "tok")
    raw = _evaluate_json(capsys, beats_run, corpus / "syn")
    assert raw["confusion"] == tok["confusion"]


def test_evaluate_out_writes_metrics_and_png(beats_run, corpus, tmp_path):

    out = tmp_path / "ev"
    assert _cli("evaluate", beats_run, corpus / "tok", "--out", out) == 0
    assert (out / "confusion.png").stat().st_size > 1000
    assert json.loads((out / "metrics.json").read_text())["task"] == "beats"
    assert _cli("evaluate", beats_run, corpus / "tok", "--out", out) == 2  # no silent overwrite


def _rows(path):
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_evaluate_out_writes_every_beat_s_call_with_its_time(beats_run, corpus, tmp_path):
    import wfdb

    from heartlm.ecg.labels import AAMI_CLASSES

    out = tmp_path / "ev"
    assert _cli("evaluate", beats_run, corpus / "syn", "--out", out) == 0
    report = json.loads((out / "metrics.json").read_text())
    rows = _rows(out / "predictions.csv")
    # every labelled beat is a row whose call is the one scored: the confusion's columns
    labelled = [r for r in rows if r["reference"]]
    assert len(labelled) == report["n_beats"]
    for j, name in enumerate(AAMI_CLASSES):
        assert sum(r["predicted"] == name for r in labelled) == sum(
            row[j] for row in report["confusion"])  # fmt: skip
    for r in rows:  # the call is the most probable class, the probabilities a distribution
        p = {name: float(r[f"p_{name}"]) for name in AAMI_CLASSES}
        assert p[r["predicted"]] == max(p.values()) and abs(sum(p.values()) - 1) < 3e-3
    # each beat's time is its annotated R peak's (ingest snaps to the peak: a few ms)
    for record in {r["record"] for r in rows}:
        ann = wfdb.rdann(str(corpus / "syn" / record), "atr")
        beat_s = ann.sample[[s != "+" for s in ann.symbol]] / ann.fs
        mine = [r for r in rows if r["record"] == record]
        assert [int(r["beat"]) for r in mine] == list(range(len(mine)))
        at = np.array([float(r["time_s"]) for r in mine])
        assert np.abs(beat_s[np.abs(beat_s[:, None] - at).argmin(axis=0)] - at).max() < 0.03
        # the same calls as WFDB beat annotations at the record's own rate (360 Hz)
        calls = wfdb.rdann(str(out / "annotations" / record), "hlm")
        assert calls.fs == ann.fs and calls.symbol == [r["predicted"] for r in mine]
        assert np.abs(calls.sample / ann.fs - at).max() <= 0.5 / ann.fs + 1e-3
    # a token folder whose beat store is gone: the same calls, no times
    tokens = tmp_path / "tok"
    shutil.copytree(corpus / "tok", tokens)
    meta = json.loads((tokens / "tokens.json").read_text())
    meta["store"] = str(tmp_path / "moved")
    (tokens / "tokens.json").write_text(json.dumps(meta))
    assert _cli("evaluate", beats_run, tokens, "--out", tmp_path / "ev2") == 0
    moved = _rows(tmp_path / "ev2" / "predictions.csv")
    assert {r["time_s"] for r in moved} == {""} and not (tmp_path / "ev2" / "annotations").exists()
    kept = _rows(_run_out(beats_run, corpus / "tok", tmp_path / "ev3"))
    assert [r["predicted"] for r in moved] == [r["predicted"] for r in kept]
    assert all(r["time_s"] for r in kept)


def test_evaluate_out_keeps_every_annotation_file_inside_out_and_apart(
    beats_run, corpus, tmp_path, monkeypatch
):
    """Records of one name: under `.` and a subfolder (their folders' names, not "" or ".."),
    in two folders of one name (numbered), and an EDF file (named without `.edf`)."""
    import edfio
    import wfdb

    source = corpus / "syn" / "s0000"
    data = tmp_path / "data"
    for folder in (data, data / "sub", data / "x" / "a", data / "y" / "a", data / "a_2"):
        folder.mkdir(parents=True, exist_ok=True)
        for file in source.parent.glob("s0000.*"):
            shutil.copy(file, folder)
    rec = wfdb.rdrecord(str(source))
    edfio.Edf([edfio.EdfSignal(rec.p_signal[:, 0], rec.fs, label="MLII")]).write(
        data / "sub" / "night one.edf")  # fmt: skip
    monkeypatch.chdir(data / "sub")
    assert _cli("evaluate", beats_run, "..", "--out", tmp_path / "ev") == 0
    files = sorted(str(p.relative_to(tmp_path / "ev" / "annotations"))
                   for p in (tmp_path / "ev").rglob("*.hlm"))  # fmt: skip
    assert files == ["a/s0000.hlm", "a_2/s0000.hlm", "a_3/s0000.hlm", "data/s0000.hlm",
                     "sub/night_one.hlm", "sub/s0000.hlm"]  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "ev"]  # nothing beside it
    rows = _rows(tmp_path / "ev" / "predictions.csv")
    named = {"a/s0000", "a/s0000 #2", "a_2/s0000", "data/s0000", "sub/night one.edf", "sub/s0000"}
    assert {r["record"] for r in rows} == named
    # index.csv ties each file to predictions.csv's name, the real a_2 to its own folder
    index = {r["record"]: r for r in _rows(tmp_path / "ev" / "annotations" / "index.csv")}
    assert set(index) == named and index["a_2/s0000"]["file"] == "a_2/s0000.hlm"
    for name, row in index.items():
        mine = [r for r in rows if r["record"] == name]
        got = wfdb.rdann(str(tmp_path / "ev" / "annotations" / row["file"][:-4]), "hlm")
        assert int(row["annotations"]) == len(mine) == len(got.sample)
        assert got.symbol == [r["predicted"] for r in mine]


def test_evaluate_finds_the_beat_store_of_tokens_beside_them(beats_run, corpus, tmp_path,
                                                             monkeypatch):  # fmt: skip
    """Token folders written before tokens.json held an absolute path name their store as it
    was typed: it is looked for beside the tokens too, from any working folder."""
    shutil.copytree(corpus / "store", tmp_path / "store")
    shutil.copytree(corpus / "tok", tmp_path / "tok")
    meta = json.loads((tmp_path / "tok" / "tokens.json").read_text())
    assert Path(meta["store"]).is_absolute()
    meta["store"] = "store"
    (tmp_path / "tok" / "tokens.json").write_text(json.dumps(meta))
    monkeypatch.chdir(tmp_path / "tok")  # no `store` here
    rows = _rows(_run_out(beats_run, tmp_path / "tok", tmp_path / "ev"))
    assert all(r["time_s"] for r in rows)
    meta["store"] = str(tmp_path / "moved" / "store")  # both moved here together since
    (tmp_path / "tok" / "tokens.json").write_text(json.dumps(meta))
    rows = _rows(_run_out(beats_run, tmp_path / "tok", tmp_path / "ev", "--overwrite"))
    assert all(r["time_s"] for r in rows)
    for odd in (5, "", str(tmp_path / "tok" / "tokens.json")):  # no times, and no failure
        meta["store"] = odd
        (tmp_path / "tok" / "tokens.json").write_text(json.dumps(meta))
        rows = _rows(_run_out(beats_run, tmp_path / "tok", tmp_path / "ev", "--overwrite"))
        assert {r["time_s"] for r in rows} == {""}


def _run_out(run, data, out, *extra):
    assert _cli("evaluate", run, data, "--out", out, *extra) == 0
    return out / "predictions.csv"


def test_evaluate_predicts_records_without_labels_when_it_has_somewhere_to_write(
    beats_run, corpus, tmp_path, capsys
):
    bare = tmp_path / "bare"
    bare.mkdir()
    for file in (corpus / "syn").glob("s0000.*"):
        if file.suffix != ".atr":
            shutil.copy(file, bare)
    assert _cli("evaluate", beats_run, bare) == 2
    assert "no AAMI beat labels (--out writes the model's calls" in capsys.readouterr().err
    out = tmp_path / "ev"
    assert _cli("evaluate", beats_run, bare, "--out", out) == 0
    said = capsys.readouterr().out
    report = json.loads((out / "metrics.json").read_text())
    rows = _rows(out / "predictions.csv")
    assert report["n_predicted"] == len(rows) > 40  # a minute of beats, found by the detector
    assert "nothing scored" in report["note"] and report["note"] in said
    assert {r["reference"] for r in rows} == {""} and all(r["time_s"] for r in rows)
    assert not (out / "confusion.png").exists()


def test_finetune_afib_and_evaluate(corpus, tmp_path, capsys):
    import wfdb

    ft = tmp_path / "ft_afib"
    assert _finetune(corpus, ft, "--task", "afib", "--from-scratch", "--label-fraction", "0.5",
                     "--afib-beat-loss", "1") == 0  # fmt: skip
    info = json.loads((ft / "finetune.json").read_text())
    assert info["task"] == "afib" and info["from_scratch"] and info["pretrained"] is None
    assert info["afib_rule"] == data.AFIB_RULE
    rep = _evaluate_json(capsys, ft, corpus / "tok")
    assert set(rep["afib"]) == {"f1", "se", "ppv", "auroc"}
    assert rep["n_windows"] > 0 and 0 < rep["n_afib_windows"] < rep["n_windows"]
    assert all(v is None or 0.0 <= v <= 1.0 for v in rep["afib"].values())
    rows = _rows(_run_out(ft, corpus / "tok", tmp_path / "ev"))  # each scored window's call
    assert len(rows) == rep["n_windows"]
    assert sum(r["reference"] == "AFIB" for r in rows) == rep["n_afib_windows"]
    assert sum(r["called"] == "AFIB" for r in rows) == rep["counts"]["tp"] + rep["counts"]["fp"]
    assert all((float(r["afib_probability"]) >= 0.5) == (r["called"] == "AFIB") for r in rows)
    assert all(float(r["start_s"]) < float(r["end_s"]) for r in rows)
    for record in {r["record"] for r in rows}:  # rhythm changes as MIT-BIH marks them
        mine = [r for r in rows if r["record"] == record]
        marks = wfdb.rdann(str(tmp_path / "ev" / "annotations" / record), "hlm")
        assert set(marks.symbol) == {"+"} and abs(marks.sample[0] / marks.fs
                                                  - float(mine[0]["start_s"])) < 3e-3  # fmt: skip
        calls = [r["called"] == "AFIB" for r in mine]
        changes = [c for k, c in enumerate(calls) if k == 0 or c != calls[k - 1]]
        assert marks.aux_note == ["(AFIB" if c else "(N" for c in changes]
    # Shorter windows scored inside the run's 16-beat context: about twice as many.
    assert _evaluate_json(capsys, ft, corpus / "tok", "--afib-window", "16") == rep
    half = _evaluate_json(capsys, ft, corpus / "tok", "--afib-window", "8")
    assert (half["window"], half["context"]) == (8, 16)
    assert 2 * rep["n_windows"] - 6 <= half["n_windows"] <= 2 * rep["n_windows"] + 6
    assert _cli("evaluate", ft, corpus / "tok", "--afib-window", "32") == 2
    assert "--afib-window 32 must be between 1 and the run's window of 16" in (
        capsys.readouterr().err)  # fmt: skip
    # Every beat's logits averaged over 4 windows of context: the same windows are scored.
    for extra in ((), ("--afib-window", "8")):
        base = _evaluate_json(capsys, ft, corpus / "tok", *extra)
        four = _evaluate_json(capsys, ft, corpus / "tok", *extra, "--views", "4")
        assert (base["views"], four["views"]) == (1, 4)
        assert four["n_windows"] == base["n_windows"]
        assert four["n_afib_windows"] == base["n_afib_windows"]
        assert [r["n_windows"] for r in four["per_record"]] == [
            r["n_windows"] for r in base["per_record"]
        ]
    assert _cli("evaluate", ft, corpus / "tok", "--views", "17") == 2
    assert "--views 17: a count from 1 to the run's window (16)" in capsys.readouterr().err
    # A run whose head learnt whole windows only is scored, with a warning.
    whole = tmp_path / "ft_afib_whole"
    assert _finetune(corpus, whole, "--task", "afib", "--from-scratch") == 0
    capsys.readouterr()
    assert _cli("evaluate", whole, corpus / "tok", "--views", "4", "--json") == 0
    said = capsys.readouterr()
    assert json.loads(said.out)["views"] == 4
    assert "trained without --afib-beat-loss" in said.err
    # Another decision threshold: its counts are the curve's row at that threshold.
    low = _evaluate_json(capsys, ft, corpus / "tok", "--afib-threshold", "0.2")
    row = next(r for r in rep["threshold_counts"] if r["threshold"] == 0.2)
    assert low["counts"] == {k: row[k] for k in ("tp", "fp", "fn", "tn")}
    assert low["threshold"] == 0.2 and low["threshold_counts"] == rep["threshold_counts"]
    assert low["counts"]["tp"] >= rep["counts"]["tp"]
    assert low["afib"]["auroc"] == rep["afib"]["auroc"]
    assert _cli("evaluate", ft, corpus / "tok", "--afib-threshold", "1") == 2
    assert "--afib-threshold must be strictly between 0 and 1" in capsys.readouterr().err
    for offset in ("V=1", "V=0"):  # even an offset that would change nothing
        assert _cli("evaluate", ft, corpus / "tok", "--class-offset", offset) == 2
        assert "--class-offset is for beats runs, not an AFIB run" in capsys.readouterr().err
    assert _cli("evaluate", ft, corpus / "tok", "--beat-mlp-share", "0.5") == 2
    assert "--beat-mlp-share is for beats runs, not an AFIB run" in capsys.readouterr().err


def test_evaluate_says_when_records_use_a_lead_the_run_never_trained_on(
    beats_run, corpus, tmp_path, capsys
):
    import wfdb

    assert json.loads((beats_run / "lineage.json").read_text())["leads"] == ["MLII"]
    source = next((corpus / "syn").glob("*.hea")).with_suffix("")
    rec, ann = wfdb.rdrecord(str(source)), wfdb.rdann(str(source), "atr")
    folder = tmp_path / "leads"
    for name, lead in (("ii", "lead II"), ("v5", "V5")):
        (folder / name).mkdir(parents=True)
        wfdb.wrsamp(name, fs=rec.fs, units=["mV"], sig_name=[lead], p_signal=rec.p_signal[:, :1],
                    fmt=["16"], write_dir=str(folder / name))  # fmt: skip
        wfdb.wrann(name, "atr", ann.sample, ann.symbol, aux_note=ann.aux_note,
                   write_dir=str(folder / name))  # fmt: skip
    assert _cli("evaluate", beats_run, folder, "--json") == 0
    err = capsys.readouterr().err  # lead II is MLII's lead; V5 is not
    assert f"1 of 2 records read lead V5, which {beats_run} was not trained on (MLII)" in err
    assert _cli("evaluate", beats_run, folder / "ii", "--json") == 0
    assert "not trained on" not in capsys.readouterr().err
    # the same records as tokens: tokens.json keeps each record's lead
    from heartlm.ingest import IngestConfig, ingest
    from heartlm.tokens import TokenizeConfig, tokenize

    ingest([folder], tmp_path / "store", IngestConfig(workers=1))
    tokenize(tmp_path / "store", tmp_path / "tok",
             TokenizeConfig(codebook=beats_run / "codebook.safetensors", device="cpu"))  # fmt: skip
    capsys.readouterr()
    assert _cli("evaluate", beats_run, tmp_path / "tok", "--json") == 0
    err = capsys.readouterr().err
    assert "1 of 2 records read lead V5" in err and "ingest --lead chooses the lead" in err


def test_evaluate_afib_calls_no_record_of_too_few_beats(corpus, tmp_path, capsys):
    import wfdb

    ft = tmp_path / "ft_afib"
    assert _finetune(corpus, ft, "--task", "afib", "--from-scratch") == 0  # 16-beat windows
    source = next((corpus / "syn").glob("*.hea")).with_suffix("")
    rec, ann = wfdb.rdrecord(str(source)), wfdb.rdann(str(source), "atr")
    beats = ann.sample[[s != "+" for s in ann.symbol]]
    cuts = tmp_path / "cuts"
    cuts.mkdir()
    for name, n_beats in (("few", 4), ("short", 13)):  # under AFIB_MIN_BEATS; under a window
        end = int(beats[n_beats - 1] + 0.3 * rec.fs)
        keep = ann.sample < end
        wfdb.wrsamp(
            name,
            fs=rec.fs,
            units=rec.units,
            sig_name=rec.sig_name,
            p_signal=rec.p_signal[:end],
            fmt=["16"] * rec.n_sig,
            write_dir=str(cuts),
        )
        wfdb.wrann(name, "atr", ann.sample[keep], list(np.array(ann.symbol)[keep]),
                   aux_note=list(np.array(ann.aux_note)[keep]), write_dir=str(cuts))  # fmt: skip
    rep = _evaluate_json(capsys, ft, cuts)
    few, short = rep["per_record"]
    assert (few["record"], few["n_windows"]) == ("few", 0) and "too few to call" in few["note"]
    assert (short["record"], short["n_windows"]) == ("short", 1) and "note" not in short
    assert (rep["n_windows"], rep["n_short_windows"], rep["n_too_short"]) == (1, 1, 1)
    assert _cli("evaluate", ft, cuts) == 0
    assert "1 of them shorter" in capsys.readouterr().out
    # A scored block under 8 beats by choice (--afib-window) is called: only records are short.
    assert _evaluate_json(capsys, ft, corpus / "tok", "--afib-window", "4")["n_too_short"] == 0
    for file in cuts.glob("short.*"):
        file.unlink()
    assert _cli("evaluate", ft, cuts) == 2
    assert "too short for an AFIB call (each under 8 beats)" in capsys.readouterr().err


def test_evaluate_ensemble_averages_the_runs_outputs(beats_run, corpus, tmp_path, capsys):
    from heartlm.evaluate.scoring import evaluate

    a, b = tmp_path / "afib_a", tmp_path / "afib_b"
    for run, seed in ((a, "0"), (b, "1")):
        assert _finetune(corpus, run, "--task", "afib", "--from-scratch", "--seed", seed) == 0
    kw = {"device": "cpu", "all_records": True}
    one, other = evaluate(a, corpus / "tok", **kw), evaluate(b, corpus / "tok", **kw)
    assert not np.allclose(one["scores"], other["scores"])  # two different models
    both = evaluate(a, corpus / "tok", ensemble=[b], **kw)
    np.testing.assert_allclose(both["scores"], (one["scores"] + other["scores"]) / 2, atol=1e-6)
    assert both["report"]["ensemble"] == [str(b)] and "ensemble" not in one["report"]
    # A run named twice would count twice (the first run again: a no-op that hides a typo);
    # a beats run with an AFIB run is refused.
    for again in ((beats_run,), (b, b)):
        assert _cli("evaluate", a if len(again) > 1 else beats_run, corpus / "tok",
                    "--ensemble", *again) == 2  # fmt: skip
        assert "again: its vote would count twice" in capsys.readouterr().err
    assert _cli("evaluate", beats_run, corpus / "tok", "--ensemble", a) == 2
    err = capsys.readouterr().err
    assert "--ensemble: its task is afib, the first run's is beats" in err
    assert "\n" not in err.strip()


def test_a_block_spanning_the_window_scores_as_the_window(corpus):
    """The window head is linear after a mean pool: the block pool over every real beat gives
    the plain window score, so context scoring changes only what the block averages."""
    from heartlm.labelled.predict import afib_scores
    from heartlm.model import load_pretrained
    from heartlm.train.data import load_tokens

    model, _ = load_pretrained(corpus / "pre")
    streams = data.streams_of(load_tokens(corpus / "tok"))
    w = data.cut_windows(streams, [0, 1], window=16, stride=16, task="afib")
    plain = afib_scores(model, w, 8, torch.device("cpu"))
    w.scored = ~w.pad
    np.testing.assert_allclose(afib_scores(model, w, 8, torch.device("cpu"), scored_block=True),
                               plain, rtol=1e-5, atol=1e-6)  # fmt: skip


class _BeatwiseAfib(torch.nn.Module):
    """A model whose per-beat AFIB logits depend on each beat's own tokens only; its window
    head is their mean over the real beats, as HeartLM's linear head on a mean pool is."""

    def forward(self, morph, rhythm, valid_BT=None, head="window_beats", features_BTF=None):
        beats = torch.stack([torch.zeros_like(morph, dtype=torch.float32),
                             (morph % 7).float() - 3.0 + 0.1 * rhythm.float()], dim=-1)  # fmt: skip
        if head == "window_beats":
            return beats
        assert head == "window"
        real = (torch.ones_like(morph) if valid_BT is None else valid_BT).float()[..., None]
        return (beats * real).sum(1) / real.sum(1)


@pytest.mark.parametrize("block", [16, 5, None])
def test_afib_views_average_the_beats_logits_over_windows_then_pool_each_block(corpus, block):
    """With logits that ignore context, averaging each beat's logits over overlapping windows
    changes nothing: the averaged path must give the one-window path's scores exactly (every
    beat found, weights normalised, each window pooled over its own block; None: the run's
    whole windows, scored over their real beats, as `evaluate` without --afib-window)."""
    from heartlm.labelled.predict import afib_scores, averaged_beat_outputs, block_afib_scores
    from heartlm.train.data import load_tokens

    model, cpu = _BeatwiseAfib(), torch.device("cpu")
    streams = data.streams_of(load_tokens(corpus / "tok"))
    records = list(range(len(streams.boundaries) - 1))
    if block is None:
        windows = data.cut_windows(streams, records, window=16, stride=16, task="afib")
        one, members = afib_scores(model, windows, 8, cpu), ~windows.pad
    else:
        windows = data.cut_context_windows(streams, records, context=16, block=block)
        one = afib_scores(model, windows, 8, cpu, scored_block=True)
        members = windows.scored & ~windows.pad
    overlapping = data.cut_windows(streams, records, window=16, stride=4, task="afib")
    beat, logits = averaged_beat_outputs(model, overlapping, 8, cpu, head="window_beats",
                                         probabilities=False)  # fmt: skip
    assert np.array_equal(beat, np.unique(windows.beat[~windows.pad]))
    scores = block_afib_scores(windows, members, beat, logits)
    np.testing.assert_allclose(scores, one, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="no averaged logits"):  # a beat left out is an error
        block_afib_scores(windows, members, beat[1:], logits[1:])


def _copy_tokens(corpus, dest, edit_meta=None):

    shutil.copytree(corpus / "tok", dest)
    if edit_meta is not None:
        meta = json.loads((dest / "tokens.json").read_text())
        edit_meta(meta)
        (dest / "tokens.json").write_text(json.dumps(meta))
    return dest


def test_mitdb_ds2_never_trains_and_is_the_default_test_set(corpus, tmp_path, capsys):

    names = ["100", "101", "106", "108", "109", "112"]  # 100 is DS2, the rest DS1

    def as_mitdb(meta):
        for rec, name in zip(meta["records"], names, strict=True):
            rec["name"], rec["db"] = name, "mitdb"

    tok = _copy_tokens(corpus, tmp_path / "mitdb_tok", as_mitdb)
    args = ["finetune", corpus / "pre", "--data", tok, "--window", "16", "--batch", "8"]
    args += ["--steps", "2", "--device", "cpu"]
    assert _cli(*args, "--out", tmp_path / "bad", "--records", "100", "101", "106") == 2
    assert "DS2 records 100 would be used for training" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    assert _cli(*args, "--out", tmp_path / "ok") == 0
    info = json.loads((tmp_path / "ok" / "finetune.json").read_text())
    assert "mitdb/100" not in info["train_records"] + info["val_records"]
    assert len(info["train_records"]) + len(info["val_records"]) == 5
    rep = _evaluate_json(capsys, tmp_path / "ok", tok)
    assert rep["n_records"] == 1 and "DS2 only" in rep["scope"]
    assert _evaluate_json(capsys, tmp_path / "ok", tok, "--all-records")["n_records"] == 6

    def ds1_only(meta):
        as_mitdb(meta)
        meta["records"][0]["name"] = "115"

    ds1 = _copy_tokens(corpus, tmp_path / "ds1_tok", ds1_only)
    capsys.readouterr()
    assert _cli("evaluate", tmp_path / "ok", ds1) == 2
    assert "empty test split" in capsys.readouterr().err


@pytest.mark.parametrize("inputs", ["relative", "rhythm"])
def test_inputs_without_their_feature_columns_are_refused(corpus, tmp_path, capsys, inputs):
    """Tokens whose features are all absolute shape (no rr_, p_ or relative columns) leave
    --inputs relative or rhythm nothing to read: one line, not a model fed on zeros."""

    def shape_only(meta):
        meta["features"] = [f"beat_pc{i}" for i in range(len(meta["features"]))]

    tok = _copy_tokens(corpus, tmp_path / "shape_tok", shape_only)
    capsys.readouterr()
    assert _finetune(corpus, tmp_path / "ft", "--data", tok, "--inputs", inputs) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(tok / "tokens.json") in err and inputs in err
    assert not (tmp_path / "ft").exists()
    pre = ["pretrain", tok, "--out", tmp_path / "pre", "--preset", "tiny", "--window", "16",
           "--steps", "2", "--device", "cpu", "--inputs", inputs]  # fmt: skip
    assert _cli(*pre) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(tok / "tokens.json") in err and inputs in err
    assert not (tmp_path / "pre").exists()


def test_bad_inputs_are_one_line_errors(beats_run, corpus, tmp_path, capsys, monkeypatch):
    import dataclasses

    from heartlm import shards
    from heartlm.finetune import pipeline
    from heartlm.tokens import TokenizeConfig, tokenize

    def error_of(*argv) -> str:
        capsys.readouterr()
        assert _cli(*argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith("heartlm: error:"), err
        return err

    # Tokens of another vocabulary / another codebook of the same size.
    tokenize(corpus / "store", tmp_path / "tok48", TokenizeConfig(vocab=48, device="cpu"))
    tokenize(corpus / "store", tmp_path / "tok32", TokenizeConfig(vocab=32, seed=9, device="cpu"))
    base = ["finetune", corpus / "pre", "--window", "16", "--steps", "2", "--device", "cpu"]
    assert "vocabulary" in error_of(*base, "--data", tmp_path / "tok48", "--out", tmp_path / "a")
    assert "codebook" in error_of(*base, "--data", tmp_path / "tok32", "--out", tmp_path / "b")
    assert "codebook" in error_of("evaluate", beats_run, tmp_path / "tok32")
    # AFIB on records without rhythm annotations names the folder.
    norhythm = _copy_tokens(corpus, tmp_path / "norhythm")
    n = len(shards.read_shard(norhythm / "rhythm_label.bin"))
    shards.write_shard(norhythm / "rhythm_label.bin", np.zeros(n, np.int8))
    err = error_of(*base, "--task", "afib", "--data", norhythm, "--out", tmp_path / "c")
    assert "norhythm" in err and "no rhythm labels" in err
    # An empty or unsplittable training split.
    one = ["--data", corpus / "tok", "--records", "s0000", "--out", tmp_path / "d"]
    assert "cannot be split" in error_of(*base, *one)
    # A pretrained (not fine-tuned) run, and a flag out of range.
    assert "not a fine-tuned" in error_of("evaluate", corpus / "pre", corpus / "tok")
    assert "--label-fraction" in error_of(*base, "--data", corpus / "tok", "--out", tmp_path / "e",
                                          "--label-fraction", "0")  # fmt: skip
    assert "--afib-beat-loss needs --task afib" in error_of(
        *base, "--data", corpus / "tok", "--out", tmp_path / "f", "--afib-beat-loss", "1"
    )
    keep = ["--data", corpus / "tok", "--out", tmp_path / "f", "--keep-labels-of", "syn"]
    assert "--label-fraction 1 keeps whole anyway" in error_of(*base, *keep)
    assert "only with --task beats" in error_of(*base, *keep, "--task", "afib",
                                                "--label-fraction", "0.5")  # fmt: skip
    keep[-1] = "synth"  # a misspelt database: every label would silently be drawn from
    assert "--keep-labels-of synth: no training record is of that database (they are of syn)" in (
        error_of(*base, *keep, "--label-fraction", "0.5"))  # fmt: skip
    # The beat loss pools the beats as the window head does: a CLS-token model is refused.
    real_build = pipeline.build_model

    def cls_model(*args):
        model, window = real_build(*args)
        model.cfg = dataclasses.replace(model.cfg, cls_token=True)
        return model, window

    monkeypatch.setattr(pipeline, "build_model", cls_model)
    err = error_of(*base, "--task", "afib", "--data", corpus / "tok", "--out", tmp_path / "g",
                   "--afib-beat-loss", "1")  # fmt: skip
    assert "CLS token" in err and str(corpus / "pre") in err
    assert not any((tmp_path / x).exists() for x in "abcdefg")


@pytest.mark.distributed
def test_finetune_on_two_processes(corpus, tmp_path):

    # A subprocess: --nproc re-executes the command line (sys.argv) under torchrun.
    ft = tmp_path / "ft2"
    args = ["finetune", corpus / "pre", "--data", corpus / "tok", "--out", ft, "--window", "16"]
    args += ["--batch", "8", "--steps", "4", "--val-every", "2", "--device", "cpu", "--nproc", "2"]
    done = subprocess.run([sys.executable, "-m", "heartlm", *map(str, args)], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    info = json.loads((ft / "finetune.json").read_text())
    assert info["best"]["step"] in (2, 4) and (ft / "model.safetensors").is_file()
    assert not (tmp_path / ".ft2.partial").exists()


def test_embed_of_raw_wfdb_records_matches_their_token_folder(corpus):
    """A pretrained run tokenizes WFDB records with its token folder's codebook and ingest
    settings: the embeddings are those of the same records as tokens."""
    from heartlm.tensorfile import load_tensors

    assert _cli("embed", corpus / "pre", corpus / "syn", "--out", corpus / "emb_raw") == 0
    assert _cli("embed", corpus / "pre", corpus / "tok", "--out", corpus / "emb_tok") == 0
    raw = load_tensors(corpus / "emb_raw" / "embeddings.safetensors")
    tok = load_tensors(corpus / "emb_tok" / "embeddings.safetensors")
    assert raw["beat"].shape[0] > 100
    assert torch.equal(raw["beat"], tok["beat"]) and torch.equal(raw["window"], tok["window"])
    table = (corpus / "emb_raw" / "beats.csv").read_text()
    assert table == (corpus / "emb_tok" / "beats.csv").read_text()


def test_a_resume_with_nothing_to_resume_names_the_run(corpus, tmp_path, capsys):
    """Not `.ft.partial`, where every fine-tuning run is built: the user never named it."""
    out = tmp_path / "ft"
    capsys.readouterr()
    assert _finetune(corpus, out, "--resume") == 0
    err = capsys.readouterr().err
    line = f"heartlm: {out}: nothing to resume (no checkpoint); starting at step 0"
    assert err.splitlines().count(line) == 1 and ".partial" not in err, err
    assert (out / "finetune.json").is_file()


def _two_steps(corpus, out, *extra) -> list:
    """`finetune`'s arguments for two steps of the tiny corpus on the CPU, `extra` last."""
    return ["finetune", corpus / "pre", "--data", corpus / "tok", "--out", out, "--window", "16",
            "--batch", "8", "--steps", "2", "--warmup", "1", "--device", "cpu", *extra]  # fmt: skip


def test_the_per_beat_networks_bins_are_fitted_on_the_training_beats(corpus, tmp_path, capsys):
    from safetensors.torch import load_file

    out = tmp_path / "ft_bins"
    args = _two_steps(corpus, out, "--beat-mlp", "8", "--beat-mlp-bins", "4")
    assert _cli(*args) == 0
    assert json.loads((out / "config.json").read_text())["model"]["beat_mlp_bins"] == 4
    weights = load_file(out / "model.safetensors")
    edges, n_columns = weights["beat_mlp.bins.edges"], weights["beat_mlp.bins.weight"].shape[0]
    assert bool(weights["beat_mlp.bins.fitted"]) and edges.shape == (n_columns, 5)
    assert (edges.diff(dim=1) > 0).all()
    assert not torch.equal(edges[0], torch.linspace(0, 1, 5))  # placed on the data
    assert _evaluate_json(capsys, out, corpus / "tok")["n_beats"] > 0
    assert _cli(*args[:-2], "--beat-mlp-bins", "1", "--overwrite") == 2
    assert "--beat-mlp-bins must be 0 or at least 2, not 1" in capsys.readouterr().err
    assert _cli(*args[:-4], "--beat-mlp", "0", "--beat-mlp-bins", "4", "--overwrite") == 2
    assert "not with --beat-mlp 0" in capsys.readouterr().err
    assert _cli(*args[:-4], *args[-2:], "--overwrite") == 2  # the encoder has no network
    assert "has no per-beat network for --beat-mlp-bins: add --beat-mlp" in capsys.readouterr().err
    assert _cli(*args[:-4], *args[-2:], "--task", "afib", "--overwrite") == 2
    assert "--beat-mlp-bins feeds the beat head: only with --task beats" in capsys.readouterr().err


def test_the_per_beat_network_is_as_deep_as_asked_and_refuses_depths_it_cannot_have(
    corpus, tmp_path, capsys
):
    from safetensors.torch import load_file

    out = tmp_path / "ft_deep"
    assert _cli(*_two_steps(corpus, out, "--beat-mlp", "8", "--beat-mlp-depth", "2")) == 0
    assert json.loads((out / "config.json").read_text())["model"]["beat_mlp_depth"] == 2
    assert load_file(out / "model.safetensors")["beat_mlp.hidden2.weight"].shape == (8, 8)
    assert _evaluate_json(capsys, out, corpus / "tok")["n_beats"] > 0

    def refused(*flags: str) -> str:
        assert _cli(*_two_steps(corpus, out, *flags, "--overwrite")) == 2
        return capsys.readouterr().err

    for depth in ("0", "5"):
        said = refused("--beat-mlp", "8", "--beat-mlp-depth", depth)
        assert f"--beat-mlp-depth must be between 1 and 4, not {depth}" in said
    assert "not with --beat-mlp 0" in refused("--beat-mlp", "0", "--beat-mlp-depth", "2")
    no_network = refused("--beat-mlp-depth", "2")  # the encoder has none
    assert "has no per-beat network for --beat-mlp-depth: add --beat-mlp" in no_network
    assert "only with --task beats" in refused("--beat-mlp-depth", "2", "--task", "afib")
    # one layer is what a network without the flag has: with none it asks for nothing
    plain = _two_steps(corpus, tmp_path / "ft_plain", "--beat-mlp", "0", "--beat-mlp-depth", "1")
    assert _cli(*plain) == 0


def test_the_per_beat_network_reads_the_transformers_state_when_asked(corpus, tmp_path, capsys):
    from safetensors.torch import load_file

    out = tmp_path / "ft_context"
    assert _cli(*_two_steps(corpus, out, "--beat-mlp", "8", "--beat-mlp-context")) == 0
    model = json.loads((out / "config.json").read_text())["model"]
    assert model["beat_mlp_context"] is True
    columns = 3 * model["n_features"] + 2 + model["d_model"]
    assert load_file(out / "model.safetensors")["beat_mlp.hidden.weight"].shape == (8, columns)
    assert _evaluate_json(capsys, out, corpus / "tok")["n_beats"] > 0

    def refused(*flags: str) -> str:
        assert _cli(*_two_steps(corpus, out, *flags, "--overwrite")) == 2
        return capsys.readouterr().err

    assert "not with --beat-mlp 0" in refused("--beat-mlp", "0", "--beat-mlp-context")
    no_network = refused("--beat-mlp-context")  # the encoder has none
    assert "has no per-beat network for --beat-mlp-context: add --beat-mlp" in no_network
    assert "only with --task beats" in refused("--beat-mlp-context", "--task", "afib")
    stopped = tmp_path / "ft_stopped"
    stop = ("--steps", "6", "--ckpt-every", "2", "--stop-at", "2")
    assert _finetune(corpus, stopped, "--beat-mlp", "8", "--beat-mlp-context", *stop) == 0
    capsys.readouterr()
    assert _finetune(corpus, stopped, "--beat-mlp", "8", "--steps", "6", "--resume") == 2
    err = capsys.readouterr().err
    assert "checkpoint model has beat_mlp_context=True, this run False (--beat-mlp-context)" in err
    resumed = ("--beat-mlp", "8", "--beat-mlp-context", "--steps", "6", "--resume")
    assert _finetune(corpus, stopped, *resumed) == 0


@pytest.mark.gpu
def test_a_network_reading_context_fine_tunes_deterministically_on_a_gpu(corpus, tmp_path):
    """Under --deterministic two CUDA fine-tunings of a per-beat network reading the
    transformer's state export the same weights, and the transformer under it trains. Each
    run in its own process: cuBLAS reads its workspace setting at a process's first call."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from safetensors.torch import load_file

    weights = []
    for name in ("a", "b"):
        argv = _two_steps(corpus, tmp_path / name, "--beat-mlp", "8", "--beat-mlp-depth", "2",
                          "--beat-mlp-context", "--steps", "6", "--deterministic")  # fmt: skip
        argv[argv.index("--device") + 1] = "cuda"
        done = subprocess.run([sys.executable, "-m", "heartlm", *map(str, argv)],
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        weights.append(load_file(tmp_path / name / "model.safetensors"))
    assert weights[0].keys() == weights[1].keys()
    for key, value in weights[0].items():
        assert torch.equal(value, weights[1][key]), key
    start = load_file(corpus / "pre" / "model.safetensors")
    assert not torch.equal(weights[0]["blocks.0.qkv.weight"], start["blocks.0.qkv.weight"])


def test_a_resume_keeps_the_per_beat_network_or_is_refused(corpus, tmp_path, capsys):
    out = tmp_path / "ft"
    stop = ("--steps", "6", "--ckpt-every", "2", "--stop-at", "2")
    assert _finetune(corpus, out, "--beat-mlp", "8", *stop) == 0
    capsys.readouterr()
    for flags in ((), ("--beat-mlp", "16")):  # the pretrained run's 0, another width
        assert _finetune(corpus, out, *flags, "--steps", "6", "--resume") == 2
        err = capsys.readouterr().err.strip()
        assert "checkpoint model has beat_mlp=8, this run" in err and "(--beat-mlp)" in err, err
    assert _finetune(corpus, out, "--beat-mlp", "8", "--steps", "6", "--resume") == 0
    assert json.loads((out / "config.json").read_text())["model"]["beat_mlp"] == 8
    shapes = (("--beat-mlp-bins", "4", "beat_mlp_bins", "0"),
              ("--beat-mlp-depth", "2", "beat_mlp_depth", "1"))  # fmt: skip
    for flag, value, field, default in shapes:
        shaped = tmp_path / f"ft_{field}"
        assert _finetune(corpus, shaped, "--beat-mlp", "8", flag, value, *stop) == 0
        capsys.readouterr()
        assert _finetune(corpus, shaped, "--beat-mlp", "8", "--steps", "6", "--resume") == 2
        err = capsys.readouterr().err
        assert f"checkpoint model has {field}={value}, this run {default} ({flag})" in err, err
        resumed = ("--beat-mlp", "8", flag, value, "--steps", "6", "--resume")
        assert _finetune(corpus, shaped, *resumed) == 0
    # a checkpoint written before the depth was recorded had one layer
    older = tmp_path / "ft_older"
    assert _finetune(corpus, older, "--beat-mlp", "8", *stop) == 0
    for meta in older.rglob("meta.json"):
        saved = json.loads(meta.read_text())
        del saved["model"]["beat_mlp_depth"]
        meta.write_text(json.dumps(saved))
    capsys.readouterr()
    deeper = ("--beat-mlp", "8", "--beat-mlp-depth", "2", "--steps", "6", "--resume")
    assert _finetune(corpus, older, *deeper) == 2
    err = capsys.readouterr().err
    assert "checkpoint model has beat_mlp_depth=1, this run 2 (--beat-mlp-depth)" in err, err
    assert _finetune(corpus, older, "--beat-mlp", "8", "--steps", "6", "--resume") == 0


def test_a_resume_with_another_training_set_or_loss_is_refused(corpus, tmp_path, capsys):
    """A resume with other records, label share, initialisation, task or loss settings trained
    one model on two sets (or objectives) while finetune.json named only the last; the first
    three records are the run's."""
    out = tmp_path / "ft"
    first = ("--records", "s0000", "s0001", "s0002", "--val-fraction", "0.34")
    stop = ("--steps", "6", "--ckpt-every", "2", "--stop-at", "2")
    assert _finetune(corpus, out, *first, *stop) == 0
    capsys.readouterr()
    other = ("--records", "s0001", "s0002", "s0003", "--val-fraction", "0.34")
    changes = {
        "other training records": other,
        "label fraction 1.0, this run asks for 0.5 (--label-fraction)": (
            *first, "--label-fraction", "0.5"),
        "from scratch False, this run asks for True (--from-scratch)": (*first, "--from-scratch"),
        "task beats, this run asks for afib (--task)": (*first, "--task", "afib"),
        "seed 0, this run asks for 3 (--seed)": (*first, "--seed", "3"),
        "another objective (--label-smoothing 0.0 -> 0.1)": (
            *first, "--label-smoothing", "0.1"),
        "another objective (--class-weight-power 0.5 -> 1.0)": (
            *first, "--class-weight-power", "1"),
    }  # fmt: skip
    for message, flags in changes.items():
        assert _finetune(corpus, out, *flags, "--steps", "6", "--resume") == 2, message
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err
    assert _finetune(corpus, out, *first, "--steps", "6", "--resume") == 0  # the same set
    info = json.loads((out / "finetune.json").read_text())
    assert sorted(info["train_records"] + info["val_records"]) == [
        f"syn/s000{i}" for i in range(3)]  # fmt: skip
    assert "train_records" not in json.loads((out / "config.json").read_text())


def test_evaluate_without_scored_beats_says_so_in_one_line(beats_run, corpus, monkeypatch):
    from heartlm.errors import HeartlmError
    from heartlm.evaluate import scoring

    empty = (np.zeros(0, np.int64), np.zeros((0, 0)))
    monkeypatch.setattr(scoring, "beat_probabilities", lambda *_, **__: empty)
    with pytest.raises(HeartlmError, match="no AAMI beat labels"):
        scoring.evaluate(beats_run, corpus / "tok", device="cpu", ensemble=[beats_run])


def test_a_beats_ensemble_averages_probabilities_not_votes(beats_run, corpus, monkeypatch):
    from heartlm.evaluate import scoring

    # One member sure of N between two leaning to S: the mean says N; a vote, or either
    # outer member alone, says S.
    lean, sure = [0.4, 0.6, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0]
    shares = iter([lean, sure, lean])

    def member(model, windows, batch, device, mlp_share=None):
        beat = np.sort(windows.beat[windows.scored])
        return beat, np.tile(next(shares), (len(beat), 1))

    monkeypatch.setattr(scoring, "beat_probabilities", member)
    both = scoring.evaluate(beats_run, corpus / "tok", device="cpu", ensemble=[beats_run] * 2)
    assert len(both["scores"]) > 0 and (both["scores"] == 0).all()


@pytest.mark.parametrize("views", [1, 4])
def test_a_beats_ensemble_may_mix_windows_each_reading_its_own(
    beats_run, corpus, tmp_path, monkeypatch, views
):
    """A run on 8-beat windows beside one on 16: each member scores the same beats from
    windows of its own size, and the probabilities are averaged beat by beat."""
    from heartlm.errors import HeartlmError
    from heartlm.evaluate import scoring
    from heartlm.labelled.predict import predicted_classes
    from heartlm.train.data import load_tokens

    short = tmp_path / "short"
    if not short.exists():
        assert _finetune(corpus, short, "--window", "8", "--seed", "1") == 0
    kw = {"device": "cpu", "all_records": True, "views": views}
    alone = scoring.evaluate(beats_run, corpus / "tok", **kw)["report"]
    name = "beat_probabilities" if views == 1 else "averaged_beat_outputs"
    real, seen = getattr(scoring, name), []

    def spy(model, windows, batch, device, mlp_share=None):
        beat, prob = real(model, windows, batch, device, mlp_share=mlp_share)
        seen.append((windows.beat.shape[1], beat, prob))
        return beat, prob

    monkeypatch.setattr(scoring, name, spy)
    both = scoring.evaluate(beats_run, corpus / "tok", ensemble=[short], **kw)
    (wide, beat, p_wide), (narrow, other, p_narrow) = seen
    assert (wide, narrow) == (16, 8) and np.array_equal(beat, other)
    assert both["report"]["n_beats"] == alone["n_beats"]
    assert both["report"]["ensemble_windows"] == [16, 8] and "ensemble_windows" not in alone
    labelled = np.asarray(load_tokens(corpus / "tok").aami)[beat] >= 0
    mean = predicted_classes((p_wide + p_narrow) / 2)
    assert np.array_equal(both["scores"], mean[labelled])
    assert not np.array_equal(p_wide, p_narrow)  # two models: the mean is not either one
    # A member that leaves out beats the first scores is refused, not averaged out of line.
    monkeypatch.setattr(scoring, name,
                        lambda m, w, *_, **kw: (lambda b, p: (b[1:], p[1:]) if w.beat.shape[1] == 8
                                                else (b, p))(*real(m, w, *_, **kw)))  # fmt: skip
    with pytest.raises(HeartlmError, match="does not score every beat the first does"):
        scoring.evaluate(beats_run, corpus / "tok", ensemble=[short], **kw)


def test_an_afib_ensemble_member_of_another_window_is_refused(corpus, tmp_path, capsys):
    runs = tmp_path / "a16", tmp_path / "a8"
    for run, window in zip(runs, ("16", "8"), strict=True):
        assert _finetune(corpus, run, "--task", "afib", "--from-scratch", "--window", window) == 0
    capsys.readouterr()
    assert _cli("evaluate", runs[0], corpus / "tok", "--ensemble", runs[1]) == 2
    assert "--ensemble: its window is 8, the first run's is 16" in capsys.readouterr().err


def test_ensemble_members_get_the_first_runs_checks(corpus, tmp_path, capsys):
    beat_loss, whole = tmp_path / "beat_loss", tmp_path / "whole"
    assert _finetune(corpus, beat_loss, "--task", "afib", "--from-scratch",
                     "--afib-beat-loss", "1") == 0  # fmt: skip
    assert _finetune(corpus, whole, "--task", "afib", "--from-scratch") == 0
    capsys.readouterr()
    args = ["evaluate", beat_loss, corpus / "tok", "--views", "4", "--json"]
    assert _cli(*args) == 0
    assert "trained without --afib-beat-loss" not in capsys.readouterr().err
    assert _cli(*args, "--ensemble", whole) == 0
    assert "trained without --afib-beat-loss" in capsys.readouterr().err  # the member's


def _rewrite(folder, name: str, change) -> None:
    """Apply `change` to every `name` file below `folder` (config.json, a checkpoint's
    meta.json, whose manifest is then written again), as a run an older heartlm wrote."""
    from heartlm.train.manifest import MANIFEST, write_manifest

    paths = list(folder.rglob(name))
    assert paths, f"no {name} below {folder}"
    for path in paths:
        saved = json.loads(path.read_text())
        change(saved)
        path.write_text(json.dumps(saved))
        if (path.parent / MANIFEST).is_file():
            write_manifest(path.parent)


def _rewrite_model_config(folder, name: str, **fields) -> None:
    _rewrite(folder, name, lambda saved: saved["model"].update(fields))


def test_a_per_beat_network_keeps_its_pretrained_view_when_fine_tuning_shows_more(
    corpus, tmp_path, capsys
):
    """Pretrained under `--inputs relative`, the network must not read the absolute columns
    in a fine-tuning whose `--inputs all` shows them to the transformer again; nor from a run
    an older heartlm wrote, which listed only the columns hidden beyond --inputs', and whose
    checkpoints still resume."""
    from heartlm.inputs import hidden_columns
    from heartlm.train.data import load_tokens

    names = load_tokens(corpus / "tok").meta["features"]
    absolute = hidden_columns(names, "relative")
    assert absolute
    pre = tmp_path / "pre_relative"
    pretrain = ["pretrain", corpus / "tok", "--out", pre, "--preset", "tiny", "--window", "16",
                "--batch", "8", "--steps", "4", "--warmup", "1", "--device", "cpu",
                "--objective", "next", "--inputs", "relative", "--beat-mlp", "8",
                "--ckpt-every", "2"]  # fmt: skip
    assert _cli(*pretrain, "--stop-at", "2") == 0
    _rewrite_model_config(pre, "meta.json", beat_mlp_hidden=[])  # an older heartlm's
    assert _cli(*pretrain, "--resume") == 0
    saved = json.loads((pre / "config.json").read_text())["model"]
    assert saved["beat_mlp_hidden"] == absolute == saved["absolute_columns"]
    tune = ["finetune", pre, "--data", corpus / "tok", "--window", "16", "--batch", "8",
            "--warmup", "1", "--device", "cpu", "--inputs", "all", "--beat-mlp", "8"]  # fmt: skip
    for written_by in ("this heartlm", "an older one"):
        if written_by == "an older one":
            _rewrite_model_config(pre, "config.json", beat_mlp_hidden=[])
        out = tmp_path / f"ft_all_{written_by.replace(' ', '_')}"
        assert _cli(*tune, "--out", out, "--steps", "1") == 0
        tuned = json.loads((out / "config.json").read_text())["model"]
        assert tuned["absolute_columns"] == [] and tuned["beat_mlp_hidden"] == absolute
    # a fine-tuning an older heartlm started showed its network those columns: no resume
    from heartlm.outdir import partial_dir

    out = tmp_path / "ft_all_stopped"
    stop = ("--steps", "6", "--ckpt-every", "2", "--stop-at", "2")
    assert _cli(*tune, "--out", out, *stop) == 0
    _rewrite_model_config(partial_dir(out), "meta.json", beat_mlp_hidden=[])
    assert _cli(*tune, "--out", out, "--steps", "6", "--resume") == 2
    assert "start it again without --resume" in capsys.readouterr().err


def test_a_run_that_recorded_a_setting_now_refused_as_inert_still_resumes(corpus, tmp_path):
    """Runs started before `--mask-prob` (pretrain `next`) and `--morph-dropout` (finetune
    `--inputs relative`) were refused where they do nothing recorded them; a resume without
    them (with them it is refused) compares only the settings that act."""
    pre = tmp_path / "pre_next"
    pretrain = ["pretrain", corpus / "tok", "--out", pre, "--preset", "tiny", "--window", "16",
                "--batch", "8", "--steps", "4", "--warmup", "1", "--device", "cpu",
                "--objective", "next", "--ckpt-every", "2"]  # fmt: skip
    assert _cli(*pretrain, "--stop-at", "2") == 0
    out = tmp_path / "ft_relative"
    stop = ("--steps", "6", "--ckpt-every", "2", "--stop-at", "2")
    assert _finetune(corpus, out, "--inputs", "relative", *stop) == 0
    from heartlm.outdir import partial_dir

    for run, recorded in ((pre, {"mask_prob": 0.3, "feature_weight": 2.0}),
                          (partial_dir(out), {"morph_dropout": 0.3})):  # fmt: skip
        _rewrite(run, "meta.json", lambda saved, r=recorded: saved["objective_settings"].update(r))
    assert _cli(*pretrain, "--resume") == 0
    assert _finetune(corpus, out, "--inputs", "relative", "--steps", "6", "--resume") == 0


def test_a_per_beat_network_pretrained_on_the_codes_is_where_fine_tuning_starts(
    corpus, tmp_path, capsys
):
    """`pretrain --beat-mlp`: the network, its code head and its bin edges are in the run;
    fine-tuning with the same shape starts from those weights and keeps the edges (refitting
    them on its own training beats would move them); another width is refused."""
    from safetensors.torch import load_file

    pre = tmp_path / "pre_mlp"
    shape = ["--beat-mlp", "16", "--beat-mlp-depth", "2", "--beat-mlp-bins", "4"]
    base = ["pretrain", corpus / "tok", "--out", pre, "--preset", "tiny", "--window", "16",
            "--batch", "8", "--steps", "4", "--warmup", "1", "--device", "cpu",
            "--objective", "next"]  # fmt: skip
    assert _cli(*base, "--beat-mlp-inputs", "relative", "--val-every", "2", *shape) == 0
    checks = [json.loads(line) for line in (pre / "metrics.jsonl").read_text().splitlines()]
    checks = [row for row in checks if "val_loss" in row]
    assert checks and all(row["val_beat_code_loss"] > 0 for row in checks)
    saved = json.loads((pre / "config.json").read_text())["model"]
    assert (saved["beat_mlp"], saved["beat_codes"], saved["causal"]) == (16, True, True)
    assert saved["beat_mlp_hidden"] and not saved["absolute_columns"]
    pretrained = load_file(pre / "model.safetensors")
    assert bool(pretrained["beat_mlp.bins.fitted"])
    out = tmp_path / "ft_from_mlp"
    tune = ["finetune", pre, "--data", corpus / "tok", "--out", out, "--window", "16",
            "--batch", "8", "--steps", "1", "--warmup", "1", "--lr", "1e-9", "--device", "cpu",
            "--inputs", "relative", *shape]  # fmt: skip
    assert _cli(*tune) == 0
    tuned = load_file(out / "model.safetensors")
    assert torch.equal(tuned["beat_mlp.bins.edges"], pretrained["beat_mlp.bins.edges"])
    for name in ("beat_mlp.hidden.weight", "beat_mlp.hidden2.weight", "beat_code_head.weight"):
        torch.testing.assert_close(tuned[name], pretrained[name], atol=1e-6, rtol=0)
    scratch = tmp_path / "ft_fresh_mlp"
    assert _cli("finetune", corpus / "pre", *tune[2:4], "--out", scratch, *tune[6:]) == 0
    refit = load_file(scratch / "model.safetensors")["beat_mlp.bins.edges"]
    assert not torch.equal(refit, pretrained["beat_mlp.bins.edges"])
    assert _cli(*tune[:-6], "--beat-mlp", "8", "--overwrite") == 2
    assert "per-beat network 16 wide, not 8 (--beat-mlp)" in capsys.readouterr().err
    assert _cli(*tune, "--beat-mlp-context", "--overwrite") == 2
    assert (
        "pretrained to name morphology codes (pretrain --beat-mlp) and reads no "
        "transformer state" in capsys.readouterr().err
    )
    for extra, said in ((("--beat-mlp-depth", "2"), "--beat-mlp-depth shapes the per-beat "
                         "network: add --beat-mlp WIDTH"),
                        (("--beat-mlp", "4", "--beat-mlp-bins", "1"), "--beat-mlp-bins must be"
                         " 0 or between 2 and 256, not 1"),
                        (("--beat-mlp", "4", "--inputs", "relative", "--beat-mlp-inputs", "all"),
                         "it can only hide more")):  # fmt: skip
        assert _cli(*base, "--overwrite", *extra) == 2
        assert said in capsys.readouterr().err
