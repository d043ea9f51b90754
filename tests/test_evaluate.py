"""Evaluation: metrics against hand-computed confusion matrices, AUROC, report formats."""

from __future__ import annotations

import json

import numpy as np
import pytest

from heartlm.errors import HeartlmError
from heartlm.labelled import metrics


def test_confusion_matrix_counts_reference_rows_predicted_columns():
    ref = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    pred = np.array([0, 0, 1, 1, 0, 2, 2, 2, 0])
    cm = metrics.confusion_matrix(ref, pred, 3)
    np.testing.assert_array_equal(cm, [[2, 1, 0], [1, 1, 0], [1, 0, 3]])


def test_class_scores_match_hand_computation():
    # Rows = reference N, S, V, F, Q; columns = predicted. F has no reference beats but one
    # prediction; Q has neither reference beats nor predictions.
    cm = np.array(
        [
            [90, 5, 3, 2, 0],
            [4, 6, 0, 0, 0],
            [1, 0, 9, 0, 0],
            [0, 0, 0, 0, 0],
            [0, 0, 0, 0, 0],
        ]
    )
    s = metrics.class_scores(cm)
    assert s["N"]["se"] == pytest.approx(90 / 100)
    assert s["N"]["ppv"] == pytest.approx(90 / 95)
    assert s["N"]["f1"] == pytest.approx(2 * 90 / (2 * 90 + 5 + 10))
    assert s["S"]["se"] == pytest.approx(6 / 10)
    assert s["S"]["ppv"] == pytest.approx(6 / 11)
    assert s["V"]["se"] == pytest.approx(9 / 10) and s["V"]["ppv"] == pytest.approx(9 / 12)
    assert s["V"]["support"] == 10 and s["N"]["support"] == 100
    # Zero support and a false prediction: every ratio is defined as 0, never NaN.
    assert s["F"] == {"se": 0.0, "ppv": 0.0, "f1": 0.0, "support": 0}
    assert s["Q"] == {"se": 0.0, "ppv": 0.0, "f1": 0.0, "support": 0}
    assert metrics.accuracy(cm) == pytest.approx(105 / 120)


def test_empty_matrix_has_defined_scores():
    cm = metrics.confusion_matrix(np.array([], int), np.array([], int), 5)
    assert metrics.accuracy(cm) == 0.0
    assert all(v["f1"] == 0.0 for v in metrics.class_scores(cm).values())


def test_confusion_matrix_rejects_codes_out_of_range():
    with pytest.raises(ValueError, match="reference"):
        metrics.confusion_matrix(np.array([0, 5]), np.array([0, 1]), 5)


def test_auroc_hand_computed_with_ties():
    # Positives score 0.9, 0.4, 0.6; negatives 0.1, 0.4, 0.8. Of 9 pairs the positive wins
    # (0.9 > all three), (0.6 > 0.1, 0.4), (0.4 > 0.1), ties once (0.4 = 0.4): 6.5 / 9.
    labels = np.array([1, 1, 1, 0, 0, 0])
    scores = np.array([0.9, 0.4, 0.6, 0.1, 0.4, 0.8])
    assert metrics.auroc(labels, scores) == pytest.approx(6.5 / 9)
    assert metrics.auroc(labels, -scores) == pytest.approx(1 - 6.5 / 9)
    assert metrics.auroc(np.ones(3), np.array([0.1, 0.2, 0.3])) is None


def test_binary_scores_at_threshold():
    labels = np.array([1, 1, 1, 0, 0, 0, 0])
    scores = np.array([0.9, 0.7, 0.2, 0.6, 0.1, 0.3, 0.0])
    b = metrics.binary_scores(labels, scores)
    # TP 2 (0.9, 0.7), FN 1 (0.2), FP 1 (0.6), TN 3.
    assert (b["tp"], b["fp"], b["fn"], b["tn"]) == (2, 1, 1, 3)
    assert b["se"] == pytest.approx(2 / 3) and b["ppv"] == pytest.approx(2 / 3)
    assert b["f1"] == pytest.approx(4 / 6)
    # Pairs won: 0.9 and 0.7 beat all four negatives, 0.2 beats 0.1 and 0.0: 10 of 12.
    assert b["auroc"] == pytest.approx(10 / 12)


def test_the_threshold_with_the_best_pooled_f1_is_chosen_over_both_folds():
    labels = np.array([1, 1, 1, 0, 0, 0, 0])
    scores = np.array([0.9, 0.7, 0.2, 0.6, 0.1, 0.3, 0.0])
    curve = metrics.threshold_counts(labels, scores)
    at = {row["threshold"]: row for row in curve}
    assert at[0.5] == {"threshold": 0.5, "tp": 2, "fp": 1, "fn": 1, "tn": 3}
    assert at[0.2] == {"threshold": 0.2, "tp": 3, "fp": 2, "fn": 0, "tn": 2}
    # One fold alone is best from 0.65 to 0.7 (F1 0.8: TP 2, FP 0, FN 1; nearest 0.5 wins);
    # pooled with a fold whose AF scores are low, the thresholds down to 0.2 win.
    assert metrics.best_threshold([curve]) == (0.65, pytest.approx(0.8))
    other = metrics.threshold_counts(np.array([1, 1, 0]), np.array([0.25, 0.3, 0.1]))
    threshold, f1 = metrics.best_threshold([curve, other])
    assert threshold == 0.2 and f1 == pytest.approx(10 / 12)


def test_the_plateau_threshold_is_the_middle_of_the_near_best_ones():
    # 100 AF windows (one at 0.72, one at 0.77, the rest at 0.9) and 200 others at 0-0.48:
    # F1 1 from 0.5 to 0.7, 0.995 at 0.75 (one miss), 0.990 from 0.8 to 0.9 (two misses).
    labels = np.r_[np.ones(100), np.zeros(200)]
    scores = np.r_[0.72, 0.77, np.full(98, 0.9), np.linspace(0.0, 0.48, 200)]
    curve = metrics.threshold_counts(labels, scores)
    # The best rule breaks the tie towards 0.5, the edge of the range; the plateau takes the
    # middle of the thresholds within 0.01 (0.5-0.75, six: the lower middle one).
    assert metrics.best_threshold([curve]) == (0.5, 1.0)
    assert metrics.plateau_threshold([curve]) == (0.6, 1.0)
    # Within 0.02 the three at 0.990 join (0.5-0.9, nine): the middle moves to 0.7.
    assert metrics.plateau_threshold([curve], within=0.02) == (0.7, 1.0)
    # Folds pool before the rule: two halves of the set give the same choice.
    halves = [metrics.threshold_counts(labels[i::2], scores[i::2]) for i in (0, 1)]
    assert metrics.plateau_threshold(halves) == (0.6, 1.0)


def test_the_pooled_curve_sums_the_folds_counts_at_each_threshold():
    one = metrics.threshold_counts(np.array([1, 1, 0, 0]), np.array([0.9, 0.4, 0.6, 0.1]))
    two = metrics.threshold_counts(np.array([1, 0]), np.array([0.7, 0.8]))
    at = {p["threshold"]: p for p in metrics.pooled_curve([one, two])}
    # At 0.5: fold one TP 1 (0.9), FP 1 (0.6), FN 1 (0.4); fold two TP 1, FP 1: F1 4/7.
    assert {k: at[0.5][k] for k in ("tp", "fp", "fn")} == {"tp": 2, "fp": 2, "fn": 1}
    assert at[0.5]["f1"] == pytest.approx(4 / 7)
    # At 0.75 fold two's AF window (0.7) is missed and its 0.8 still called: TP 1, FP 1, FN 2.
    assert {k: at[0.75][k] for k in ("tp", "fp", "fn")} == {"tp": 1, "fp": 1, "fn": 2}
    assert len(at) == len(metrics.AFIB_THRESHOLDS)


def test_beat_report_is_json_ready():
    rep = metrics.beat_report(np.array([0, 1, 2, 3, 4, 0]), np.array([0, 1, 2, 3, 4, 1]))
    back = json.loads(json.dumps(rep))
    assert set(back["per_class"]) == {"N", "S", "V", "F", "Q"}
    assert back["n_beats"] == 6 and back["accuracy"] == pytest.approx(5 / 6)
    assert back["confusion"][0] == [1, 1, 0, 0, 0]


def _refs(pairs):
    from heartlm.labelled.splits import RecordRef

    return [RecordRef(i, name, db, 10) for i, (db, name) in enumerate(pairs)]


def test_mitdb_is_scored_on_ds2_only_by_default():
    from heartlm.evaluate.scoring import choose_records

    refs = _refs([("mitdb", "100"), ("mitdb", "101"), ("mitdb", "102"), ("ludb", "1")])
    chosen, scope = choose_records(refs, all_records=False, select=None)
    assert [r.key for r in chosen] == ["mitdb/100", "ludb/1"]
    assert "DS2 only: 1 records and 1 records of other databases, scored together" in scope
    assert "--all-records" in scope
    ds2_only = _refs([("mitdb", "100"), ("mitdb", "101")])
    assert "other databases" not in choose_records(ds2_only, False, None)[1]
    assert len(choose_records(refs, all_records=True, select=None)[0]) == 4
    chosen, _ = choose_records(refs, all_records=False, select=["101", "ludb/1"])
    assert [r.key for r in chosen] == ["mitdb/101", "ludb/1"]
    only_ludb = _refs([("ludb", "1"), ("ludb", "2")])
    assert choose_records(only_ludb, False, None)[1] == "all 2 records"
    with pytest.raises(HeartlmError, match="does not hold"):
        choose_records(refs, False, ["999"])


def test_per_record_rows_give_each_record_its_own_s_v_and_f_counts():
    # record a: one S found, one F called N; record b: two F, one found, one V called F
    ref = np.array([1, 3, 0, 3, 3, 2])
    pred = np.array([1, 0, 0, 3, 0, 3])
    rows = metrics.per_record_beats(ref, pred, np.array([0, 0, 0, 1, 1, 1]), ["a", "b"])
    a, b = rows
    assert (a["S"]["support"], a["S"]["se"]) == (1, 1.0)
    assert (a["F"]["support"], a["F"]["se"]) == (1, 0.0)
    assert (b["F"]["support"], b["F"]["se"], b["F"]["ppv"]) == (2, 0.5, 0.5)
    assert (b["V"]["support"], b["V"]["se"]) == (1, 0.0)
    pooled = np.add(a["confusion"], b["confusion"])  # the rows' matrices sum to the whole's
    assert pooled.tolist() == metrics.beat_report(ref, pred)["confusion"]
    assert b["confusion"][2] == [0, 0, 0, 1, 0]  # b's V beat, called F
    # a record asked for without a labelled beat keeps its row, in the order asked
    empty, a_again = metrics.per_record_beats(
        ref, pred, np.array([0, 0, 0, 1, 1, 1]), ["a", "b", "c"], scored=[2, 0]
    )
    assert (empty["record"], empty["n_beats"], empty["accuracy"]) == ("c", 0, None)
    assert "no labelled beat" in empty["note"] and a_again == a
    rows = metrics.per_record_afib(np.array([1, 0]), np.array([1, 1]), np.zeros(2, int),
                                   ["a", "b"], scored=[0, 1])  # fmt: skip
    assert [r["n_windows"] for r in rows] == [2, 0] and "note" in rows[1]


def test_text_report_and_figures(tmp_path):
    from heartlm.evaluate import plots
    from heartlm.evaluate.cli import format_report

    ref, pred = np.array([0, 0, 1, 2]), np.array([0, 1, 1, 2])
    rep = metrics.beat_report(ref, pred)
    rep["per_record"] = metrics.per_record_beats(
        ref, pred, np.array([0, 0, 1, 1]), ["a", "b", "c"], scored=[0, 1, 2]
    )
    text = format_report({**rep, "task": "beats", "data": "d", "scope": "all 3 records"})
    # title, counts, 6-line class table, 7-line confusion matrix, 2 + 3 lines per record
    assert "accuracy 0.7500" in text and len(text.splitlines()) == 2 + 6 + 7 + 5
    assert text.splitlines()[-3].split()[:3] == ["a", "2", "0.5000"]
    assert text.splitlines()[-1].split()[:3] == ["c", "0", "no"]
    plots.confusion_png(
        np.array(rep["confusion"]), ("N", "S", "V", "F", "Q"), tmp_path / "c.png", "t"
    )
    plots.roc_png(np.array([0, 1, 1]), np.array([0.2, 0.9, 0.4]), tmp_path / "r.png", "t")
    for name in ("c.png", "r.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    labels, called, record = np.array([1, 1, 0, 1]), np.array([0, 1, 1, 0]), np.zeros(4, int)
    afib = {"task": "afib", "data": "d", "scope": "s", "n_windows": 4, "n_afib_windows": 3,
            "window": 8, "rule": "r", "accuracy": 0.25,
            "afib": {"f1": 1.0, "se": 1.0, "ppv": 1.0, "auroc": None},
            "afib_episodes": metrics.afib_episode_scores(labels, called, record),
            "per_record": metrics.per_record_afib(labels, called, record, ["a"])}  # fmt: skip
    text = format_report(afib)
    assert "AUROC n/a (one class)" in text
    # two reference episodes, the first found; one called run, overlapping the first
    assert "2 found with Se 0.5000; 1 called with +P 1.0000" in text
    assert text.splitlines()[-1].split() == ["a", "4", "3", "1", "1", "2"]
