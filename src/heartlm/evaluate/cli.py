"""`heartlm evaluate FT DATA`: score a fine-tuned run on a token folder or raw WFDB records."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from heartlm.ecg.labels import AAMI_CLASSES
from heartlm.errors import HeartlmError
from heartlm.labelled.shares import format_shares, parse_shares
from heartlm.log import logger
from heartlm.settings import comma_list, setting, to_dict


@dataclass
class EvaluateConfig:
    run: Path | None = setting(positional=True, required=True, metavar="FT")
    """fine-tuned run folder"""
    data: Path | None = setting(positional=True, required=True, metavar="DATA")
    """token folder, or a folder of WFDB records"""
    json: bool = False
    """print one JSON object to stdout"""
    out: Path | None = None
    """also write metrics.json, figures, run.json and predictions.csv (the model's call on
    every beat or window of the chosen records, labelled or not, with its time in the record
    where known, then also as WFDB annotations in annotations/NAME.hlm); records without
    labels are then predicted rather than refused"""
    overwrite: bool = False
    """replace an existing --out"""
    all_records: bool = False
    """MIT-BIH: score every record (default: DS2 only, the inter-patient test half)"""
    records: list[str] | None = setting(None, metavar="NAME")
    """score only these records (NAME or DB/NAME)"""
    views: int = 1
    """each beat's output averaged over this many overlapping windows (stride window / N),
    weighted toward the windows that centre it. Beats runs: its class probabilities (1: the one
    window whose centre is nearest); AFIB runs: its AFIB logits, then pooled over each scored
    window (1: each scored window from the one context window centred on it)"""
    afib_window: int | None = setting(None, metavar="N")
    """AFIB runs: score windows of N beats, each inside the run's window of context centred on
    it (default: the run's window); e.g. 32 for a run trained on 128-beat windows"""
    afib_threshold: float | None = setting(None, metavar="T")
    """AFIB runs: a window is called AFIB where the model's AFIB probability reaches T
    (default 0.5; the report also counts windows at 0.001 ... 0.02, 0.05, 0.10, ... 0.95,
    0.98 ... 0.999, to choose T on other records)"""
    class_offset: list[str] = setting(factory=list, parse=comma_list(str), metavar="CLASS=X,...")
    """beats runs: add X to the log of class CLASS's probability before each beat's class is
    taken, e.g. V=0.5 (a prior shift: a class called more often where X > 0; default none).
    The report also counts beats with each class's offset at -1 ... 3, the others held, to
    choose X on other records (offset_counts)"""
    beat_mlp_share: str | float | None = setting(None, parse=str, metavar="S|CLASS=S,...")
    """beats runs with a per-beat network (finetune --beat-mlp): each beat's logits are
    2 (1 - S) x the transformer's own plus 2 S x the network's, 0 <= S <= 1, for every class
    (S) or for one (CLASS=S), e.g. 0.25,V=1 (default: their sum as trained, S = 0.5; 0 the
    transformer alone, 1 the network alone)"""
    ensemble: list[Path] | None = setting(None, metavar="FT")
    """more fine-tuned runs of FT's task and codebook (e.g. the fold models of a
    cross-validation; AFIB runs of FT's window, beats runs of any, each reading its own
    windows): their outputs are averaged with FT's before a beat's class is taken or a window
    is called (beats: class probabilities; AFIB: window probabilities)"""
    batch: int = 64
    """windows per forward pass"""
    device: str = "auto"
    """auto (CUDA when available), cpu, cuda or cuda:N"""
    lead: str | None = None
    """WFDB DATA: lead to use instead of the run's (NAME or NAME,NAME,...)"""
    annotations: str | None = setting(None, metavar="EXT")
    """WFDB DATA: reference annotation extension"""


Config = EvaluateConfig


def run(cfg: EvaluateConfig) -> int:
    from heartlm.evaluate.scoring import evaluate
    from heartlm.labelled.tokens import is_token_folder

    if cfg.batch < 1:
        raise HeartlmError("--batch must be positive")
    if cfg.records and cfg.all_records:
        raise HeartlmError("--records and --all-records: give one (--records scores those alone)")
    if (cfg.lead or cfg.annotations) and is_token_folder(Path(cfg.data)):
        raise HeartlmError("--lead and --annotations choose how WFDB records are read; this is "
                           "a token folder, read as it was tokenized", cfg.data)  # fmt: skip
    if cfg.afib_threshold is not None and not 0.0 < cfg.afib_threshold < 1.0:
        raise HeartlmError(
            f"--afib-threshold must be strictly between 0 and 1, not {cfg.afib_threshold}"
        )
    from heartlm.labelled.offsets import parse_offsets

    try:
        offsets = parse_offsets(cfg.class_offset) if cfg.class_offset else None
        given = cfg.beat_mlp_share  # a number in a run.json written before shares per class
        shares = None if given is None else parse_shares(str(given).split(","))
    except ValueError as exc:
        raise HeartlmError(str(exc)) from None
    seen: dict[Path, Path] = {}
    for member in map(Path, [cfg.run, *(cfg.ensemble or [])]):
        if (first := seen.setdefault(member.resolve(), member)) is not member:
            raise HeartlmError(f"--ensemble names the run {first} again: its vote would count "
                               "twice", member)  # fmt: skip
    if cfg.out is not None:
        from heartlm.outdir import check_separate, check_writable

        check_writable(cfg.out, cfg.overwrite)
        check_separate(cfg.out, [cfg.run, cfg.data, *(cfg.ensemble or [])])
    t0 = time.perf_counter()
    result = evaluate(
        cfg.run,
        cfg.data,
        all_records=cfg.all_records,
        records=cfg.records,
        batch=cfg.batch,
        device=cfg.device,
        ingest_overrides={"lead": cfg.lead, "annotations": cfg.annotations},
        afib_window=cfg.afib_window,
        views=cfg.views,
        afib_threshold=cfg.afib_threshold,
        ensemble=cfg.ensemble,
        class_offsets=offsets,
        beat_mlp_share=shares,
        predictions=cfg.out is not None,
    )
    elapsed = time.perf_counter() - t0
    if cfg.out is not None:
        _write_out(cfg, result, elapsed)
    if cfg.json:
        print(json.dumps(result["report"], indent=2))
    else:
        print(format_report(result["report"]))
    return 0


def _write_out(cfg: EvaluateConfig, result: dict[str, Any], elapsed: float) -> None:
    from heartlm.evaluate import plots
    from heartlm.evaluate.predictions import ANNOTATOR, write_calls
    from heartlm.outdir import atomic_write_text, staged_dir
    from heartlm.runinfo import write_run_json

    report = result["report"]
    with staged_dir(cfg.out, cfg.overwrite) as stage:
        atomic_write_text(stage / "metrics.json", json.dumps(report, indent=2) + "\n")
        atomic_write_text(stage / "predictions.csv", result["predictions"])
        if "calls" in result:
            write_calls(stage / "annotations", result["calls"])
        title = f"{cfg.run.name} on {cfg.data.name} ({report['scope']})"
        scored = "n_predicted" not in report  # records without labels: nothing to plot
        if scored and report["task"] == "beats":
            plots.confusion_png(
                np.array(report["confusion"]), AAMI_CLASSES, stage / "confusion.png", title
            )
        elif scored:
            plots.roc_png(result["labels"], result["scores"], stage / "roc.png", title)
        write_run_json(
            stage,
            "evaluate",
            to_dict(cfg),
            counts={k: v for k, v in report.items() if k.startswith("n_")},
            timings={"total": elapsed},
        )
    written = ["metrics.json", "predictions.csv"]
    written += [f"annotations/*.{ANNOTATOR}"] if "calls" in result else []
    written += ["a figure"] if "n_predicted" not in report else []
    logger.info(f"{cfg.out}: {', '.join(written[:-1])} and {written[-1]} written")


def format_report(report: dict[str, Any]) -> str:
    """The human-readable table printed when --json is not given."""
    lines = [f"task {report['task']} on {report['data']} ({report['scope']})"]
    if "n_predicted" in report:
        return "\n".join([*lines, report["note"]])
    w = max([10, *(len(r["record"]) + 2 for r in report.get("per_record", []))])
    if report["task"] == "beats":
        views = report.get("views", 1)
        seen = f", each averaged over {views} overlapping windows" if views > 1 else ""
        if offsets := report.get("class_offsets"):
            seen += ", class offsets " + " ".join(f"{c}={x:+g}" for c, x in offsets.items())
        if (share := report.get("beat_mlp_share")) is not None:
            seen += f", per-beat network's share {format_shares(share)}"
        lines.append(f"{report['n_beats']} scored beats{seen}, accuracy {report['accuracy']:.4f}")
        lines.append(f"{'class':<6}{'support':>9}{'Se':>8}{'+P':>8}{'F1':>8}")
        for name, s in report["per_class"].items():
            lines.append(
                f"{name:<6}{s['support']:>9}{s['se']:>8.4f}{s['ppv']:>8.4f}{s['f1']:>8.4f}"
            )
        lines.append("confusion matrix (rows reference, columns predicted)")
        lines.append("      " + "".join(f"{n:>8}" for n in AAMI_CLASSES))
        for name, row in zip(AAMI_CLASSES, report["confusion"], strict=True):
            lines.append(f"{name:<6}" + "".join(f"{v:>8}" for v in row))
        lines.append("per record")
        lines.append(f"{'record':<{w}}{'beats':>7}{'acc':>8}{'S n':>6}{'S Se':>7}{'S +P':>7}"
                     f"{'V n':>6}{'V Se':>7}{'V +P':>7}")  # fmt: skip
        for r in report["per_record"]:
            s, v = r["S"], r["V"]
            if r["accuracy"] is None:
                lines.append(f"{r['record']:<{w}}{0:>7}  {r['note']}")
                continue
            lines.append(
                f"{r['record']:<{w}}{r['n_beats']:>7}{r['accuracy']:>8.4f}{s['support']:>6}"
                f"{s['se']:>7.3f}{s['ppv']:>7.3f}{v['support']:>6}{v['se']:>7.3f}{v['ppv']:>7.3f}"
            )
    else:
        a = report["afib"]
        auroc = "n/a (one class)" if a["auroc"] is None else f"{a['auroc']:.4f}"
        context = report.get("context", report["window"])
        seen = f", each inside {context} beats of context" if context != report["window"] else ""
        views = report.get("views", 1)
        if views > 1:
            seen += f", each beat averaged over {views} overlapping windows"
        if report.get("n_short_windows"):
            seen += (f" ({report['n_short_windows']} of them shorter: records of fewer "
                     "beats, padded)")  # fmt: skip
        if report.get("n_too_short"):
            seen += (f"; {report['n_too_short']} not called (under {report['min_beats']} "
                     "beats)")  # fmt: skip
        lines.append(
            f"{report['n_windows']} windows of {report['window']} beats{seen}, "
            f"{report['n_afib_windows']} AFIB ({report['rule']})"
        )
        threshold = report.get("threshold", 0.5)
        called_at = f" (called at {threshold:g})" if threshold != 0.5 else ""
        lines.append(
            f"AFIB F1 {a['f1']:.4f}  Se {a['se']:.4f}  +P {a['ppv']:.4f}  AUROC {auroc}  "
            f"accuracy {report['accuracy']:.4f}{called_at}"
        )
        e = report["afib_episodes"]
        lines.append(
            f"AFIB episodes: {e['episodes']} found with Se {e['se']:.4f}; "
            f"{e['calls']} called with +P {e['ppv']:.4f}"
        )
        lines.append("per record")
        lines.append(f"{'record':<{w}}{'windows':>8}{'AFIB':>6}{'tp':>6}{'fp':>6}{'fn':>6}")
        for r in report["per_record"]:
            lines.append(
                f"{r['record']:<{w}}{r['n_windows']:>8}{r['n_afib']:>6}{r['tp']:>6}{r['fp']:>6}"
                f"{r['fn']:>6}" + (f"  {r['note']}" if "note" in r else "")
            )
    return "\n".join(lines)
