"""Class offsets: a prior shift on the class probabilities, and its counts over a grid."""

import numpy as np
import pytest

from heartlm.labelled.offsets import (
    CLASS_OFFSETS,
    offset_classes,
    offset_counts,
    parse_offsets,
)


def test_no_offset_is_the_argmax_and_an_offset_moves_only_close_calls():
    prob = np.array([[0.6, 0.1, 0.3, 0.0, 0.0], [0.9, 0.0, 0.1, 0.0, 0.0]])
    assert offset_classes(prob).tolist() == [0, 0]
    assert offset_classes(prob, np.zeros(5)).tolist() == [0, 0]
    v = parse_offsets(["V=1"])
    assert v.tolist() == [0, 0, 1, 0, 0]
    # log 0.3 + 1 > log 0.6; log 0.1 + 1 < log 0.9
    assert offset_classes(prob, v).tolist() == [2, 0]
    # a probability of 0 stays the least likely, offset or not
    assert offset_classes(prob, parse_offsets(["F=3"])).tolist() == [0, 0]
    assert offset_classes(np.zeros((0, 5)), v).shape == (0,)


def test_offset_counts_hold_the_other_classes_at_the_given_offsets():
    rng = np.random.default_rng(0)
    prob = rng.dirichlet(np.ones(5), size=400)
    reference = rng.integers(0, 5, 400)
    base = parse_offsets(["S=0.5"])
    counts = offset_counts(reference, prob, base)
    assert counts["offsets"] == list(CLASS_OFFSETS)
    at_base = counts["confusion"]["S"][CLASS_OFFSETS.index(0.5)]
    for name in ("N", "V", "F"):  # each grid passes through the given offsets at 0
        assert counts["confusion"][name][CLASS_OFFSETS.index(0.0)] == at_base
    assert np.asarray(at_base).sum() == 400
    called_s = [np.asarray(cm)[:, 1].sum() for cm in counts["confusion"]["S"]]
    assert called_s == sorted(called_s) and called_s[0] < called_s[-1]


@pytest.mark.parametrize(
    ("items", "said"),
    [(["V"], "want CLASS=X"), (["v=1"], "want CLASS=X"), (["V=1", "V=2"], "names V twice"),
     (["V=inf"], "within"), (["V=-11"], "within"), (["V=x"], "'x' is not a number")],
)  # fmt: skip
def test_bad_offsets_are_refused_naming_the_item(items, said):
    with pytest.raises(ValueError, match=said):
        parse_offsets(items)
