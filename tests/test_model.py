"""The Heart Language Model: presets, attention masks, heads, export/reload, checkpoint checks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from heartlm.errors import HeartlmError
from heartlm.model import HeartLM, load_pretrained, model_config
from heartlm.model.config import BEAT_MLP_EMBEDDING
from heartlm.model.load import export_model
from heartlm.shards import NUM_SPECIAL
from heartlm.train import checkpoint as ckpt
from heartlm.train.distributed import DistEnv
from heartlm.train.flops import flops_per_token
from heartlm.train.optim import build_adamw


def _tiny(**kw: object) -> HeartLM:
    torch.manual_seed(0)
    return HeartLM(model_config("tiny", vocab_size=45, rhythm_vocab_size=9, max_len=16, **kw))


def _inputs(B: int = 2, T: int = 16, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, 45, (B, T), generator=g), torch.randint(5, 9, (B, T), generator=g)


def test_base_preset_is_about_86m_parameters_with_a_padded_vocabulary():
    cfg = model_config("base", vocab_size=1032, rhythm_vocab_size=16, max_len=1024)
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads) == (768, 12, 12)
    assert cfg.padded_vocab == 1152 and cfg.padded_vocab % 128 == 0
    with torch.device("meta"):
        model = HeartLM(cfg)
    assert 84e6 < model.num_params(embeddings=False) < 88e6
    with pytest.raises(ValueError, match="--preset"):
        model_config("huge")


def test_flops_count_the_block_matmuls_attention_and_the_gathered_head():
    cfg = model_config("tiny", vocab_size=45, max_len=16)
    with torch.device("meta"):
        model = HeartLM(cfg)
    matmul = sum(p.numel() for n, p in model.blocks.named_parameters() if p.ndim == 2)
    d, L, V = cfg.d_model, cfg.n_layers, cfg.padded_vocab
    expected = 6 * matmul + 12 * L * 16 * d + 6 * d * V * 2 / 16
    assert flops_per_token(cfg, window=16, predicted_per_window=2) == pytest.approx(expected)


def test_causal_model_does_not_see_the_future_and_masked_model_does():
    morph, rhythm = _inputs()
    changed = morph.clone()
    changed[:, 10:] = 7
    for causal in (True, False):
        model = _tiny(causal=causal).eval()
        a, b = model(morph, rhythm), model(changed, rhythm)
        assert torch.allclose(a[:, :10], b[:, :10], atol=1e-5) == causal
        assert not torch.allclose(a[:, 10:], b[:, 10:])


def _attention_ops(model: torch.nn.Module, morph: torch.Tensor, rhythm: torch.Tensor) -> set:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(morph, rhythm)
    return {e.key for e in prof.key_averages() if "scaled_dot" in e.key or "softmax" in e.key}


def test_the_chosen_attention_kernel_runs_inside_a_compiled_model():
    """`--sdpa` is traced into the graph: on the CPU PyTorch picks its fused kernel, and the
    math kernel (a plain softmax) only when asked; "auto" gives the choice back."""
    morph, rhythm = _inputs()
    model = _tiny().eval()
    fused = {"aten::_scaled_dot_product_flash_attention_for_cpu"}
    for name, expect_fused in (("auto", True), ("math", False), ("auto", True)):
        torch._dynamo.reset()
        model.use_attention_kernel(name)
        compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
        ops = _attention_ops(compiled, morph, rhythm)
        assert bool(ops & fused) == expect_fused, (name, ops)
        assert expect_fused or "aten::_softmax" in ops


def test_padded_beats_do_not_change_the_real_ones():
    model = _tiny().eval()
    morph, rhythm = _inputs()
    valid = torch.arange(16) < torch.tensor([[12], [16]])
    other = morph.clone()
    other[0, 12:] = 9
    a = model(morph, rhythm, valid)
    b = model(other, rhythm, valid)
    assert torch.allclose(a[0, :12], b[0, :12], atol=1e-5)
    w1 = model(morph, rhythm, valid, head="window")
    w2 = model(other, rhythm, valid, head="window")
    assert w1.shape == (2, 2) and torch.allclose(w1, w2, atol=1e-5)


def test_heads_have_the_documented_shapes():
    model = _tiny(cls_token=True)
    morph, rhythm = _inputs()
    assert model(morph, rhythm).shape == (2, 17, 64)  # CLS prepended
    pos = torch.tensor([[0, 3], [5, 15]])
    mlm = model(morph, rhythm, head="mlm", positions_BK=pos)
    full = model(morph, rhythm, head="next")
    assert mlm.shape == (2, 2, 128)
    assert torch.allclose(mlm[1, 1], full[1, 15], atol=1e-5)
    assert model(morph, rhythm, head="beat").shape == (2, 16, 5)
    assert model(morph, rhythm, head="window").shape == (2, 2)


@pytest.mark.parametrize("embedding", ["linear", "periodic"])
def test_the_only_buffer_is_a_constant_so_ddp_need_not_broadcast_buffers(embedding: str):
    """DDP runs with broadcast_buffers=False (heartlm.train.distributed._ddp): that holds
    only while no buffer changes in training, like a norm's running statistics would."""
    model = _tiny(n_features=3, feature_embedding=embedding)
    before = {name: b.clone() for name, b in model.named_buffers()}
    assert set(before) == {"absolute_index", "beat_mlp_hidden"}  # column indices: constants
    morph, rhythm = _inputs()
    model.train()
    model(morph, rhythm, features_BTF=torch.randn(2, 16, 3), head="next").sum().backward()
    assert all(torch.equal(b, before[name]) for name, b in model.named_buffers())


def test_feature_statistics_are_the_mean_and_spread_of_the_real_neighbours_and_window():
    from heartlm.model.hlm import feature_statistics

    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 12, 3, generator=g, dtype=torch.float64)
    valid = torch.arange(12) < torch.tensor([[9], [12]])
    stats = feature_statistics(x, valid, half_width=2).double()
    assert stats.shape == (2, 12, 12)
    for b in range(2):
        real = x[b, : int(valid[b].sum())]
        for t in range(len(real)):
            near = real[max(0, t - 2) : t + 3]
            expected = [near.mean(0), near.std(0, correction=0),
                        real.mean(0), real.std(0, correction=0)]  # fmt: skip
            torch.testing.assert_close(stats[b, t], torch.cat(expected).double(), atol=1e-5,
                                       rtol=1e-5)  # fmt: skip


def test_local_statistics_reach_the_beats_and_padding_does_not():
    model = _tiny(n_features=3, local_stats=2).eval()
    morph, rhythm = _inputs()
    features = torch.randn(2, 16, 3)
    valid = torch.arange(16) < torch.tensor([[12], [16]])
    padded = features.clone()
    padded[0, 12:] = 50.0
    a = model(morph, rhythm, valid, features_BTF=features)
    assert torch.allclose(a[0, :12], model(morph, rhythm, valid, features_BTF=padded)[0, :12],
                          atol=1e-5)  # fmt: skip
    plain = _tiny(n_features=3).eval()
    plain.load_state_dict(model.state_dict(), strict=False)
    assert not torch.allclose(a, plain(morph, rhythm, valid, features_BTF=features), atol=1e-3)
    # Zero its projection and the model is the one without the statistics.
    torch.nn.init.zeros_(model.stats_proj.weight)
    torch.nn.init.zeros_(model.stats_proj.bias)
    torch.testing.assert_close(model(morph, rhythm, valid, features_BTF=features),
                               plain(morph, rhythm, valid, features_BTF=features))  # fmt: skip
    with pytest.raises(ValueError, match="local_stats needs beat features"):
        _tiny(local_stats=2)
    with pytest.raises(ValueError, match="not for a causal model"):
        _tiny(n_features=3, local_stats=2, causal=True)


def test_beat_neighbourhood_reads_each_beats_neighbours_and_flags_the_missing_ones():
    from heartlm.model.hlm import beat_neighbourhood

    features = torch.arange(1.0, 9.0).reshape(1, 4, 2)  # beats 1-4: (1, 2) (3, 4) (5, 6) (7, 8)
    valid = torch.tensor([[True, True, True, False]])  # the fourth beat pads
    near = beat_neighbourhood(features, valid)
    assert near.shape == (1, 4, 3 * 2 + 2)
    assert near[0, 0].tolist() == [1, 2, 0, 0, 3, 4, 0, 1]  # no previous beat
    assert near[0, 1].tolist() == [3, 4, 1, 2, 5, 6, 1, 1]
    assert near[0, 2].tolist() == [5, 6, 3, 4, 0, 0, 1, 0]  # its next beat is padding
    assert near[0, 3, :2].tolist() == [0, 0]
    assert beat_neighbourhood(features, None)[0, 2].tolist() == [5, 6, 3, 4, 7, 8, 1, 1]


def test_the_per_beat_network_adds_its_logits_to_the_beat_heads():
    model = _tiny(n_features=3, beat_mlp=8).eval()
    plain = _tiny(n_features=3).eval()
    plain.load_state_dict(model.state_dict(), strict=False)
    morph, rhythm = _inputs()
    features = torch.randn(2, 16, 3)
    a = model(morph, rhythm, head="beat", features_BTF=features)
    b = plain(morph, rhythm, head="beat", features_BTF=features)
    assert not torch.allclose(a, b, atol=1e-4)
    # A beat's own network sees only it and its neighbours: beat 9's features move beat 8's
    # share and not beat 2's (the transformer's share moves everywhere: compare differences).
    moved = features.clone()
    moved[:, 9] += 3.0
    delta = model(morph, rhythm, head="beat", features_BTF=moved) - a
    delta_plain = plain(morph, rhythm, head="beat", features_BTF=moved) - b
    torch.testing.assert_close(delta[:, 2], delta_plain[:, 2], atol=1e-5, rtol=1e-4)
    assert not torch.allclose(delta[:, 8], delta_plain[:, 8], atol=1e-4)
    heads = {id(p) for p in model.head_parameters()["beat"]}
    assert all(id(p) in heads for p in model.beat_mlp.parameters())
    with pytest.raises(ValueError, match="beat_mlp needs beat features"):
        _tiny(beat_mlp=8)
    with pytest.raises(ValueError, match="not for a causal model"):
        _tiny(n_features=3, beat_mlp=8, causal=True)


def test_a_pretrained_encoder_loads_with_a_per_beat_network_added(tmp_path: Path):
    model = _tiny(n_features=3).eval()
    export_model(tmp_path, model.state_dict(), model.cfg, {})
    tuned, _ = load_pretrained(tmp_path, beat_mlp=16)
    hidden = tuned.beat_mlp.hidden
    assert (hidden.in_features, hidden.out_features) == (3 * 3 + 2, 16)
    assert torch.equal(tuned.blocks[1].qkv.weight, model.blocks[1].qkv.weight)
    tuned.save_pretrained(tmp_path / "ft")
    assert load_pretrained(tmp_path / "ft")[0].cfg.beat_mlp == 16
    with pytest.raises(HeartlmError, match="16 wide, not 8 \\(--beat-mlp\\)"):
        load_pretrained(tmp_path / "ft", beat_mlp=8)
    # another set of classes re-initialises the network's output layer as it does the head's
    fewer, _ = load_pretrained(tmp_path / "ft", n_beat_classes=3)
    assert fewer.beat_mlp.out.out_features == fewer.beat_head.out_features == 3
    assert torch.equal(fewer.beat_mlp.hidden.weight, tuned.beat_mlp.hidden.weight)


def test_a_deeper_per_beat_network_keeps_its_first_layer_and_its_depth(tmp_path: Path):
    model = _tiny(n_features=3)
    export_model(tmp_path, model.state_dict(), model.cfg, {})
    deep, _ = load_pretrained(tmp_path, beat_mlp=16, beat_mlp_depth=2)
    linear = [m for m in deep.beat_mlp if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linear] == [(11, 16), (16, 16), (16, 5)]
    assert deep.beat_mlp.hidden is linear[0] and deep.beat_mlp.hidden2 is linear[1]
    morph, rhythm = _inputs()
    x = torch.randn(2, 16, 3)
    before = deep.eval()(morph, rhythm, head="beat", features_BTF=x)
    deep.save_pretrained(tmp_path / "ft")
    again, _ = load_pretrained(tmp_path / "ft")
    assert again.cfg.beat_mlp_depth == 2
    torch.testing.assert_close(again.eval()(morph, rhythm, head="beat", features_BTF=x), before)
    with pytest.raises(HeartlmError, match="2 layers deep, not 1 \\(--beat-mlp-depth\\)"):
        load_pretrained(tmp_path / "ft", beat_mlp_depth=1)
    one_layer = _tiny(n_features=3, beat_mlp=16)
    one_layer.save_pretrained(tmp_path / "older")
    config = json.loads((tmp_path / "older" / "config.json").read_text())
    del config["model"]["beat_mlp_depth"]  # written before the field existed
    (tmp_path / "older" / "config.json").write_text(json.dumps(config))
    reloaded, _ = load_pretrained(tmp_path / "older")
    assert reloaded.cfg.beat_mlp_depth == 1
    torch.testing.assert_close(reloaded.beat_mlp.hidden.weight, one_layer.beat_mlp.hidden.weight)
    assert {k for k in one_layer.state_dict() if k.startswith("beat_mlp.")} == {
        f"beat_mlp.{layer}.{w}" for layer in ("hidden", "out") for w in ("weight", "bias")
    }
    with pytest.raises(ValueError, match="needs beat_mlp"):
        _tiny(n_features=3, beat_mlp_depth=2)
    for depth in (0, 5):
        with pytest.raises(ValueError, match=f"between 1 and 4, not {depth}"):
            _tiny(n_features=3, beat_mlp=8, beat_mlp_depth=depth)


def test_a_per_beat_network_with_context_reads_beats_beyond_its_neighbours(tmp_path: Path):
    morph, rhythm = _inputs()
    x = torch.randn(2, 16, 3)
    far = x.clone()
    far[:, 12] += 3.0  # beat 12 lies outside beat 3's neighbourhood (beats 2-4)
    network_of = {}
    for context in (False, True):
        model = _tiny(n_features=3, beat_mlp=16, beat_mlp_bins=4, beat_mlp_context=context).eval()
        model.fit_beat_mlp_bins(torch.randn(64, 3).numpy())
        bins = model.beat_mlp.bins.out_features
        assert model.beat_mlp.hidden.in_features == bins + (model.cfg.d_model if context else 0)
        alone = model(morph, rhythm, head="beat_parts", features_BTF=x)[1]
        moved = model(morph, rhythm, head="beat_parts", features_BTF=far)[1]
        network_of[context] = (alone[:, 3] - moved[:, 3]).abs().max().item()
        summed = model(morph, rhythm, head="beat", features_BTF=x)
        parts = model(morph, rhythm, head="beat_parts", features_BTF=x)
        torch.testing.assert_close(summed, parts[0] + parts[1])
    assert network_of[False] == 0.0 and network_of[True] > 1e-4
    # Each beat's network reads the state at that same beat, not a neighbour's.
    seen = {}
    hook = model.beat_mlp.hidden.register_forward_hook(lambda m, args, out: seen.update(x=args[0]))
    model(morph, rhythm, head="beat", features_BTF=x)
    hook.remove()
    state = model(morph, rhythm, head="hidden", features_BTF=x)
    state = state[:, 1:] if model.cfg.cls_token else state
    torch.testing.assert_close(seen["x"][..., -model.cfg.d_model :], state)
    model.train()  # the network's own loss trains the transformer under it
    model(morph, rhythm, head="beat_parts", features_BTF=x)[1].square().sum().backward()
    assert model.blocks[0].qkv.weight.grad.abs().sum() > 0
    model.save_pretrained(tmp_path / "ft")
    again, _ = load_pretrained(tmp_path / "ft")
    assert again.cfg.beat_mlp_context
    torch.testing.assert_close(
        again.eval()(morph, rhythm, head="beat", features_BTF=x),
        model.eval()(morph, rhythm, head="beat", features_BTF=x),
    )
    with pytest.raises(HeartlmError, match="transformer's state: True, not False "
                                           "\\(--beat-mlp-context\\)"):  # fmt: skip
        load_pretrained(tmp_path / "ft", beat_mlp_context=False)
    with pytest.raises(ValueError, match="beat_mlp_context feeds the per-beat network"):
        _tiny(n_features=3, beat_mlp_context=True)
    with pytest.raises(ValueError, match="not with beat_mlp_context"):
        _tiny(n_features=3, beat_mlp=8, beat_codes=True, beat_mlp_context=True)


def test_the_per_beat_network_reads_its_columns_through_bins_fitted_once(tmp_path: Path):
    model = _tiny(n_features=3)
    export_model(tmp_path, model.state_dict(), model.cfg, {})
    tuned, _ = load_pretrained(tmp_path, beat_mlp=16, beat_mlp_bins=4)
    columns = 3 * 3 + 2
    assert tuned.beat_mlp.hidden.in_features == columns * (1 + BEAT_MLP_EMBEDDING)
    features = np.random.default_rng(0).normal(size=(500, 3)).astype(np.float16)
    assert tuned.fit_beat_mlp_bins(features)
    edges = tuned.beat_mlp.bins.edges.clone()
    # the edges of the beat's own first column are its quantiles over the training beats
    np.testing.assert_allclose(
        edges[0], np.quantile(features[:, 0].astype(np.float32), np.linspace(0, 1, 5)), rtol=1e-3
    )
    assert not tuned.fit_beat_mlp_bins(features[:100] * 5)  # fitted edges stay
    torch.testing.assert_close(tuned.beat_mlp.bins.edges, edges)
    morph, rhythm = _inputs()
    x = torch.randn(2, 16, 3)
    before = tuned.eval()(morph, rhythm, head="beat", features_BTF=x)
    tuned.save_pretrained(tmp_path / "ft")
    again, _ = load_pretrained(tmp_path / "ft")
    assert again.cfg.beat_mlp_bins == 4 and bool(again.beat_mlp.bins.fitted)
    torch.testing.assert_close(again.beat_mlp.bins.edges, edges)
    torch.testing.assert_close(again.eval()(morph, rhythm, head="beat", features_BTF=x), before)
    with pytest.raises(HeartlmError, match="over 4 bins, not 8 \\(--beat-mlp-bins\\)"):
        load_pretrained(tmp_path / "ft", beat_mlp_bins=8)
    assert not _tiny(n_features=3, beat_mlp=8).fit_beat_mlp_bins(features)  # no bins to fit
    with pytest.raises(ValueError, match="needs beat_mlp"):
        _tiny(n_features=3, beat_mlp_bins=4)
    with pytest.raises(ValueError, match="0 or at least 2"):
        _tiny(n_features=3, beat_mlp=8, beat_mlp_bins=1)


def test_a_pretrained_encoder_without_statistics_loads_with_them_added(tmp_path: Path):
    model = _tiny(n_features=3).eval()
    export_model(tmp_path, model.state_dict(), model.cfg, {})
    tuned, _ = load_pretrained(tmp_path, local_stats=4)
    assert tuned.cfg.local_stats == 4 and tuned.stats_proj.in_features == 12
    assert torch.equal(tuned.blocks[1].qkv.weight, model.blocks[1].qkv.weight)
    tuned.save_pretrained(tmp_path / "ft")
    assert load_pretrained(tmp_path / "ft")[0].cfg.local_stats == 4
    with pytest.raises(HeartlmError, match="over 4 beats a side, not 0 \\(--local-stats\\)"):
        load_pretrained(tmp_path / "ft", local_stats=0)
    with pytest.raises(HeartlmError, match="not 8"):
        load_pretrained(tmp_path / "ft", local_stats=8)
    from heartlm.train.optim import layer_depth

    assert layer_depth("stats_proj.weight", 2) == layer_depth("beat_head.weight", 2) == 3


def test_use_heads_freezes_the_other_heads():
    model = _tiny()
    model.use_heads(("mlm",))
    assert model.lm_head.weight.requires_grad
    assert not model.beat_head.weight.requires_grad
    assert not model.window_head.bias.requires_grad
    assert model.blocks[0].qkv.weight.requires_grad


def test_exported_weights_reload_to_identical_outputs(tmp_path: Path):
    model = _tiny().eval()
    export_model(tmp_path, model.state_dict(), model.cfg, {"window": 16, "objective": "masked"})
    again, config = load_pretrained(tmp_path, preset="tiny", vocab_size=45)
    again.eval()
    morph, rhythm = _inputs()
    assert torch.equal(model(morph, rhythm, head="next"), again(morph, rhythm, head="next"))
    assert config["window"] == 16 and config["model"]["preset"] == "tiny"
    # Fine-tuning may change a head's size; the encoder still loads.
    ft, _ = load_pretrained(tmp_path, n_window_classes=3)
    assert ft.window_head.out_features == 3
    assert torch.equal(ft.blocks[1].fc_in.weight, model.blocks[1].fc_in.weight)


def test_load_pretrained_refuses_another_preset_or_vocabulary(tmp_path: Path):
    model = _tiny()
    export_model(tmp_path, model.state_dict(), model.cfg, {})
    with pytest.raises(HeartlmError, match="preset 'tiny', not 'base'"):
        load_pretrained(tmp_path, preset="base")
    with pytest.raises(HeartlmError, match="vocabulary is 45 tokens, the tokens have 50"):
        load_pretrained(tmp_path, vocab_size=50)
    (tmp_path / "config.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(HeartlmError, match="not a heartlm model config"):
        load_pretrained(tmp_path)


def test_checkpoint_round_trip_and_refusal_of_another_preset_or_vocab(tmp_path: Path):
    model = _tiny()
    opt = build_adamw(model, 1e-3, 0.1, (0.9, 0.95), fused=False)
    morph, rhythm = _inputs()
    model(morph, rhythm, head="next").sum().backward()
    opt.step()
    meta = {"model": model.cfg.to_dict(), "window": 16, "objective": "masked"}
    path = ckpt.save_checkpoint(tmp_path, 7, model, opt, meta, DistEnv(), keep=1)
    assert ckpt.latest_checkpoint(tmp_path) == path

    fresh = _tiny()
    torch.nn.init.zeros_(fresh.lm_head.weight)
    opt2 = build_adamw(fresh, 1e-3, 0.1, (0.9, 0.95), fused=False)
    loaded = ckpt.load_checkpoint(path, fresh, opt2)
    assert loaded["step"] == 7
    assert torch.equal(fresh.lm_head.weight, model.lm_head.weight)
    assert torch.equal(
        opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"]
    )

    small = model_config("small", vocab_size=45, rhythm_vocab_size=9, max_len=16)
    with pytest.raises(HeartlmError, match="preset 'tiny', this run uses 'small'"):
        ckpt.check_compatible(ckpt.read_meta(path), {**meta, "model": small.to_dict()}, path)
    other_vocab = model_config("tiny", vocab_size=60, rhythm_vocab_size=9, max_len=16)
    with pytest.raises(HeartlmError, match="vocabulary is 45 tokens, the tokens have 60"):
        ckpt.check_compatible(ckpt.read_meta(path), {**meta, "model": other_vocab.to_dict()}, path)
    with pytest.raises(HeartlmError, match="window 16, this run asks for 32"):
        ckpt.check_compatible(ckpt.read_meta(path), {**meta, "window": 32}, path)
    periodic = {**meta["model"], "feature_embedding": "periodic"}
    with pytest.raises(HeartlmError, match="feature_embedding=linear, this run periodic"):
        ckpt.check_compatible(ckpt.read_meta(path), {**meta, "model": periodic}, path)
    # What the encoder reads (--inputs): a tuple here, a list once saved as JSON.
    relative = model_config("tiny", vocab_size=45, rhythm_vocab_size=9, max_len=16,
                            relative_only=True, absolute_columns=(0, 2))  # fmt: skip
    with pytest.raises(HeartlmError, match=r"relative_only=False, this run True \(--inputs\)"):
        ckpt.check_compatible(ckpt.read_meta(path), {**meta, "model": relative.to_dict()}, path)
    rel_meta = {**meta, "model": relative.to_dict()}
    rel_path = ckpt.save_checkpoint(tmp_path / "rel", 1, model, opt, rel_meta, DistEnv(), keep=1)
    ckpt.check_compatible(ckpt.read_meta(rel_path), rel_meta, rel_path)
    fewer = {**relative.to_dict(), "absolute_columns": (0,)}
    with pytest.raises(HeartlmError, match="absolute_columns"):
        ckpt.check_compatible(ckpt.read_meta(rel_path), {**meta, "model": fewer}, rel_path)
    # The per-beat network's own view (pretrain --beat-mlp-inputs): a resume may not change it.
    network = {**relative.to_dict(), "n_features": 3, "beat_mlp": 8, "beat_codes": True,
               "beat_mlp_hidden": (1,)}  # fmt: skip
    net_meta = {**meta, "model": network}
    net_path = ckpt.save_checkpoint(tmp_path / "net", 1, model, opt, net_meta, DistEnv(), keep=1)
    inputs_hide = sorted(relative.absolute_columns)
    with pytest.raises(HeartlmError, match=re.escape(
            f"reads without columns {sorted({1, *inputs_hide})}, this run's without "
            f"{inputs_hide} (pretrain --beat-mlp-inputs")):  # fmt: skip
        unhidden = {**meta, "model": {**network, "beat_mlp_hidden": ()}}
        ckpt.check_compatible(ckpt.read_meta(net_path), unhidden, net_path)
    # An older heartlm listed only the columns hidden beyond --inputs': the same view.
    every = {**meta, "model": {**network, "beat_mlp_hidden": tuple(sorted({1, *inputs_hide}))}}
    ckpt.check_compatible(ckpt.read_meta(net_path), every, net_path)
    # Keeping one checkpoint removes the older one.
    ckpt.save_checkpoint(tmp_path, 9, model, opt, meta, DistEnv(), keep=1)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step_00000009"]


def test_an_objective_setting_a_checkpoint_does_not_record_counts_as_its_default():
    """A checkpoint records the objective settings of its time; one added since was at its
    default then, so asking for another value on resume is another objective."""
    model = {"preset": "tiny", "vocab_size": 45}
    older = {"model": model, "objective_settings": {"beat_mlp_loss": 1.0}}

    def asked(**settings) -> dict:
        return {"model": model, "objective_settings": {"beat_mlp_loss": 1.0, **settings},
                "objective_defaults": {"beat_mlp_loss": 0.0, "beat_mlp_loss_skip": []}}  # fmt: skip

    ckpt.check_compatible(older, asked(beat_mlp_loss_skip=[]), "ckpt")
    with pytest.raises(HeartlmError, match=r"\(--beat-mlp-loss-skip off -> S,V\)"):
        ckpt.check_compatible(older, asked(beat_mlp_loss_skip=["S", "V"]), "ckpt")
    recorded = {**older, "objective_settings": {"beat_mlp_loss": 1.0, "beat_mlp_loss_skip": ["S"]}}
    with pytest.raises(HeartlmError, match=r"\(--beat-mlp-loss-skip S -> off\)"):
        ckpt.check_compatible(recorded, asked(beat_mlp_loss_skip=[]), "ckpt")
    ckpt.check_compatible(recorded, asked(beat_mlp_loss_skip=["S"]), "ckpt")
    # a setting with no known default (not a field) is not compared where unrecorded
    ckpt.check_compatible(older, asked(choice_temperature=0.1), "ckpt")
    # one that records none of them predates them all: nothing is compared
    ckpt.check_compatible({"model": model}, asked(beat_mlp_loss_skip=["S"]), "ckpt")


def test_mfu_is_per_device_and_a_stated_peak_is_checked(monkeypatch: pytest.MonkeyPatch):
    from heartlm.train.flops import mfu_per_gpu, peak_flops

    # 4 devices at 100 k tokens/s each, 1e9 FLOPs/token, 1e15 peak each: 0.1 per device.
    assert mfu_per_gpu(1e9, 4e5, 1e15, 4) == pytest.approx(0.1)
    assert mfu_per_gpu(1e9, 1e5, 1e15, 1) == pytest.approx(0.1)
    assert mfu_per_gpu(1e9, 1e5, 0.0, 1) == 0.0
    monkeypatch.setenv("HEARTLM_PEAK_TFLOPS", "989")
    assert peak_flops(torch.device("cpu")) == 989e12
    monkeypatch.setenv("HEARTLM_PEAK_TFLOPS", "fast")
    with pytest.raises(HeartlmError, match="HEARTLM_PEAK_TFLOPS='fast' is not a positive"):
        peak_flops(torch.device("cpu"))


def test_save_pretrained_then_from_pretrained_in_a_fresh_process_gives_identical_logits(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    model = HeartLM(model_config("tiny", vocab_size=45, n_features=3, max_len=16)).eval()
    folder = model.save_pretrained(tmp_path / "hlm", codebook_hash="c0ffee", window=16)
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["codebook_hash"]) == ("heartlm", "c0ffee")
    g = torch.Generator().manual_seed(1)
    inputs = {
        "morph": torch.randint(NUM_SPECIAL, 45, (2, 16), generator=g),
        "rhythm": torch.randint(NUM_SPECIAL, 8, (2, 16), generator=g),
        "features": torch.randn(2, 16, 3, generator=g),
    }
    save_file(inputs, tmp_path / "inputs.safetensors")
    code = (
        "import sys; from safetensors.torch import load_file, save_file\n"
        "from heartlm.model import HeartLM\n"
        "m = HeartLM.from_pretrained(sys.argv[1])\n"
        "x = load_file(sys.argv[2])\n"
        "import torch\n"
        "with torch.no_grad():\n"
        "    y = m(x['morph'], x['rhythm'], head='mlm', features_BTF=x['features'])\n"
        "save_file({'logits': y.detach().contiguous()}, sys.argv[3])\n"
    )
    out = tmp_path / "logits.safetensors"
    # One thread, as this process's tests run: the same kernels, so the logits are bitwise equal.
    offline = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", code, str(folder), str(tmp_path / "inputs.safetensors"),
                    str(out)], check=True, env=offline)  # fmt: skip
    with torch.no_grad():
        expected = model(inputs["morph"], inputs["rhythm"], head="mlm",
                         features_BTF=inputs["features"])  # fmt: skip
    assert torch.equal(load_file(out)["logits"], expected)


def test_load_pretrained_refuses_non_finite_weights_naming_the_tensor(tmp_path: Path):
    model = _tiny()
    state = model.state_dict()
    state["blocks.0.fc_in.weight"] = state["blocks.0.fc_in.weight"] * float("nan")
    export_model(tmp_path, state, model.cfg, {})
    with pytest.raises(HeartlmError) as caught:
        load_pretrained(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path / 'model.safetensors'}: holds non-finite weights (tensor blocks.0.fc_in.weight)"
    )


@pytest.mark.parametrize(
    ("change", "says"),
    [({"model": None}, "model null is not a JSON object"),
     ({"model": {"d_model": "64"}}, 'model.d_model "64" is not an integer'),
     ({"model": {"causal": "yes"}}, 'model.causal "yes" is not true or false'),
     ({"model": {"n_heads": 3}}, "d_model 64 is not a multiple of n_heads 3"),
     ({"model": {"n_heads": 0}}, "n_heads must be at least 1"),
     ({"version": "2"}, 'version "2" is not an integer')],
)  # fmt: skip
def test_a_config_json_field_of_the_wrong_type_or_value_is_one_error_naming_it(
    tmp_path: Path, change: dict, says: str
):
    model = _tiny()
    export_model(tmp_path, model.state_dict(), model.cfg, {})
    path = tmp_path / "config.json"
    config = json.loads(path.read_text())
    for key, value in change.items():
        config[key] = {**config[key], **value} if isinstance(value, dict) else value
    path.write_text(json.dumps(config))
    with pytest.raises(HeartlmError) as caught:
        load_pretrained(tmp_path)
    assert caught.value.path == str(path) and says in caught.value.message


def test_the_per_beat_networks_code_head_reads_that_network_alone_and_trains_apart():
    """`beat_codes`: each beat's code from the per-beat network's last hidden layer, never
    from the transformer; `beat_mlp_hidden` columns read as zero for that network only; the
    shared hidden layers train with either head, the code head only with its own."""
    model = _tiny(n_features=3, beat_mlp=8, beat_mlp_depth=2, beat_codes=True,
                  beat_mlp_hidden=(2,), causal=True).eval()  # fmt: skip
    morph, rhythm = _inputs()
    features = torch.randn(2, 16, 3)
    codes = model.beat_codes(features, None)
    assert codes.shape == (2, 16, model.cfg.padded_vocab)
    other_morph, _ = _inputs(seed=5)
    logits, same = model(other_morph, rhythm, head="next", features_BTF=features,
                         beat_features_BTF=features)  # fmt: skip
    torch.testing.assert_close(same, codes)  # the codes ignore the tokens the transformer reads
    assert torch.equal(logits, model(other_morph, rhythm, head="next", features_BTF=features))
    hidden_column = features.clone()
    hidden_column[..., 2] += 5.0
    torch.testing.assert_close(model.beat_codes(hidden_column, None), codes)
    moved = features.clone()
    moved[..., 1] += 5.0
    assert not torch.allclose(model.beat_codes(moved, None), codes)
    # the transformer still reads column 2: beat_mlp_hidden is the network's alone
    assert not torch.equal(model(morph, rhythm, head="next", features_BTF=hidden_column),
                           model(morph, rhythm, head="next", features_BTF=features))  # fmt: skip
    model.use_heads(("next", "beat_codes"))
    assert model.beat_mlp.hidden2.weight.requires_grad and model.beat_code_head.weight.requires_grad
    assert not model.beat_mlp.out.weight.requires_grad and not model.beat_head.weight.requires_grad
    model.use_heads(("beat",))
    assert model.beat_mlp.hidden2.weight.requires_grad and model.beat_mlp.out.weight.requires_grad
    assert not model.beat_code_head.weight.requires_grad
    with pytest.raises(ValueError, match="a causal model's beat head cannot use it"):
        model(morph, rhythm, head="beat", features_BTF=features)
    with pytest.raises(ValueError, match="not for a causal model"):
        _tiny(n_features=3, beat_mlp=8, causal=True)
    with pytest.raises(ValueError, match="beat_codes names codes from the per-beat network"):
        _tiny(n_features=3, beat_codes=True)
    with pytest.raises(ValueError, match="outside the 3 beat features"):
        _tiny(n_features=3, beat_mlp=8, beat_mlp_hidden=(3,))


def test_the_bin_edges_are_placed_from_the_drawn_beats_rows_alone(monkeypatch):
    """`fit_beat_mlp_bins` builds only the neighbourhood rows of the beats `quantile_edges`
    would draw: the edges equal those of every beat's rows drawn there, with the network's
    own hidden columns zero."""
    from heartlm.model import piecewise
    from heartlm.model.hlm import beat_neighbourhood

    monkeypatch.setattr(piecewise, "FIT_ROWS", 40)
    rows = np.random.default_rng(2).normal(size=(100, 3)).astype(np.float16)
    for n in (100, 30):  # more beats than FIT_ROWS (drawn), and fewer (all of them)
        model = _tiny(n_features=3, beat_mlp=8, beat_mlp_bins=4, beat_mlp_hidden=(2,))
        assert model.fit_beat_mlp_bins(rows[:n], seed=5)
        every = torch.from_numpy(rows[:n].astype(np.float32))
        every[:, 2] = 0.0
        near = beat_neighbourhood(every[None], None)[0].numpy()
        expected = piecewise.quantile_edges(near, 4, seed=5)
        np.testing.assert_array_equal(model.beat_mlp.bins.edges.numpy(), expected)
        assert not model.fit_beat_mlp_bins(rows[:n], seed=6)  # placed once


def test_flops_count_the_per_beat_networks_hidden_layers_and_bin_maps():
    """6 x the multiply-adds of each beat's pass through the network's hidden layers and its
    bins' per-column maps: the weights of those modules, read off a built model."""
    model = _tiny(n_features=3, beat_mlp=8, beat_mlp_depth=2, beat_mlp_bins=4, beat_codes=True)
    plain = _tiny(n_features=3)
    counted = [model.beat_mlp.bins.weight, model.beat_mlp.hidden.weight,
               model.beat_mlp.hidden2.weight]  # fmt: skip
    added = flops_per_token(model.cfg, 16, 2) - flops_per_token(plain.cfg, 16, 2)
    assert added == 6 * sum(w.numel() for w in counted)
    context = _tiny(n_features=3, beat_mlp=8, beat_mlp_depth=2, beat_mlp_bins=4,
                    beat_mlp_context=True)  # fmt: skip
    read = [context.beat_mlp.bins.weight, context.beat_mlp.hidden.weight,
            context.beat_mlp.hidden2.weight]  # fmt: skip
    added = flops_per_token(context.cfg, 16, 2) - flops_per_token(plain.cfg, 16, 2)
    assert added == 6 * sum(w.numel() for w in read)
