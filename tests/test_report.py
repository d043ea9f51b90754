"""heartlm report: tables equal results.csv, every figure is drawn, the comm model fits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from heartlm.cli import main
from heartlm.report import commmodel
from heartlm.scale.cell import Cell, Workload
from heartlm.scale.results import add_scaling, cell_row, read_results, write_results

FIGURES = ("time_vs_cpus", "time_speedup_vs_gpus", "efficiency_vs_gpus", "overhead_vs_gpus",
           "breakdown", "multinode_model")  # fmt: skip


def fabricate_study(folder: Path) -> None:
    """A results.csv as `heartlm scale` writes it, from invented (test-only) measurements."""
    folder.mkdir()
    work = Workload(batch=8, steps=40, warmup=5, profile=5)
    rows = []
    for task in ("pretrain", "finetune"):
        for scaling in ("weak", "strong"):
            for cpus in (1, 4):
                for gpus in (1, 2, 4):
                    cell = Cell(task, 128, gpus, cpus, scaling, "ddp", "gpu")
                    step = 0.2 * (1 if scaling == "weak" else 1 / gpus) + 0.01 * (gpus - 1)
                    t = step * work.timed_steps(cell) * (1.02 if cpus == 1 else 1.0)
                    rep = {
                        "status": "ok", "time_s": t, "wall_s": t + 7.3, "mfu": 0.41,
                        "step_s": step, "compute_s": 0.8 * step, "comm_exposed_s": 0.1 * step,
                        "data_wait_s": 0.001, "other_s": 0.1 * step - 0.001,
                        "comm_overlapped_s": 0.05 * step, "data_wait_pct": 0.5,
                        "grad_bytes": 4 * 86_000_000,
                    }  # fmt: skip
                    reps = [rep, {**rep, "time_s": t * 1.01}, {**rep, "time_s": t * 0.99}]
                    rows.append(cell_row(cell, work, "base", reps))
    failed = Cell("pretrain", 1024, 4, 1, "weak", "ddp", "gpu")
    rows.append(cell_row(failed, work, "base", [{"status": "timeout", "error": "timed out"}]))
    add_scaling(rows)
    write_results(folder / "results.csv", rows)
    (folder / "environment.json").write_text(json.dumps({"gpu_model": "Test GPU", "torch": "x"}))
    (folder / "grid.json").write_text(json.dumps({"workload": {"steps": 40}, "config": {}}))


def markdown_tables(text: str) -> list[list[dict[str, str]]]:
    tables, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            head = [c.strip() for c in lines[i].strip("|").split("|")]
            body = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                body.append(dict(zip(head, cells, strict=True)))
                i += 1
            tables.append(body)
        i += 1
    return tables


def test_report_numbers_equal_results_csv_and_every_figure_is_drawn(tmp_path, capsys):
    study = tmp_path / "study"
    fabricate_study(study)
    assert main(["report", str(study)]) == 0
    assert capsys.readouterr().out.strip() == str(study.resolve() / "report.md")
    raw = read_results(study / "results.csv")
    text = (study / "report.md").read_text()
    tables = markdown_tables(text)
    checked = 0
    copied = [t for t in tables if t and set(t[0]) <= set(raw[0]) and len(t) == len(raw)]
    assert len(copied) == 3  # results, breakdown, repeats: one row per results.csv row
    for table in copied:
        for md_row, csv_row in zip(table, raw, strict=True):
            for col, value in md_row.items():
                assert value == csv_row[col], (col, value, csv_row[col])
                checked += 1
    assert checked > 3 * 25 * 10
    assert "timed out" in text and "MODEL" in text and "Test GPU" in text
    assert "| pretrain | 128 | weak | 2 | 4.284 | 4.2 | 2.00 % | yes |" in text  # 1.02 / 1
    for name in FIGURES:
        for ext in ("png", "svg"):
            assert (study / "figures" / f"{name}.{ext}").stat().st_size > 1000
    # the CSV's speedup is T1/TN of its own medians (3 repeats, median = the middle one)
    row = next(r for r in raw if r["gpus"] == "4" and r["scaling"] == "strong")
    base = next(r for r in raw if r["gpus"] == "1" and r["scaling"] == "strong"
                and r["task"] == row["task"] and r["cpus"] == row["cpus"])  # fmt: skip
    assert float(row["speedup"]) == pytest.approx(
        float(base["time_s"]) / float(row["time_s"]), rel=1e-5
    )
    assert float(row["time_min_s"]) < float(row["time_s"]) < float(row["time_max_s"])


def test_report_refuses_a_folder_without_results_or_with_bad_numbers(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("heartlm: error:") and "results.csv" in err and "\n" not in err
    study = tmp_path / "study"
    fabricate_study(study)
    csv_text = (study / "results.csv").read_text().splitlines()
    fields = csv_text[3].split(",")
    fields[15] = "fast"  # time_s
    csv_text[3] = ",".join(fields)
    (study / "results.csv").write_text("\n".join(csv_text) + "\n")
    assert main(["report", str(study)]) == 2
    err = capsys.readouterr().err.strip()
    assert "line 4: time_s is not a number: 'fast'" in err and "\n" not in err
    assert not (study / "report.md").exists()


def test_comm_model_recovers_the_curve_it_was_generated_from():
    grad_bytes, bw, lat, t1 = 344e6, 120e9, 30e-6, 0.25
    for scaling in ("weak", "strong"):
        gpus = [1, 2, 4, 8]
        steps = [
            commmodel.compute_s(t1, n, scaling) + commmodel.ring_s(n, grad_bytes, bw, lat)
            for n in gpus
        ]
        fit = commmodel.fit_intra(gpus, steps, grad_bytes, scaling, assumed_bandwidth=1.0)
        assert fit.points == 3
        assert fit.bandwidth == pytest.approx(bw, rel=1e-6)
        assert fit.latency_s == pytest.approx(lat, rel=1e-6)
        # one node: the prediction reproduces the measurements
        for n, s in zip(gpus, steps, strict=True):
            assert commmodel.predict_step_s(fit, 1, n, 50e9, 1e-5) == pytest.approx(s)
    # across nodes the stated network adds a ring over the nodes at the node's bandwidth
    fit = commmodel.fit_intra([1, 2, 4], [0.25, 0.26, 0.27], grad_bytes, "weak", 1.0)
    node_bw = commmodel.gbps_to_bytes(400.0)
    assert node_bw == 50e9
    one = commmodel.predict_step_s(fit, 1, 4, node_bw, 1e-5)
    four = commmodel.predict_step_s(fit, 4, 4, node_bw, 1e-5)
    assert four - one == pytest.approx(2 * 3 / 4 * grad_bytes / node_bw + 2 * 3 * 1e-5)
    # weak scaling: T(N) = steps / N * t_step(N)
    t = commmodel.predict_time_s(fit, 40, 4, 4, node_bw, 1e-5)
    assert t == pytest.approx(40 / 16 * four)


def test_comm_model_with_one_or_no_multi_gpu_point():
    fit = commmodel.fit_intra([1, 2], [0.2, 0.21], 1e8, "weak", assumed_bandwidth=5e9)
    assert fit.points == 1 and fit.latency_s == 0
    assert fit.bandwidth == pytest.approx(2 * 1 / 2 * 1e8 / 0.01)
    fit = commmodel.fit_intra([1], [0.2], 1e8, "weak", assumed_bandwidth=5e9)
    assert fit.points == 0 and fit.bandwidth == 5e9
    hidden = commmodel.fit_intra([1, 2, 4], [0.2, 0.2, 0.2], 1e8, "weak", 5e9)
    assert hidden.bandwidth == float("inf")
    assert commmodel.predict_step_s(hidden, 1, 4, 50e9, 1e-5) == pytest.approx(0.2)
