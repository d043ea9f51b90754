"""Beat features (token format v2): the patient-relative template stream, rhythm against
means, code share, the feature space saved with the codebook, and the v2 shard format."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from heartlm import shards
from heartlm.errors import HeartlmError
from heartlm.inputs import ECTOPY_FEATURES, RATE_FEATURES, absolute_columns, hidden_columns
from heartlm.tokens import Codebook, TokenizeConfig, TokenSet, patient, tokenize
from heartlm.tokens.features import FEATURES, FeatureSpace, morphology_columns
from heartlm.tokens.rhythm import PATTERN_LAGS, RR_FEATURES, rr_features

FS, PRE, W = 250.0, 63, 163
QRS = patient.TEMPLATE_FEATURES.index("qrs_corr")
RESIDUAL = patient.TEMPLATE_FEATURES.index("residual")
SHARE = patient.TEMPLATE_FEATURES.index("cluster_share")


def _beat(kind: str, rng: np.random.Generator) -> np.ndarray:
    t = (np.arange(W) - PRE) / FS
    p = 0.15 * np.exp(-(((t + 0.16) / 0.025) ** 2))
    normal = np.exp(-((t / 0.012) ** 2)) + p
    wide_inverted_no_p = -1.4 * np.exp(-(((t - 0.02) / 0.045) ** 2))
    return (normal if kind == "N" else wide_inverted_no_p) + rng.normal(0, 0.01, W)


def _features(kinds: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    beats = np.stack([_beat(k, rng) for k in kinds]).astype(np.float32)
    regions = patient.regions(PRE, FS)
    return patient.template_features(beats, np.zeros(len(kinds)), *regions, FS)


def test_an_ectopic_beat_stands_out_from_the_dominant_template():
    kinds = "N" * 40 + "V" + "N" * 20
    f = _features(kinds)
    normal = np.array([k == "N" for k in kinds])
    normal[:5] = False  # the template is still forming
    assert f[normal, QRS].min() > 0.95
    assert f[40, QRS] < 0.5 and f[40, RESIDUAL] > 3 * f[normal, RESIDUAL].max()
    assert f[40, SHARE] < 0.1 < f[normal, SHARE].min()


def test_the_dominant_template_is_the_majority_not_the_first_beats():
    kinds = "V" * 10 + "N" * 200
    f = _features(kinds)
    assert f[-50:, QRS].min() > 0.95  # normal beats end up compared with the normal template
    assert f[-50:, SHARE].min() > 0.9
    assert np.isfinite(f).all()


def test_unusable_beats_get_no_features_and_do_not_spoil_the_template():
    rng = np.random.default_rng(1)
    beats = np.stack([_beat("N", rng) for _ in range(30)]).astype(np.float32)
    beats[10] = np.nan
    f = patient.template_features(beats, np.zeros(30), *patient.regions(PRE, FS), FS)
    assert np.isnan(f[10]).all()
    assert f[11:, QRS].min() > 0.95


def test_rr_features_are_relative_to_means_so_a_premature_majority_stays_premature():
    # Atrial bigeminy: premature beats are half of all beats; a median reference would sit
    # between the two intervals' clusters unpredictably, a mean sits between them.
    rr = np.tile([0.55, 1.05], 100)
    f = rr_features(rr, np.roll(rr, -1))
    col = RR_FEATURES.index("rr_prev_local")
    assert (f[20:-20:2, col] < 0.8).all() and (f[21:-20:2, col] > 1.2).all()
    assert np.isnan(rr_features(np.array([np.nan, 0.8]), np.array([0.8, np.nan]))[0, 0])


def test_rr_unpatterned_tells_regular_ectopy_from_atrial_fibrillation():
    # Bigeminy and trigeminy jump between intervals as much as AF does, but repeat every
    # second or third beat; AF repeats at no lag, and sinus rhythm barely jumps at all.
    rng = np.random.default_rng(0)
    jitter = 0.02 * rng.standard_normal(600)
    rhythms = {
        "sinus": 0.8 + jitter,
        "bigeminy": np.tile([0.5, 1.1], 300) + jitter,
        "trigeminy": np.tile([0.8, 0.5, 1.1], 200) + jitter,
        "af": rng.uniform(0.4, 1.2, 600),
    }
    jumpy, unpatterned = RR_FEATURES.index("rr_irregularity"), RR_FEATURES.index("rr_unpatterned")
    got = {}
    for name, rr in rhythms.items():
        f = rr_features(rr, np.roll(rr, -1))[40:-40]
        got[name] = (f[:, jumpy].mean(), f[:, unpatterned].mean())
    assert got["bigeminy"][0] > got["af"][0] > 5 * got["sinus"][0]
    assert got["trigeminy"][0] > got["af"][0] / 2
    assert got["bigeminy"][1] < got["af"][1] / 5 and got["trigeminy"][1] < got["af"][1] / 5
    assert got["af"][1] > 0.8 * got["af"][0]
    short = rr_features(np.array([np.nan, np.nan, 0.8]), np.full(3, 0.8))
    assert np.isnan(short[:, unpatterned]).all()


def test_rr_unpatterned_is_relative_to_the_local_rate_and_skips_lag_one():
    # A bigeminy that speeds up halfway: the column follows the local mean RR, so the same
    # pattern at another rate gives the same values, away from where the rate changes.
    rng = np.random.default_rng(1)
    pattern = np.tile([0.5, 1.1], 300) * (1 + 0.05 * rng.standard_normal(600))
    col, jumpy = RR_FEATURES.index("rr_unpatterned"), RR_FEATURES.index("rr_irregularity")
    features = rr_features(pattern, np.roll(pattern, -1))
    slow = features[:, col]
    mixed_rr = np.concatenate([pattern[:300], 0.6 * pattern[300:]])
    mixed = rr_features(mixed_rr, np.roll(mixed_rr, -1))[:, col]
    np.testing.assert_allclose(mixed[20:260], slow[20:260], rtol=1e-5)
    np.testing.assert_allclose(mixed[340:580], slow[340:580], rtol=1e-5)
    # Alternation is exactly what lag 1 would call irregular.
    assert 1 not in PATTERN_LAGS
    assert slow[40:-40].mean() < 0.5 * features[40:-40, jumpy].mean()


def test_code_share_counts_the_code_in_the_surrounding_beats():
    codes = np.array([5, 5, 6, 5, 7, 7, 7, 5], dtype=np.int64)
    got = patient.code_share(codes, 10, 2)
    for i in range(len(codes)):
        window = codes[max(0, i - 2) : i + 3]
        assert got[i] == pytest.approx(np.mean(window == codes[i]))


def test_feature_space_standardises_fills_and_clips():
    space = FeatureSpace(*(np.zeros(1, np.float32) for _ in range(4)), np.array([1.0, 0.0]),
                         np.array([2.0, 1.0]))  # fmt: skip
    z = space.standardize(np.array([[3.0, np.nan], [1.0, 100.0]], np.float32))
    assert z.dtype == np.float16
    np.testing.assert_allclose(z, [[1.0, 0.0], [0.0, 8.0]])


def test_column_groups():
    shape, absolute = morphology_columns(FEATURES), absolute_columns(FEATURES)
    assert set(absolute) < set(shape)
    assert all(FEATURES[i] not in RR_FEATURES for i in shape)
    assert {FEATURES[i] for i in range(len(FEATURES)) if i not in shape} == set(RR_FEATURES)


def test_input_sets_hide_nested_groups_and_unknown_sets_are_refused():
    rate = {FEATURES.index(name) for name in RATE_FEATURES}
    assert rate and rate <= {FEATURES.index(name) for name in RR_FEATURES}
    assert hidden_columns(FEATURES, "all") == []
    assert set(hidden_columns(FEATURES, "no-heart-rate")) == rate
    relative = set(hidden_columns(FEATURES, "relative"))
    assert relative == rate | set(absolute_columns(FEATURES))
    assert "rr_prev_local" not in {FEATURES[i] for i in relative}
    rhythm = set(hidden_columns(FEATURES, "rhythm"))
    kept = {FEATURES[i] for i in range(len(FEATURES)) if i not in rhythm}
    assert rhythm > relative
    p_wave = {"p_corr", "p_prev_corr", "p_ratio", "p_sinus_corr"}
    assert kept == ({*RR_FEATURES} | p_wave) - {*RATE_FEATURES}
    ectopy = set(hidden_columns(FEATURES, "rhythm-ectopy"))
    assert relative < ectopy < rhythm
    assert {FEATURES[i] for i in rhythm - ectopy} == set(ECTOPY_FEATURES)
    with pytest.raises(ValueError, match="inputs must be one of"):
        hidden_columns(FEATURES, "patient")


def test_two_dimensional_shards_round_trip_and_version_one_is_refused(tmp_path: Path):
    x = np.arange(12, dtype=np.float16).reshape(4, 3)
    shards.write_shard(tmp_path / "f.bin", x)
    np.testing.assert_array_equal(shards.read_shard(tmp_path / "f.bin"), x)
    raw = bytearray((tmp_path / "f.bin").read_bytes())
    raw[8:12] = (1).to_bytes(4, "little")
    (tmp_path / "v1.bin").write_bytes(bytes(raw))
    with pytest.raises(HeartlmError, match=r"version 1.*tokenize again"):
        shards.read_shard(tmp_path / "v1.bin")


@pytest.fixture(scope="module")
def tokens(tmp_path_factory) -> Path:
    from test_tokens import _write_store

    root = tmp_path_factory.mktemp("features")
    store = _write_store(root / "store")
    tokenize(store, root / "tok", TokenizeConfig(vocab=3, sample=900, iters=20, device="cpu"))
    return root


def test_tokenize_writes_standardised_features_and_a_reused_codebook_reproduces_them(tokens):
    ts = TokenSet.load(tokens / "tok")
    assert ts.feature_names == list(FEATURES)
    f = np.asarray(ts.features, np.float32)
    assert f.shape == (ts.n_beats, len(FEATURES)) and np.isfinite(f).all()
    assert np.abs(f.mean(axis=0)).max() < 0.05  # learnt on this very store
    again = tokens / "again"
    tokenize(tokens / "store", again, TokenizeConfig(codebook=tokens / "tok", device="cpu"))
    np.testing.assert_array_equal(TokenSet.load(again).features, ts.features)


def test_feature_space_is_part_of_the_codebook_hash(tokens, tmp_path):
    book = Codebook.load(tokens / "tok")
    before = book.content_hash
    book.space.std = book.space.std * 2
    assert book.content_hash != before
    meta = json.loads((tokens / "tok" / "codebook.json").read_text())
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "codebook.json").write_text(json.dumps({**meta, "version": 1}))
    (folder / "codebook.safetensors").write_bytes(
        (tokens / "tok/codebook.safetensors").read_bytes()
    )
    with pytest.raises(HeartlmError, match=r"v1.*learn a new codebook"):
        Codebook.load(folder)


def test_relative_only_model_ignores_codes_and_absolute_shape():
    from heartlm.model import HeartLM, model_config

    torch.manual_seed(0)
    cfg = model_config("tiny", vocab_size=40, rhythm_vocab_size=9, n_features=4, max_len=8,
                       relative_only=True, absolute_columns=(0, 1))  # fmt: skip
    model = HeartLM(cfg).eval()
    morph = torch.randint(5, 40, (2, 8))
    rhythm = torch.randint(5, 9, (2, 8))
    feats = torch.randn(2, 8, 4)
    out = model(morph, rhythm, features_BTF=feats, head="beat")
    other = feats.clone()
    other[..., :2] = torch.randn(2, 8, 2)
    assert torch.allclose(out, model(torch.randint(5, 40, (2, 8)), rhythm, features_BTF=other,
                                     head="beat"))  # fmt: skip
    other[..., 2] += 1.0
    assert not torch.allclose(out, model(morph, rhythm, features_BTF=other, head="beat"))


@pytest.mark.parametrize("embedding", ["linear", "periodic"])
def test_hidden_columns_without_relative_only_keep_the_codes_visible(embedding: str):
    from heartlm.model import HeartLM, model_config

    torch.manual_seed(0)
    cfg = model_config("tiny", vocab_size=40, rhythm_vocab_size=9, n_features=3, max_len=8,
                       absolute_columns=(2,), feature_embedding=embedding)  # fmt: skip
    model = HeartLM(cfg).eval()
    assert (model.feature_emb is not None) is (embedding == "periodic")
    morph, rhythm = torch.randint(5, 40, (2, 8)), torch.randint(5, 9, (2, 8))
    feats = torch.randn(2, 8, 3)
    out = model(morph, rhythm, features_BTF=feats, head="beat")
    other = feats.clone()
    other[..., 2] += 3.0
    assert torch.allclose(out, model(morph, rhythm, features_BTF=other, head="beat"))
    other[..., 1] += 3.0  # a visible column
    assert not torch.allclose(out, model(morph, rhythm, features_BTF=other, head="beat"))
    assert not torch.allclose(out, model((morph + 1).clamp(max=39), rhythm, features_BTF=feats,
                                         head="beat"))  # fmt: skip


def test_masked_objective_hides_the_shape_of_replaced_beats_and_reconstructs_it():
    from heartlm.model import HeartLM, model_config
    from heartlm.train.data import Batch
    from heartlm.train.objectives import MaskedBeats

    torch.manual_seed(0)
    feats = torch.randn(4, 32, 3)
    batch = Batch(torch.randint(5, 30, (4, 32)), torch.randint(5, 9, (4, 32)),
                  torch.zeros(4, 32, dtype=torch.long), torch.zeros(4, 32, dtype=torch.long),
                  None, torch.arange(4), feats)  # fmt: skip
    columns = torch.tensor([True, True, False])
    objective = MaskedBeats(30, mask_prob=0.25, mode="mask", feature_columns=columns,
                            feature_weight=1.0)  # fmt: skip
    morph, positions, _, hidden = objective.mask(batch)
    replaced = morph != batch.morph
    assert replaced.sum() == positions.numel()
    assert (hidden[replaced][:, :2] == 0).all()
    assert torch.equal(hidden[replaced][:, 2], feats[replaced][:, 2])
    assert torch.equal(hidden[~replaced], feats[~replaced])
    model = HeartLM(model_config("tiny", vocab_size=30, rhythm_vocab_size=9, n_features=3,
                                 max_len=32))  # fmt: skip
    with_recon, sums = objective(model, batch)
    plain, _ = MaskedBeats(30, mask_prob=0.25, mode="mask", feature_columns=columns)(model, batch)
    assert torch.isfinite(with_recon) and with_recon > plain
    assert sums["loss_sum"] / sums["count"] == pytest.approx(with_recon.item(), rel=1e-5)


def test_continuous_target_hides_every_column_and_the_rhythm_token_and_drops_the_code():
    """--feature-target all --code-weight 0: a replaced beat loses its RR and P columns and
    its rhythm token as well as its shape, and only the features are predicted."""
    from heartlm.model import HeartLM, model_config
    from heartlm.train.data import Batch
    from heartlm.train.objectives import MaskedBeats

    torch.manual_seed(0)
    batch = Batch(torch.randint(5, 30, (4, 32)), torch.randint(5, 9, (4, 32)),
                  torch.zeros(4, 32, dtype=torch.long), torch.zeros(4, 32, dtype=torch.long),
                  None, torch.arange(4), torch.randn(4, 32, 3))  # fmt: skip
    model = HeartLM(model_config("tiny", vocab_size=30, rhythm_vocab_size=9, n_features=3,
                                 max_len=32))  # fmt: skip
    seen: list[torch.Tensor] = []

    class Recording(torch.nn.Module):
        def forward(self, morph, rhythm, *args, **kwargs):
            seen.append(rhythm)
            return model(morph, rhythm, *args, **kwargs)

    every = torch.ones(3, dtype=torch.bool)
    kw = {"mask_prob": 0.25, "mode": "mask", "feature_columns": every}

    def loss(**more: object) -> tuple[torch.Tensor, dict]:
        return MaskedBeats(30, **kw, **more)(Recording(), batch)  # type: ignore[arg-type]

    only_features, sums = loss(feature_weight=1.0, code_weight=0.0, hide_rhythm=True)
    replaced = MaskedBeats(30, **kw).mask(batch)[0] != batch.morph
    assert replaced.any() and (seen[-1][replaced] == shards.MASK).all()
    assert torch.equal(seen[-1][~replaced], batch.rhythm[~replaced])
    both, _ = loss(feature_weight=1.0, hide_rhythm=True)
    code, _ = loss(feature_weight=0.0, hide_rhythm=True)
    assert only_features.item() == pytest.approx(both.item() - code.item(), rel=1e-5)
    assert sums["loss_sum"] / sums["count"] == pytest.approx(only_features.item(), rel=1e-5)
    assert "correct" not in sums  # no accuracy of an untrained code head
    loss(feature_weight=1.0)  # without hide_rhythm the model sees every rhythm token
    assert torch.equal(seen[-1], batch.rhythm)


def _causal_forecast_case(B: int, T: int, valid: torch.Tensor | None = None, **model_kw: object):
    """A batch of B windows of T beats with 3 random feature columns, and an untrained
    causal `tiny` model over a vocabulary of 30 that reads them (seeded; `model_kw`: more
    ModelConfig settings)."""
    from heartlm.model import HeartLM, model_config
    from heartlm.train.data import Batch

    torch.manual_seed(0)
    feats = torch.randn(B, T, 3)
    batch = Batch(torch.randint(5, 30, (B, T)), torch.randint(5, 9, (B, T)),
                  torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T, dtype=torch.long),
                  valid, torch.arange(B), feats)  # fmt: skip
    model = HeartLM(model_config("tiny", vocab_size=30, rhythm_vocab_size=9, n_features=3,
                                 max_len=T, causal=True, **model_kw)).eval()  # fmt: skip
    return batch, model


def test_forecast_objective_regresses_the_next_beats_features_from_the_past_only():
    """--objective forecast: position t predicts beat t+1's features (and code) through a
    causal model; its loss is the code's cross-entropy plus that squared error. What
    position t predicts does not change when beat t+1 does, and the forecast reads neither
    the columns that look ahead (the RR after a beat), nor the rhythm tokens (which bin it,
    UNK included), nor the codes (made from a window that can hold the next beat)."""
    from heartlm.train.objectives import make_objective

    batch, model = _causal_forecast_case(4, 32)
    feats = batch.features
    every = torch.ones(3, dtype=torch.bool)
    ahead = torch.tensor([False, True, False])  # column 1: the RR after each beat

    def objective(name: str, **kw: object):
        return make_objective(name, 30, feature_columns=every, **kw)  # type: ignore[arg-type]

    forecast = objective("forecast", feature_weight=1.0, code_weight=0.0, lookahead_columns=ahead)
    assert forecast.heads == ("mlm", "masked") and forecast.name == "forecast"
    seen = feats.clone()
    seen[..., 1] = 0.0
    masked_rhythm = torch.full_like(batch.rhythm, shards.MASK)
    masked_codes = torch.full_like(batch.morph, shards.MASK)
    with torch.no_grad():
        only_features, sums = forecast(model, batch)
        _, recon = model(masked_codes, masked_rhythm, head="masked", features_BTF=seen)
        expected = ((recon[:, :-1] - feats[:, 1:]) ** 2).mean()
        assert only_features.item() == pytest.approx(expected.item(), rel=1e-5)
        assert int(sums["count"]) == 4 * 31 and "correct" not in sums
        other_rhythm = dataclasses.replace(batch, rhythm=torch.randint(shards.UNK, 9, (4, 32)))
        assert forecast(model, other_rhythm)[0].item() == pytest.approx(only_features.item())
        other_codes = dataclasses.replace(batch, morph=torch.randint(5, 30, (4, 32)))
        assert forecast(model, other_codes)[0].item() == pytest.approx(only_features.item())
        unread = feats.clone()
        unread[..., 1] += 5.0
        not_target = make_objective("forecast", 30, feature_columns=~ahead, feature_weight=1.0,
                                    code_weight=0.0, lookahead_columns=ahead)  # fmt: skip
        assert not_target(model, dataclasses.replace(batch, features=unread))[0].item() == (
            pytest.approx(not_target(model, batch)[0].item())
        )  # neither read nor forecast: the loss does not move
        both, _ = objective("forecast", feature_weight=1.0, lookahead_columns=ahead)(model, batch)
        code, _ = objective("next", feature_weight=1.0)(model, batch)  # next: the code only
        code_hidden, _ = make_objective("next", 30)(
            lambda m, r, v, head, features_BTF: model(masked_codes, masked_rhythm, v, head=head,
                                                       features_BTF=seen), batch)  # fmt: skip
        assert both.item() == pytest.approx(code_hidden.item() + only_features.item(), rel=1e-5)
        assert code.item() != pytest.approx(code_hidden.item(), rel=1e-4)  # next reads them all
        later = seen.clone()
        later[:, 20:] += 5.0
        _, moved = model(masked_codes, masked_rhythm, head="masked", features_BTF=later)
        assert torch.allclose(moved[:, :20], recon[:, :20], atol=1e-5)
        assert not torch.allclose(moved[:, 20:], recon[:, 20:])
        changed, _ = forecast(model, dataclasses.replace(batch, features=unread))
        assert changed.item() != pytest.approx(only_features.item(), rel=1e-3)  # a target
    assert objective("next", feature_weight=1.0).heads == ("next",)
    with pytest.raises(ValueError, match="needs its lookahead_columns"):
        objective("forecast", feature_weight=1.0)  # it would read the next beat's timing


def test_next_beat_choice_scores_every_real_beat_of_the_window_by_cosine():
    from heartlm.train.objectives import CHOICE_TEMPERATURE, next_beat_choice

    g = torch.Generator().manual_seed(2)
    query, key = torch.randn(2, 6, 4, generator=g), torch.randn(2, 6, 4, generator=g)
    real = torch.arange(6) < torch.tensor([[4], [6]])
    logits = next_beat_choice(query, key, real)
    for b in range(2):
        for t in range(6):
            for j in range(6):
                if real[b, j] and j > t:
                    cosine = torch.nn.functional.cosine_similarity(query[b, t], key[b, j], dim=0)
                    assert logits[b, t, j].item() == pytest.approx(
                        cosine.item() / CHOICE_TEMPERATURE, rel=1e-4, abs=1e-4)  # fmt: skip
                else:
                    assert logits[b, t, j].item() < -1e8
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_bf16 = next_beat_choice(query, key, real)
    assert under_bf16.dtype == torch.float32
    torch.testing.assert_close(under_bf16, logits, rtol=1e-5, atol=1e-5)


def test_contrastive_objective_picks_the_next_beat_out_of_the_window():
    """--objective contrastive: forecast's inputs; the critic's query at t and the keys of
    the window's real beats (their target columns, whole: the future is a candidate, not an
    input), scored by the cross-entropy of picking beat t+1; `correct` counts the picks."""
    import torch.nn.functional as F

    from heartlm.train.objectives import make_objective, next_beat_choice

    valid = torch.arange(16) < torch.tensor([[16], [12], [16]])
    batch, model = _causal_forecast_case(3, 16, valid, choice_critic=True)
    feats = batch.features
    every = torch.ones(3, dtype=torch.bool)
    ahead = torch.tensor([False, True, False])
    choice = make_objective("contrastive", 30, feature_columns=every, feature_weight=1.0,
                            code_weight=0.0, lookahead_columns=ahead)  # fmt: skip
    assert choice.name == "contrastive" and choice.heads == ("mlm", "choice")
    seen = feats.clone()
    seen[..., 1] = 0.0
    masked = torch.full_like(batch.morph, shards.MASK)
    with torch.no_grad():
        loss, sums = choice(model, batch)
        _, query, key = model(masked, torch.full_like(batch.rhythm, shards.MASK), valid,
                              head="choice", features_BTF=seen, targets_BTF=feats)  # fmt: skip
        logits = next_beat_choice(query, key, valid)
        rows = [(b, t) for b in range(3) for t in range(15) if valid[b, t + 1]]
        picked = torch.stack([logits[b, t] for b, t in rows])
        target = torch.tensor([t + 1 for _, t in rows])
        assert loss.item() == pytest.approx(F.cross_entropy(picked, target).item(), rel=1e-5)
        assert int(sums["count"]) == len(rows) == 15 + 11 + 15
        assert int(sums["correct"]) == int((picked.argmax(-1) == target).sum())
        later = seen.clone()
        later[:, 10:] += 5.0  # what position t queries does not move with the beats after it
        _, moved, _ = model(masked, torch.full_like(batch.rhythm, shards.MASK), valid,
                            head="choice", features_BTF=later,
                            targets_BTF=feats + 5.0)  # fmt: skip
        assert torch.allclose(moved[:, :10], query[:, :10], atol=1e-5)  # nor with the keys
        future = feats.clone()
        future[:, 10:] += 5.0  # every column of the later beats, the lookahead one too
        _, mixed, _ = model(masked, torch.full_like(batch.rhythm, shards.MASK), valid,
                            head="choice", features_BTF=future * ~ahead,
                            targets_BTF=feats)  # fmt: skip
        assert torch.allclose(mixed[:, :10], query[:, :10], atol=1e-5)
        # Columns the key does not read (here the lookahead one) change nothing at all.
        rr_only = make_objective("contrastive", 30, feature_columns=~ahead, feature_weight=1.0,
                                 code_weight=0.0, lookahead_columns=ahead)  # fmt: skip
        shifted = feats.clone()
        shifted[..., 1] += 3.0
        assert rr_only(model, dataclasses.replace(batch, features=shifted))[0].item() == (
            pytest.approx(rr_only(model, batch)[0].item(), rel=1e-6))  # fmt: skip
    with pytest.raises(ValueError, match="needs feature_columns and feature_weight > 0"):
        make_objective("contrastive", 30, lookahead_columns=ahead)
    with pytest.raises(ValueError, match="head 'choice' needs a model with choice_critic"):
        _causal_forecast_case(3, 16)[1](masked, batch.rhythm, head="choice", features_BTF=seen)


def test_the_contrastive_critic_learns_to_pick_the_next_beat():
    """A few optimiser steps on one batch: the critic ranks the real next beat higher."""
    from heartlm.train.objectives import make_objective

    batch, model = _causal_forecast_case(4, 16, choice_critic=True)
    every = torch.ones(3, dtype=torch.bool)
    choice = make_objective(
        "contrastive",
        30,
        feature_columns=every,
        feature_weight=1.0,
        code_weight=0.0,
        lookahead_columns=torch.tensor([False, True, False]),
    )
    model.train()
    model.use_heads(choice.heads)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    first = None
    for _ in range(60):
        loss, _ = choice(model, batch)
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.8 * first
    assert model.choice_key[0].weight.requires_grad and not model.beat_head.weight.requires_grad


def test_pretrain_feature_target_and_code_weight_reach_the_objective(tokens, tmp_path):
    from heartlm.pretrain import PretrainConfig, _resolve

    def objective(**kw: object):
        cfg = PretrainConfig(tokens=tokens / "tok", out=tmp_path / "run", window=16, **kw)
        data, obj, _ = _resolve(cfg)
        return data, obj

    data, shape = objective()
    assert torch.equal(shape.feature_columns, data.shape_columns())
    assert not shape.feature_columns.all() and not shape.hide_rhythm and shape.code_weight == 1
    _, every = objective(feature_target="all", code_weight=0.0, mask_span=4)
    assert every.feature_columns.all() and every.hide_rhythm and every.code_weight == 0
    assert every.span == 4 and shape.span == 1
    _, ahead = objective(objective="forecast", feature_target="all", code_weight=0.0)
    assert ahead.name == "forecast" and ahead.feature_columns.all() and ahead.code_weight == 0
    _, choice = objective(objective="contrastive", feature_target="all", code_weight=0.0)
    assert choice.contrastive and not ahead.contrastive
    from heartlm.pretrain import objective_settings
    from heartlm.train.objectives import CHOICE_TEMPERATURE

    settings = objective_settings(PretrainConfig(tokens=tokens / "tok", objective="contrastive"))
    assert settings["choice_temperature"] == CHOICE_TEMPERATURE
    assert "choice_temperature" not in objective_settings(PretrainConfig(tokens=tokens / "tok"))
    assert torch.equal(choice.lookahead_columns, ahead.lookahead_columns)
    names = data.meta["features"]
    read = [names[i] for i, h in enumerate(ahead.lookahead_columns.tolist()) if not h]
    assert "log_rr_prev" in read and "qrs_corr" in read and any(n.startswith("p_") for n in read)
    assert not {"rr_next_local", "rr_irregularity", "beat_pc0", "beat_corr", "residual",
                "code_share"} & set(read)  # fmt: skip
    for kw, said in (
        ({"code_weight": 0.0, "feature_weight": 0.0}, "nothing to predict"),
        ({"code_weight": -1.0}, "--code-weight must be >= 0"),
        ({"objective": "next", "feature_target": "all"}, "for --objective masked or a forecast"),
        ({"objective": "forecast", "feature_weight": 0.0}, "--feature-weight must be > 0"),
        ({"objective": "contrastive", "feature_weight": 0.0}, "--feature-weight must be > 0"),
        ({"objective": "contrastive", "inputs": "rhythm"}, "which --inputs rhythm hides"),
        ({"objective": "forecast", "mask_span": 2}, "--mask-span is for --objective masked"),
        ({"objective": "next", "mask_prob": 0.3}, "--mask-prob and --mask-mode are for"),
        ({"objective": "contrastive", "mask_mode": "mask"}, "contrastive hides no beat"),
        ({"objective": "next", "feature_weight": 2.0}, "next predicts the code alone"),
        (
            {"code_weight": 0.0, "feature_weight": 1.0, "label_smoothing": 0.1},
            "--code-weight 0 leaves out",
        ),
        ({"objective": "forecast", "inputs": "relative"}, "which --inputs relative hides"),
        ({"mask_span": 17}, r"--mask-span must be in \[1, --window\]"),
    ):
        with pytest.raises(HeartlmError, match=said):
            objective(**kw)


def test_forecast_is_refused_on_tokens_without_beat_features(tokens, tmp_path, monkeypatch):
    from heartlm.pretrain import PretrainConfig, _resolve
    from heartlm.train.data import TokenData

    monkeypatch.setattr(TokenData, "shape_columns", lambda self, absolute_only=False: None)
    cfg = PretrainConfig(tokens=tokens / "tok", out=tmp_path / "run", window=16,
                         objective="forecast")  # fmt: skip
    with pytest.raises(HeartlmError, match="these tokens have none") as err:
        _resolve(cfg)
    assert "tokens.json" in str(err.value)


def test_unusable_beats_carry_no_shape_features(tmp_path: Path):
    """A beat the codebook calls UNK (no samples, flat, saturated) has no shape: its shape
    columns are missing (the mean, 0), as docs/tokens.md says; its rhythm columns stay."""
    from heartlm.store import TABLE_DTYPE, RecordEntry, StoreWriter

    rng = np.random.default_rng(0)
    n = 300
    beats = np.stack([_beat("V" if i % 7 == 3 else "N", rng) for i in range(n)]).astype(np.float32)
    bad = np.array([40, 41, 100, 101, 102, 200])
    beats[40:42] = np.nan
    beats[100:103] = 0.0  # a lead that fell off
    beats[200] = 50.0 * beats[200]  # saturation, above max_amplitude_mv
    table = np.zeros(n, TABLE_DTYPE)
    rr = rng.uniform(0.6, 1.0, n + 1)
    table["rr_prev"], table["rr_next"] = rr[:-1], rr[1:]
    table["rr_prev"][0] = table["rr_next"][-1] = np.nan
    table["sample"] = np.arange(n) * 200
    w = StoreWriter(tmp_path / "store", fs=FS, pre_samples=PRE, post_samples=W - PRE)
    w.append(RecordEntry("r0", "synthetic", "x", FS, "I", n * 200), beats, table)
    w.close()
    tokenize(tmp_path / "store", tmp_path / "tok", TokenizeConfig(vocab=2, sample=n, device="cpu"))
    ts = TokenSet.load(tmp_path / "tok")
    assert (np.asarray(ts.morph)[bad] == shards.UNK).all()
    f = np.asarray(ts.features, np.float32)
    shape = morphology_columns(FEATURES)
    np.testing.assert_array_equal(f[np.ix_(bad, shape)], 0.0)
    assert (f[bad][:, [FEATURES.index(c) for c in RR_FEATURES]] != 0).any()


def test_sinus_p_template_keeps_the_sinus_p_wave_where_ectopic_beats_are_the_majority():
    rng = np.random.default_rng(0)
    n, w = 400, W
    *_, p_lo, p_hi = patient.regions(PRE, FS)
    t = np.arange(p_hi - p_lo)
    sinus_p = np.exp(-0.5 * ((t - 0.5 * len(t)) / 4.0) ** 2)
    ectopic_p = -np.sin(np.pi * t / len(t))  # another shape and sign
    early = rng.uniform(size=n) < 0.7  # ectopic beats are the majority
    beats = rng.normal(0.0, 0.01, (n, w))
    beats[:, p_lo:p_hi] += np.where(early[:, None], ectopic_p, sinus_p)
    rr = np.where(early, 0.7, 1.2) * rng.uniform(0.97, 1.03, n)
    beats[50] = np.nan  # an unusable beat: no value, no template update
    out = patient.sinus_p_corr(beats, np.zeros(n), rr, p_lo, p_hi)
    assert np.isnan(out[50])
    late = np.arange(n) > 20
    assert np.nanmean(out[late & ~early]) > 0.9  # sinus beats match the template
    assert np.nanmean(out[late & early]) < 0.0  # the majority does not
    # causal: what comes later never changes a beat's value
    changed = beats.copy()
    changed[300:] = 0.0
    again = patient.sinus_p_corr(changed, np.zeros(n), rr, p_lo, p_hi)
    np.testing.assert_array_equal(again[:300], out[:300])


def test_periodic_feature_embedding_reloads_to_identical_outputs(tmp_path: Path):
    from heartlm.model import HeartLM, load_pretrained, model_config
    from heartlm.model.load import export_model

    torch.manual_seed(0)
    cfg = model_config("tiny", vocab_size=40, rhythm_vocab_size=9, n_features=3, max_len=8,
                       feature_embedding="periodic")  # fmt: skip
    model = HeartLM(cfg).eval()
    morph, rhythm = torch.randint(5, 40, (2, 8)), torch.randint(5, 9, (2, 8))
    feats = torch.randn(2, 8, 3)
    out = model(morph, rhythm, features_BTF=feats, head="beat")
    export_model(tmp_path, model.state_dict(), model.cfg, {"window": 8})
    again, config = load_pretrained(tmp_path)
    assert config["model"]["feature_embedding"] == "periodic"
    assert torch.equal(out, again.eval()(morph, rhythm, features_BTF=feats, head="beat"))
    with pytest.raises(ValueError, match="feature_embedding must be one of linear, periodic"):
        model_config("tiny", n_features=3, feature_embedding="quantile")
    with pytest.raises(ValueError, match="periodic needs beat features"):
        model_config("tiny", n_features=0, feature_embedding="periodic")


@pytest.mark.parametrize("name", ["masked", "next", "forecast"])
def test_the_beat_code_loss_adds_the_per_beat_networks_code_cross_entropy(name):
    """`beat_code_weight` W: the objective's loss plus W x the mean cross-entropy of
    `beat_codes` naming each real beat's own code (padding left out) is backpropagated;
    loss_sum / count stays the objective's own (the export's criterion) and beat_code_sum /
    count is that cross-entropy; the objective without it trains no code head."""
    from heartlm.model import HeartLM, model_config
    from heartlm.train.data import Batch
    from heartlm.train.objectives import make_objective

    torch.manual_seed(0)
    valid = torch.ones(4, 32, dtype=torch.bool)
    valid[1, 20:] = False
    morph = torch.randint(5, 30, (4, 32))
    morph[1, 20:] = 0
    batch = Batch(morph, torch.randint(5, 9, (4, 32)), torch.zeros(4, 32, dtype=torch.long),
                  torch.zeros(4, 32, dtype=torch.long), valid, torch.arange(4),
                  torch.randn(4, 32, 3))  # fmt: skip
    model = HeartLM(model_config("tiny", vocab_size=30, rhythm_vocab_size=9, n_features=3,
                                 max_len=32, beat_mlp=8, beat_codes=True,
                                 causal=name != "masked"))  # fmt: skip
    kw = {"feature_columns": torch.tensor([True, True, False]), "feature_weight": 1.0}
    if name == "forecast":
        kw["lookahead_columns"] = torch.tensor([False, False, True])
    plain, plain_sums = make_objective(name, 30, **kw)(model, batch)
    objective = make_objective(name, 30, beat_code_weight=0.5, **kw)
    both, sums = objective(model, batch)
    codes = model.beat_codes(batch.features, valid)[..., :30]
    real = valid & (morph >= 5)
    expected = torch.nn.functional.cross_entropy(codes[real], morph[real].long())
    assert both.item() == pytest.approx(plain.item() + 0.5 * expected.item(), rel=1e-5)
    assert torch.equal(sums["loss_sum"], plain_sums["loss_sum"])
    assert (sums["loss_sum"] / sums["count"]).item() == pytest.approx(plain.item(), rel=1e-5)
    assert sums["beat_code_count"] == real.sum()
    code_mean = sums["beat_code_sum"] / sums["beat_code_count"]
    assert code_mean.item() == pytest.approx(expected.item(), rel=1e-5)
    assert "beat_code_sum" not in plain_sums
    assert "beat_codes" in objective.heads
    assert "beat_codes" not in make_objective(name, 30, **kw).heads
