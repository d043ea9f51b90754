"""heartlm report: tables equal results.csv, every figure is drawn, the comm model fits."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from heartlm.cli import main
from heartlm.report import commmodel
from heartlm.report.study import BUCKET_BYTES
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
    ran = [r for r in raw if r["status"] == "ok"]  # the timed-out cell is listed apart
    assert len(ran) == len(raw) - 1
    copied = [t for t in tables if t and set(t[0]) <= set(raw[0]) and len(t) == len(ran)]
    assert len(copied) == 3  # results, breakdown, repeats: one row per measured cell
    for table in copied:
        for md_row, csv_row in zip(table, ran, strict=True):
            for col, value in md_row.items():
                assert value == csv_row[col], (col, value, csv_row[col])
                checked += 1
    assert checked > 3 * 25 * 10
    assert "timed out" in text and "MODEL" in text and "Test GPU" in text
    assert "Every profiled step is within 10 % of its cell's timed step" in text
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


def test_a_grid_with_no_finished_cell_draws_its_figures_without_an_empty_legend(tmp_path):
    """`gpu_scaling_study.sh report` runs over a grid whose cells may all be pending; a
    figure then says so instead of asking matplotlib for a legend with nothing in it."""
    study = tmp_path / "study"
    study.mkdir()
    work = Workload(batch=8, steps=40, warmup=5, profile=5)
    rows = [cell_row(Cell("pretrain", 128, g, 16, "weak", "ddp", "gpu"), work, "base", [])
            for g in (1, 2)]  # fmt: skip
    add_scaling(rows)
    write_results(study / "results.csv", rows)
    assert {r["status"] for r in read_results(study / "results.csv")} == {"pending"}
    (study / "grid.json").write_text(json.dumps({"workload": {"steps": 40}, "config": {}}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["report", str(study)]) == 0
    for name in ("efficiency_vs_gpus", "overhead_vs_gpus"):
        assert (study / "figures" / f"{name}.png").stat().st_size > 1000


def test_report_names_the_cells_whose_profiled_step_is_not_their_timed_step(tmp_path):
    study = tmp_path / "study"
    fabricate_study(study)
    rows = read_results(study / "results.csv")
    slow = next(r for r in rows if (r["gpus"], r["scaling"], r["status"]) == ("2", "weak", "ok"))
    timed = float(slow["time_s"]) / float(slow["steps"])
    slow["step_s"] = str(1.5 * timed)
    fast = next(r for r in rows if (r["gpus"], r["scaling"], r["status"]) == ("4", "strong", "ok"))
    fast["step_s"] = str(0.5 * float(fast["time_s"]) / float(fast["steps"]))
    write_results(study / "results.csv", rows)
    assert main(["report", str(study)]) == 0
    text = (study / "report.md").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("The profiled window"))
    cell = f"{slow['task']} w{slow['window']} weak ddp 2 GPUs {slow['cpus']} CPUs"
    assert line.count(" GPUs ") == 2 and cell in line and "strong ddp 4 GPUs" in line
    assert f"{1e3 * 1.5 * timed:.1f} ms profiled, {1e3 * timed:.1f} ms timed" in line


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
    # A number that no cell writes: the report used to predict negative throughput from it.
    fabricate_study(study := tmp_path / "study2")
    csv_text = (study / "results.csv").read_text().splitlines()
    for column, value, kind in ((15, "-1", "positive"), (2, "0", "positive"),
                                (15, "nan", "positive"), (20, "inf", "finite")):  # fmt: skip
        fields = csv_text[3].split(",")
        fields[column] = value
        (study / "results.csv").write_text("\n".join([*csv_text[:3], ",".join(fields)]) + "\n")
        assert main(["report", str(study)]) == 2
        err = capsys.readouterr().err.strip()
        assert "line 4:" in err and f"is not a {kind} number: '{value}'" in err, err
        assert not (study / "report.md").exists()


@pytest.mark.parametrize("cut", [20, 60])
def test_report_refuses_a_results_csv_cut_short_inside_a_row(tmp_path, capsys, cut):
    study = tmp_path / "study"
    fabricate_study(study)
    lines = (study / "results.csv").read_text().splitlines()
    (study / "results.csv").write_text("\n".join(lines[:4]) + "\n" + lines[4][:cut])
    assert main(["report", str(study)]) == 2
    err = capsys.readouterr().err.strip()
    assert "results.csv: line 5: not as many fields" in err and "\n" not in err
    assert not (study / "report.md").exists()


@pytest.mark.parametrize(
    "text", ["", "null", "[]", '{"config": 5}', '{"workload": [1], "config": {}}']
)
def test_report_reads_a_grid_json_not_shaped_as_scale_writes_it_as_missing(tmp_path, text):
    study = tmp_path / "study"
    fabricate_study(study)
    (study / "grid.json").write_text(text)
    assert main(["report", str(study)]) == 0
    assert "(grid.json missing: workload unknown)" in (study / "report.md").read_text()


def test_comm_model_reproduces_the_node_it_was_fitted_on_and_adds_the_network():
    grad, t1, busbw, w = 344e6, 0.045, 300e9, 2 / 3
    overhead = {2: 0.003, 4: 0.005}
    for scaling in ("weak", "strong"):
        steps = {1: t1}
        for n, o in overhead.items():
            c = commmodel.compute_s(t1, n, scaling)
            a = commmodel.ring_s(n, grad, busbw)
            steps[n] = c + o + max(0.0, a - w * c)
        fit = commmodel.fit(list(steps), list(steps.values()), grad, scaling, {2: busbw})
        assert fit.points == 2
        assert fit.overhead_s == pytest.approx(overhead)
        for n, t in steps.items():  # one node: the measurements come back
            assert commmodel.predict_step_s(fit, 1, n, 50e9) == pytest.approx(t)
    # weak, 4 nodes of 4 GPUs: the network's ring is added, less what backward hides
    # (2/3 of the compute); at 400 Gb/s it hides entirely
    fit = commmodel.fit([1, 2, 4], [t1, t1 + 0.003, t1 + 0.005], grad, "weak", {2: busbw})
    assert commmodel.gbps_to_bytes(400.0) == 50e9
    net = commmodel.gbps_to_bytes(100.0)  # slow enough that backward cannot hide it all
    a = commmodel.ring_s(4, grad, busbw) + commmodel.ring_s(4, grad, net) + 6 * 1e-5
    expected = t1 + fit.overhead(4) + a - w * t1
    assert a > w * t1
    assert commmodel.predict_step_s(fit, 4, 4, net, 1e-5) == pytest.approx(expected)
    assert commmodel.predict_step_s(fit, 4, 4, 50e9, 1e-5) == pytest.approx(t1 + 0.005)
    assert commmodel.steps_at(fit, 64, 16) == 4
    # a flat ring over a socket for every rank (the emulated second node)
    sock = 2e9
    flat = commmodel.predict_flat_step_s(fit, 2, sock)
    assert flat == pytest.approx(t1 + fit.overhead(2) + grad / sock - w * t1)


def test_comm_model_needs_the_one_gpu_step():
    with pytest.raises(ValueError, match="1-GPU step"):
        commmodel.fit([2, 4], [0.2, 0.21], 1e8, "weak", {2: 1e11})
    fit = commmodel.fit([1], [0.2], 1e8, "weak", {2: 1e11})
    assert fit.points == 0 and commmodel.predict_step_s(fit, 1, 4, 5e10) == pytest.approx(0.2)


def test_report_sets_the_socket_run_beside_the_models_prediction(tmp_path):
    study = tmp_path / "study"
    fabricate_study(study)
    comm = study / "comm"
    comm.mkdir()
    for label, world, busbw in (("nvlink", 2, 300e9), ("nvlink", 4, 330e9),
                                ("socket", 2, 2.5e9)):  # fmt: skip
        sizes = ((25 * 2**20, 8e88), (BUCKET_BYTES, busbw), (350 * 2**20, 9e99))
        results = [{"bytes": n, "time_s": 1.0, "algbw": 1.0, "busbw": bw} for n, bw in sizes]
        info = {"label": label, "world_size": world, "results": results}
        (comm / f"{label}_n{world}.json").write_text(json.dumps(info))
    run = {"cell": "pretrain-w128-g2-c4-weak-ddp-gpu", "status": "ok", "task": "pretrain",
           "window": 128, "scaling": "weak", "world": 2, "gpus_per_node": 1,
           "step_s": 0.3, "time_s": 0.3 * 20}  # fmt: skip
    (comm / "socket_runs.json").write_text(json.dumps({"runs": [run]}))
    assert main(["report", str(study), "--nodes", "2,4,16,64"]) == 0
    text = (study / "report.md").read_text()
    section = text[text.index("## Emulated second node") : text.index("## Multi-node")]
    (row,) = [ln for ln in section.splitlines() if ln.startswith("| pretrain w128 weak")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:4] == ["2 x 1", "2.5", "0.3"]  # the bucket size's bandwidth, not 8e88 or 9e99
    predicted = float(cells[4])
    assert cells[5] == f"{100 * (predicted / 0.3 - 1):+.1f} %"
    assert "| 400 | 64 | 256 |" in text and "| 200 | 2 | 8 |" in text


def test_with_micro_batches_only_the_last_backward_hides_the_all_reduce():
    from heartlm.report.study import Study

    def study(engine_args: list[str]) -> Study:
        grid = {"config": {"batch": 2048, "engine_args": engine_args}}
        return Study(Path("unused"), [], {}, grid)

    assert study([]).micro_batches(128) == 1
    assert study(["--micro-batch", "256"]).micro_batches(128) == 8
    assert study(["--micro-batch=300"]).micro_batches(1024) == 7  # the last one is short
    assert study(["--micro-batch", "many"]).micro_batches(128) == 1  # not a number: no claim
    # 0.4 s of compute, 0.12 s of all-reduce over a socket: hidden behind 2/3 of the step's
    # compute, but 0.087 s exposed when only the last of 8 micro-batches overlaps it.
    fit = commmodel.fit([1], [0.4], 3.13e9 * 0.12, "weak", {2: 1e11}, 2 / 3 / 8)
    busbw = 3.13e9
    assert commmodel.predict_flat_step_s(fit, 2, busbw) == pytest.approx(0.4 + 0.12 - 0.4 / 12)


def test_report_tables_keep_partial_cells_and_show_each_1_gpu_reference_once():
    from heartlm.report.markdown import _pending, _shown

    def row(backend: str, gpus: str, status: str = "ok") -> dict[str, str]:
        return {"task": "pretrain", "window": "128", "scaling": "weak", "backend": backend,
                "gpus": gpus, "cpus": "16", "status": status}  # fmt: skip

    rows = [row("ddp", "1"), row("ddp", "2"), row("fsdp", "1"), row("fsdp", "2", "partial"),
            row("zero1", "1")]  # fmt: skip
    shown = _shown(rows)
    # zero1 has no multi-GPU result: its copy of the 1-GPU cell is not repeated
    assert [(r["backend"], r["gpus"]) for r in shown] == [
        ("ddp", "1"), ("ddp", "2"), ("fsdp", "1"), ("fsdp", "2")]  # fmt: skip
    line = _pending([row("zero2", "2", "pending"), row("zero2", "4", "pending")])
    assert "2 cells of the grid have not run yet: pretrain w128 zero2 16 CPUs." in line
    assert _pending([]) == ""
