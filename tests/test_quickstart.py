"""heartlm quickstart: its stages chain and parse with the real CLIs; end to end when slow."""

from __future__ import annotations

import pytest

from heartlm import settings
from heartlm.cli import build_parser, main
from heartlm.quickstart import QuickstartConfig, stages
from heartlm.scale.results import read_results

ORDER = ["synth", "ingest", "tokenize", "pretrain", "finetune", "scale", "report"]


def test_stages_chain_and_every_command_parses_with_the_real_cli(tmp_path):
    out = tmp_path / "qs"
    plan = stages(out, QuickstartConfig(), gpus=[1, 2])
    assert [name for name, _ in plan] == ORDER
    written: set[str] = set()
    for name, argv in plan:
        parser, module = build_parser(argv)
        parser.parse_args(argv)  # a flag the stage does not have exits here
        assert module is not None
        paths = [a for a in argv if a.startswith(str(out))]
        target = None
        if name == "synth":
            target = argv[1]
        elif "--out" in argv:
            target = argv[argv.index("--out") + 1]
        for path in paths:
            if path != target:
                assert path in written, f"{name} reads {path}, which no earlier stage wrote"
        if target is not None:
            written.add(target)
    assert len(written) == 6
    parser, module = build_parser(plan[5][1])
    grid = settings.resolve(module.Config, parser.parse_args(plan[5][1]), "scale").grid
    assert grid.gpus == [1, 2] and grid.tasks == ["pretrain"]


def test_quickstart_refuses_a_folder_that_holds_files(tmp_path, capsys):
    (tmp_path / "mine.txt").write_text("keep")
    assert main(["quickstart", "--out", str(tmp_path)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (tmp_path / "mine.txt").read_text() == "keep"


@pytest.mark.slow
def test_quickstart_end_to_end(tmp_path, capfd):
    out = tmp_path / "qs"
    assert main(["quickstart", "--out", str(out)]) == 0
    report = out / "scale" / "report.md"
    assert capfd.readouterr().out.strip().splitlines()[-1] == str(report)
    rows = read_results(out / "scale" / "results.csv")
    assert [r["status"] for r in rows] == ["ok"] * len(rows) and len(rows) >= 1
    assert (out / "finetune" / "model.safetensors").is_file()
    assert "| pretrain |" in report.read_text()
