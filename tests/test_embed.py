"""`heartlm embed` and the model card: what users of an exported model start from."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from tinydata import BEATS, N_RECORDS, TINY, make_tokens

from heartlm.cli import main
from heartlm.model import HeartLM
from heartlm.modelcard import NOT_A_DEVICE
from heartlm.tensorfile import load_tensors
from heartlm.train.data import load_tokens


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("embed")
    tokens = make_tokens(root / "tokens")
    pre = ["pretrain", str(tokens), "--out", str(root / "pre"), *TINY, "--steps", "3"]
    assert main([*pre, "--val-every", "2"]) == 0
    ft = ["finetune", str(root / "pre"), "--data", str(tokens), "--out", str(root / "ft"),
          "--window", "16", "--batch", "8", "--steps", "4", "--val-every", "2", "--warmup", "1",
          "--device", "cpu", "--val-fraction", "0.25"]  # fmt: skip
    assert main(ft) == 0
    return root


def _table(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_embed_a_token_folder(runs: Path):
    out = runs / "emb"
    assert main(["embed", str(runs / "pre"), str(runs / "tokens"), "--out", str(out),
                 "--stride", "8"]) == 0  # fmt: skip
    tensors = load_tensors(out / "embeddings.safetensors")
    beats, windows = _table(out / "beats.csv"), _table(out / "windows.csv")
    assert tensors["beat"].shape == (N_RECORDS * BEATS, 64) and len(beats) == N_RECORDS * BEATS
    assert tensors["window"].shape[0] == len(windows) and tensors["window"].shape[1] == 64
    assert [(b["record"], b["beat"]) for b in beats[:2]] == [("r0", "0"), ("r0", "1")]
    assert beats[BEATS]["record"] == "r1" and beats[BEATS]["beat"] == "0"
    assert {b["time_s"] for b in beats} == {""}  # tokens with no beat store behind them
    data = load_tokens(runs / "tokens")
    assert beats[5]["label"] == "NSVFQ"[int(data.aami[5])]
    assert {w["label"] for w in windows} == {"AFIB", "not AFIB"}
    # The first window's embedding is the model's mean hidden state over its 16 beats.
    model = HeartLM.from_pretrained(runs / "pre")
    with torch.no_grad():
        h = model(torch.from_numpy(data.morph[:16].astype("int64"))[None],
                  torch.from_numpy(data.rhythm[:16].astype("int64"))[None], head="hidden",
                  features_BTF=torch.from_numpy(data.features[:16])[None])  # fmt: skip
    torch.testing.assert_close(tensors["window"][0], h[0].float().mean(0), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(tensors["beat"][0], h[0, 0].float(), rtol=1e-5, atol=1e-6)
    assert json.loads((out / "run.json").read_text())["counts"]["windows"] == len(windows)


def test_embed_names_the_records_without_a_beat(runs: Path, capsys, monkeypatch):
    import numpy as np

    from heartlm import embed

    data = load_tokens(runs / "tokens")
    data.boundaries = np.append(data.boundaries, data.boundaries[-1])  # a record of no beat
    data.records = [*data.records, "flat"]
    monkeypatch.setattr(embed, "_tokens", lambda cfg: (data, None))
    out = runs / "e_flat"
    assert main(["embed", str(runs / "pre"), str(runs / "tokens"), "--out", str(out)]) == 0
    assert "1 record(s) hold no beat and get no row: flat" in capsys.readouterr().err
    assert len(_table(out / "beats.csv")) == N_RECORDS * BEATS


def test_embed_refuses_tokens_of_another_codebook(runs: Path, capsys):
    other = make_tokens(runs / "other_tokens")
    meta = json.loads((other / "tokens.json").read_text())
    meta["codebook_hash"] = "feedface"
    (other / "tokens.json").write_text(json.dumps(meta))
    assert main(["embed", str(runs / "pre"), str(other), "--out", str(runs / "e2")]) == 2
    assert "codebook feedface" in capsys.readouterr().err
    assert not (runs / "e2").exists()


def test_every_exported_run_has_a_model_card(runs: Path):
    book = json.loads((runs / "tokens" / "tokens.json").read_text())["codebook_hash"]
    for run, says in (("pre", "3 |"), ("ft", "fine-tuned (beats)")):
        card = (runs / run / "README.md").read_text()
        assert book in card and "| preset | tiny |" in card and NOT_A_DEVICE in card, run
        assert "## Intended use" in card and "r0" in card and says in card, run
        assert "val_loss" in card, run
    assert "HeartLM.from_pretrained" in card and "val_f1" in card
