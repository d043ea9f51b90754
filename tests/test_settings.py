"""One source for every setting: flags, defaults and help from the dataclasses; config files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tinydata import TINY, make_tokens

from heartlm import settings
from heartlm.cli import build_parser, main
from heartlm.finetune.cli import FinetuneConfig
from heartlm.pretrain import PretrainConfig
from heartlm.train.config import LaunchConfig, TrainConfig


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tokens(tmp_path_factory.mktemp("settings") / "tokens")


def _print_config(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> str:
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 0
    return capsys.readouterr().out


def _run_config(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())["config"]


def _losses(run: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_print_config_then_config_reproduces_the_run(tokens, tmp_path, capsys):
    flags = ["pretrain", tokens, "--out", tmp_path / "a", *TINY, "--steps", "3", "--lr", "2e-3"]
    text = _print_config(capsys, *flags, "--print-config")
    assert not (tmp_path / "a").exists()  # printing writes nothing
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(text)
    assert main(["pretrain", "--config", str(experiment)]) == 0
    resolved = _run_config(tmp_path / "a")
    assert resolved == yaml.safe_load(text)
    assert resolved["train"]["lr"] == 2e-3 and resolved["window"] == 16
    # A run's run.json is an experiment file too: the same run again, in another folder.
    again = tmp_path / "b"
    assert (
        main(["pretrain", "--config", str(tmp_path / "a" / "run.json"), "--out", str(again)]) == 0
    )
    assert _run_config(again) == {**resolved, "out": str(again)}
    assert _losses(again) == _losses(tmp_path / "a")


def test_print_config_without_inputs_is_a_template(capsys):
    got = yaml.safe_load(_print_config(capsys, "finetune", "--print-config"))
    assert got["run"] is None and got["task"] == "beats" and got["train"]["batch"] == 64
    assert main(["finetune", "--data", "T", "--out", "F"]) == 2
    assert "RUN is required" in capsys.readouterr().err


def test_flags_override_the_file_and_alternatives_clear_each_other(tmp_path, capsys):
    experiment = tmp_path / "e.toml"
    experiment.write_text('tokens = "T"\nout = "R"\nwindow = 64\n[train]\nsteps = 7\nlr = 1e-3\n')
    text = _print_config(capsys, "pretrain", "--config", experiment, "--window", "32",
                         "--epochs", "2", "--print-config")  # fmt: skip
    got = yaml.safe_load(text)
    assert (got["window"], got["train"]["lr"]) == (32, 1e-3)
    assert (got["train"]["steps"], got["train"]["epochs"]) == (None, 2.0)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("windw: 3\n", "unknown setting 'windw'"),
        ("window: many\n", "window must be int"),
        ("train: {steps: 2, epochs: 1}\n", "give only one of --steps, --epochs"),
        ("objective: bidirectional\n", "objective must be one of masked, next"),
        ("- a list\n", "a config file holds one mapping"),
        ("window: [1\n", "not a valid YAML file"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_it(tmp_path, capsys, content, says):
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    assert main(["pretrain", "T", "--out", str(tmp_path / "r"), "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and says in err[0], err
    assert not (tmp_path / "r").exists()


def test_a_run_json_of_another_stage_is_refused(tmp_path, capsys):
    (tmp_path / "run.json").write_text(json.dumps({"stage": "finetune", "config": {}}))
    assert main(["pretrain", "--config", str(tmp_path / "run.json")]) == 2
    assert "is the run.json of 'finetune', not of 'pretrain'" in capsys.readouterr().err


def _flags(command: str) -> dict[str, str]:
    """Engine flag -> its help, as `heartlm COMMAND -h` has them."""
    parser, _ = build_parser([command])
    sub = parser._subparsers._group_actions[0].choices[command]
    engine = {leaf.flag for cls in (TrainConfig, LaunchConfig) for leaf in settings.leaves(cls)}
    return {a.option_strings[0]: a.help for a in sub._actions
            if a.option_strings and a.option_strings[0] in engine}  # fmt: skip


def test_finetune_has_every_engine_flag_pretrain_has_with_the_same_help():
    pre, fine = _flags("pretrain"), _flags("finetune")
    wanted = {"--backend", "--nproc", "--wandb", "--schedule", "--grad-clip", "--micro-batch"}
    assert set(pre) == set(fine) and wanted | {"--ac"} <= set(pre)
    differ = {f for f in pre if pre[f] != fine[f]}  # only the stage's own defaults differ
    assert all(pre[f].split(" (default")[0] == fine[f].split(" (default")[0] for f in differ)


def test_a_percent_sign_in_a_docstring_or_default_is_help_text_not_a_format():
    import argparse
    from dataclasses import dataclass

    @dataclass
    class Shares:
        share: float = 0.1
        """a tenth (10 % of the beats)"""
        pattern: str = "%d-%m"
        """a date pattern"""

    parser = argparse.ArgumentParser()
    settings.add_arguments(parser, Shares)
    text = " ".join(parser.format_help().split())
    assert "a tenth (10 % of the beats) (default: 0.1)" in text
    assert "a date pattern (default: %d-%m)" in text


def test_help_and_defaults_come_from_the_dataclass():
    help_ = _flags("pretrain")
    assert help_["--lr"] == "peak learning rate (default: 0.0003)"
    assert settings.field_docs(TrainConfig)["val_every"].startswith("steps between validations")
    # The defaults that had drifted apart (0 in the dataclass, 500 / 1000 on the command line).
    assert (TrainConfig().val_every, TrainConfig().ckpt_every) == (500, 1000)
    pre = {leaf.name: leaf.default for leaf in settings.leaves(PretrainConfig)}
    fine = {leaf.name: leaf.default for leaf in settings.leaves(FinetuneConfig)}
    assert (pre["train.steps"], pre["train.batch"]) == (1000, 256)
    assert (fine["train.epochs"], fine["train.batch"], fine["train.warmup_steps"]) == (10.0, 64, 50)
