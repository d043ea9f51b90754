"""Evaluate a fine-tuned run: choose the records, cut windows, predict, and score."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from heartlm.ecg.annwrite import file_paths
from heartlm.ecg.labels import AAMI_CLASSES
from heartlm.errors import HeartlmError
from heartlm.evaluate import predictions as calls
from heartlm.labelled import metrics
from heartlm.labelled.lineage import FINETUNE_INFO, read_finetune_info, read_lineage
from heartlm.labelled.offsets import named_offsets, offset_classes, offset_counts
from heartlm.labelled.predict import (
    afib_scores,
    averaged_beat_outputs,
    beat_probabilities,
    block_afib_scores,
)
from heartlm.labelled.shares import named_shares
from heartlm.labelled.splits import MITDB_DS2, RecordRef, is_mitdb
from heartlm.labelled.tokens import beat_times, token_folder
from heartlm.labelled.windows import (
    AFIB_MIN_BEATS,
    AFIB_RULE,
    IGNORE,
    callable_windows,
    cut_context_windows,
    cut_windows,
    streams_of,
)
from heartlm.log import logger
from heartlm.runtime import pick_device


def choose_records(
    refs: list[RecordRef], all_records: bool, select: list[str] | None
) -> tuple[list[RecordRef], str]:
    """Records to score and a phrase that says which: MIT-BIH defaults to DS2 only."""
    if select:
        wanted = set(select)
        chosen = [r for r in refs if r.name in wanted or r.key in wanted]
        missing = wanted - {r.name for r in chosen} - {r.key for r in chosen}
        if missing:
            raise HeartlmError(f"--records names records the data does not hold: {sorted(missing)}")
        return chosen, f"{len(chosen)} selected records"
    has_mitdb = any(is_mitdb(r.db) for r in refs)
    if all_records or not has_mitdb:
        return refs, f"all {len(refs)} records"
    chosen = [r for r in refs if not is_mitdb(r.db) or r.name in MITDB_DS2]
    dropped = len(refs) - len(chosen)
    others = sum(not is_mitdb(r.db) for r in chosen)
    # Scores pooled over DS2 and another database are easy to misread as DS2's: say so.
    mixed = f" and {others} records of other databases, scored together" if others else ""
    return chosen, (
        f"MIT-BIH DS2 only: {len(chosen) - others} records{mixed}; {dropped} MIT-BIH records "
        "not scored (--all-records scores them, --records picks)"
    )


def _check_same_tokens(lineage: dict[str, Any], data: Any, where: Path) -> None:
    """Refuse tokens made with another codebook than the run's."""
    want, got = lineage.get("codebook_hash"), data.meta.get("codebook_hash")
    if lineage.get("vocab_size") not in (None, data.vocab_size):
        raise HeartlmError(
            f"the run's vocabulary is {lineage['vocab_size']} tokens, these tokens have "
            f"{data.vocab_size} (tokenized with another codebook)",
            where,
        )
    if want and got and want != got:
        raise HeartlmError(
            f"tokenized with codebook {got}, the run was trained on codebook {want}; "
            "tokenize the records with --codebook RUN/codebook.json or give WFDB records",
            where,
        )


def _afib_window(info: dict[str, Any], afib_window: int | None, model: Any, run: Path) -> int:
    """The AFIB windows to score: the run's own, or shorter ones inside its context."""
    task, window = info["task"], int(info["window"])
    if afib_window is None:
        return window
    if task != "afib":
        raise HeartlmError(f"--afib-window applies to AFIB runs; this run's task is {task}", run)
    if not 1 <= afib_window <= window:
        raise HeartlmError(
            f"--afib-window {afib_window} must be between 1 and the run's window of {window} "
            "beats (the model sees at most its window at once)",
            run,
        )
    if afib_window == window:
        return window
    if getattr(model.cfg, "cls_token", False):
        raise HeartlmError(
            "--afib-window needs a model without a CLS token: it pools the scored beats", run
        )
    if not info.get("afib_beat_loss"):
        logger.warning(
            "%s: trained without --afib-beat-loss, its head learnt whole windows only; "
            "scores of %d-beat windows inside them may be off",
            run,
            afib_window,
        )
    return afib_window


def _ensemble_member(
    run: Path, info: dict[str, Any], data: Any, afib_window: int | None, views: int
) -> Any:
    """(model, window) of one `--ensemble` run, refused unless its task is the main run's (and
    for AFIB its window), `data` is tokenized with its codebook, and it takes `--afib-window`
    and `--views` as the first run does (the same checks, the same warnings). A beats run of
    another window reads its own windows of the same beats."""
    from heartlm.model import load_pretrained

    other = read_finetune_info(run)
    for key in ("task", "window") if info.get("task") == "afib" else ("task",):
        if other.get(key) != info.get(key):
            raise HeartlmError(
                f"--ensemble: its {key} is {other.get(key)}, the first run's is {info.get(key)}",
                run,
            )
    _check_same_tokens(read_lineage(run), data, run)
    model, _ = load_pretrained(run)
    _check_window(int(other["window"]), model, run)
    _afib_window(other, afib_window, model, run)
    _views(other, views, model, run)
    return model, int(other["window"])


def _beat_stride(window: int, views: int) -> int:
    """Stride of the beat windows scored: window / views, or half a window for one view."""
    return max(1, window // views if views > 1 else window // 2)


def _aligned_mean(outputs: list[tuple[np.ndarray, np.ndarray]], runs: list[Path]) -> np.ndarray:
    """The members' (beats, C) probabilities averaged beat by beat, on the first member's
    sorted beat indices (members of other windows list the same beats from other windows)."""
    beat = outputs[0][0]
    rows = []
    for (other, prob), run in zip(outputs, runs, strict=True):
        at = np.searchsorted(other, beat)
        if not ((at < len(other)).all() and np.array_equal(other[at], beat)):
            raise HeartlmError("--ensemble: this run does not score every beat the first does",
                               run)  # fmt: skip
        rows.append(prob[at])
    return np.mean(rows, axis=0)


def _check_window(window: int, model: Any, run: Path) -> None:
    """Refuse a finetune.json window the run's model cannot take at once."""
    if window > model.cfg.max_len:
        raise HeartlmError(f"a window of {window} beats, more than the model's {model.cfg.max_len}",
                           run / FINETUNE_INFO)  # fmt: skip


def _mlp_shares(
    share: float | np.ndarray | None, task: str, members: list[tuple[Any, int]], runs: list[Path]
) -> np.ndarray | None:
    """`--beat-mlp-share` as (C,) shares, each within [0, 1], for beats runs whose every member
    has a per-beat network (None: none given)."""
    if share is None:
        return None
    try:
        shares = np.broadcast_to(np.asarray(share, dtype=np.float64), (len(AAMI_CLASSES),)).copy()
    except ValueError:
        raise HeartlmError(f"--beat-mlp-share: one share, or one for each of the "
                           f"{len(AAMI_CLASSES)} classes, not {share!r}") from None  # fmt: skip
    within = (shares >= 0.0) & (shares <= 1.0)  # NaN is not
    if not within.all():
        raise HeartlmError(f"--beat-mlp-share must be within 0 and 1, not {shares[~within][0]}")
    if task != "beats":
        raise HeartlmError("--beat-mlp-share is for beats runs, not an AFIB run", runs[0])
    for (model, _), run in zip(members, runs, strict=True):
        if getattr(model, "beat_mlp", None) is None:
            raise HeartlmError("--beat-mlp-share weighs the per-beat network's logits: this "
                               "run has none (finetune --beat-mlp)", run)  # fmt: skip
    return shares


def _ensemble_note(ensemble: list[Path] | None) -> dict[str, Any]:
    """The report's record of the runs averaged with the first (none: nothing)."""
    return {"ensemble": [str(p) for p in ensemble]} if ensemble else {}


def _views(info: dict[str, Any], views: int, model: Any, run: Path) -> int:
    """How many overlapping windows each beat's output is averaged over."""
    window = int(info["window"])
    if not 1 <= views <= window:
        raise HeartlmError(f"--views {views}: a count from 1 to the run's window ({window})", run)
    if views > 1 and info["task"] == "afib":
        if getattr(model.cfg, "cls_token", False):
            raise HeartlmError(
                "--views on an AFIB run needs a model without a CLS token: it averages the "
                "beats' scores",
                run,
            )
        if not info.get("afib_beat_loss"):
            logger.warning(
                "%s: trained without --afib-beat-loss, its head learnt whole windows only; "
                "per-beat scores averaged over %d windows may be off",
                run,
                views,
            )
    return views


def evaluate(
    run: Path,
    data_path: Path,
    all_records: bool = False,
    records: list[str] | None = None,
    batch: int = 64,
    device: str = "auto",
    ingest_overrides: dict[str, Any] | None = None,
    afib_window: int | None = None,
    views: int = 1,
    afib_threshold: float | None = None,
    ensemble: list[Path] | None = None,
    class_offsets: np.ndarray | None = None,
    beat_mlp_share: float | np.ndarray | None = None,
    predictions: bool = False,
) -> dict[str, Any]:
    """Score `run` on `data_path`; returns {"report": JSON body, "labels", "scores"}, and with
    `predictions` "predictions": the text of predictions.csv (`heartlm.evaluate.predictions`),
    the model's call on every beat or window of the chosen records, labelled or not, and
    "calls", the same as WFDB annotations per record, where the beats' times are known. Records
    with no label at all are then predicted, not refused: the report says nothing was scored.

    With `ensemble` (more fine-tuned runs of the same task and codebook; AFIB runs of the same
    window, beats runs of any, each reading its own windows), the outputs of `run` and of every
    `ensemble` run are averaged before a class is taken or a window is called: beats their
    class probabilities, AFIB their window probabilities.

    Beats: each beat's class from the one window whose centre is nearest (`views` 1), or from
    the averaged probabilities of `views` overlapping windows (stride window / views).
    AFIB is scored on non-overlapping windows of the run's window, or of `afib_window`
    beats, each seen inside the run's window of context centred on it (`views` above 1: each
    beat's AFIB logits averaged over that many overlapping windows of context, then pooled over
    the scored window, `block_afib_scores`), and called AFIB where
    its score reaches `afib_threshold` (None: 0.5; refused for a beats run); the report also
    counts windows at every threshold of `metrics.AFIB_THRESHOLDS` (`threshold_counts`), to
    choose one on other data. Beats: `class_offsets` (C,) are added to the log of each beat's
    class probabilities before its class is taken (None: none; refused for an AFIB run); the
    report also counts beats with each class's offset moved over `offsets.CLASS_OFFSETS`
    (`offset_counts`), to choose one on other records. Beats runs with a per-beat network:
    `beat_mlp_share` S (one share, or (C,) one per class) weighs the two parts of each
    beat's logits, 2 (1 - S) x the transformer's own and 2 S x the network's (None: their sum
    as trained, S = 0.5), in every member of `ensemble` alike."""
    from heartlm.model import load_pretrained
    from heartlm.train.data import load_tokens

    info = read_finetune_info(run)
    lineage = read_lineage(run)
    model, _ = load_pretrained(run)
    dev = pick_device(device)
    with token_folder(data_path, run, lineage, ingest_overrides or {}) as folder:
        data = load_tokens(folder)
        times = beat_times(data.meta, Path(folder)) if predictions else None
    _check_same_tokens(lineage, data, data_path)
    refs = [
        RecordRef(index=i, name=str(r.get("name", i)), db=str(r.get("db", "")),
                  n_beats=int(r.get("n_beats", 0)))
        for i, r in enumerate(data.meta.get("records", []))
    ]  # fmt: skip
    chosen, scope = choose_records(refs, all_records, records)
    if not chosen:
        hint = "" if all_records or records else " (MIT-BIH is scored on DS2; see --all-records)"
        raise HeartlmError(f"no records to score (empty test split){hint}", data_path)
    task, window = info["task"], int(info["window"])
    _check_window(window, model, run)
    scored = _afib_window(info, afib_window, model, run)
    views = _views(info, views, model, run)
    members = [(model, window), *(_ensemble_member(other, info, data, afib_window, views)
                                  for other in ensemble or [])]  # fmt: skip
    runs = [run, *(ensemble or [])]  # members' folders, in order
    if task == "beats" and afib_threshold is not None:
        raise HeartlmError("--afib-threshold is for AFIB runs, not a beats run", run)
    afib_threshold = 0.5 if afib_threshold is None else afib_threshold
    if task != "beats" and class_offsets is not None:
        raise HeartlmError("--class-offset is for beats runs, not an AFIB run", run)
    offsets = np.zeros(len(AAMI_CLASSES)) if class_offsets is None else class_offsets
    shares = _mlp_shares(beat_mlp_share, task, members, runs)
    streams = streams_of(data)
    indices = [r.index for r in chosen]
    if scored < window:
        windows = cut_context_windows(streams, indices, window, scored)
    else:
        stride = _beat_stride(window, views) if task == "beats" else window
        windows = cut_windows(streams, indices, window, stride, task)
    common = {"task": task, "data": str(data_path), "scope": scope, "n_records": len(chosen)}
    # Records of two databases can share a name (LUDB has a 101 too): then DB/NAME.
    repeated = len({r.name for r in refs}) < len(refs)
    names = _numbered([r.key for r in refs] if repeated else list(data.records))
    dbs = [str(r.get("db") or "") for r in data.meta.get("records", [])] or [""] * len(names)
    files = file_paths(data.records, dbs) if times is not None else []  # annotation files
    if task == "beats":
        predict = averaged_beat_outputs if views > 1 else beat_probabilities
        cut = {window: windows}
        for _, size in members:
            if size not in cut:
                cut[size] = cut_windows(streams, indices, size, _beat_stride(size, views), task)
        outputs = [predict(m, cut[size], batch, dev, mlp_share=shares)
                   for m, size in members]  # fmt: skip
        beat = outputs[0][0]
        prob = _aligned_mean(outputs, runs)
        classes = offset_classes(prob, offsets)
        table: dict[str, Any] = {}
        if predictions:
            table["predictions"] = calls.beat_table(beat, prob, classes, data, names, dbs, times)
            if times is not None:
                table["calls"] = calls.beat_calls(beat, classes, data, names, files, times)
        reference = np.asarray(data.aami)[beat].astype(np.int64)
        labelled = reference >= 0
        if not labelled.any():
            if predictions:
                return _unscored(common, "AAMI beat labels", len(beat), table)
            raise HeartlmError("the scored records have no AAMI beat labels (--out writes the "
                               "model's calls to predictions.csv)", data_path)  # fmt: skip
        ref, prob, pred = reference[labelled], prob[labelled], classes[labelled]
        record = np.searchsorted(data.boundaries, beat[labelled], side="right") - 1
        windows_of = [size for _, size in members]
        mixed = {"ensemble_windows": windows_of} if len(set(windows_of)) > 1 else {}
        report = {**common, "views": views, **_ensemble_note(ensemble), **mixed,
                  **metrics.beat_report(ref, pred)}  # fmt: skip
        if np.any(offsets):
            report["class_offsets"] = named_offsets(offsets)
        if shares is not None:
            report["beat_mlp_share"] = named_shares(shares)
        report["offset_counts"] = offset_counts(ref, prob, offsets)
        report["per_record"] = metrics.per_record_beats(ref, pred, record, names, sorted(indices))
        return {"report": report, "labels": ref, "scores": pred, **table}
    # the beats each scored window is about: its block inside the context, else all of it
    pooled = windows.scored & ~windows.pad if scored < window else ~windows.pad
    if views > 1:
        # Each beat's AFIB logits averaged over `views` overlapping windows of context, then
        # pooled over each scored block as one window's would be.
        overlapping = cut_windows(streams, indices, window, max(1, window // views), task)

        def window_scores(m: Any) -> np.ndarray:
            beat, logits = averaged_beat_outputs(
                m, overlapping, batch, dev, head="window_beats", probabilities=False
            )
            return block_afib_scores(windows, pooled, beat, logits)
    else:

        def window_scores(m: Any) -> np.ndarray:
            return afib_scores(m, windows, batch, dev, scored_block=scored < window)

    scores = np.mean([window_scores(m) for m, _ in members], axis=0)
    beats = pooled.sum(axis=1)
    callable_ = callable_windows(beats, scored)
    has_label = windows.window_label != IGNORE
    labelled = has_label & callable_
    table: dict[str, Any] = {}
    if predictions:
        called = np.where(callable_, scores >= afib_threshold, -1)
        table["predictions"] = calls.window_table(windows, pooled, scores, called, data, names,
                                                  dbs, times)  # fmt: skip
        if times is not None:
            table["calls"] = calls.rhythm_calls(windows, pooled, called, names, files, times)
        if not has_label.any():
            return _unscored(common, "rhythm labels", int(callable_.sum()), table)
    if not labelled.any():
        problem = ("have no rhythm labels (no AFIB/non-AFIB windows; --out writes the model's "
                   "calls to predictions.csv)")  # fmt: skip
        if has_label.any():
            problem = f"are too short for an AFIB call (each under {AFIB_MIN_BEATS} beats)"
        raise HeartlmError(f"the scored records {problem}", data_path)
    labels = windows.window_label[labelled]
    binary = metrics.binary_scores(labels, scores[labelled], afib_threshold)
    report = {
        **common,
        "afib": {k: binary[k] for k in ("f1", "se", "ppv", "auroc")},
        "accuracy": (binary["tp"] + binary["tn"]) / int(labelled.sum()),
        "n_windows": int(labelled.sum()),
        "n_afib_windows": int(labels.sum()),
        "n_short_windows": int((labelled & (beats < scored)).sum()),
        "n_too_short": int((has_label & ~callable_).sum()),
        "min_beats": AFIB_MIN_BEATS,
        "window": scored,
        "context": window,
        "views": views,
        **_ensemble_note(ensemble),
        "rule": AFIB_RULE,
        "counts": {k: binary[k] for k in ("tp", "fp", "fn", "tn")},
        "threshold": afib_threshold,
        "threshold_counts": metrics.threshold_counts(labels, scores[labelled]),
    }
    called = scores[labelled] >= afib_threshold
    record = windows.record[labelled]
    report["afib_episodes"] = metrics.afib_episode_scores(labels, called, record)
    report["per_record"] = metrics.per_record_afib(labels, called, record, names, sorted(indices))
    for row, r in zip(report["per_record"], sorted(indices), strict=True):
        n = int(data.boundaries[r + 1] - data.boundaries[r])
        if row["n_windows"] == 0 and n > 0 and not callable_windows(n, scored):
            row["note"] = f"{n} beats: too few to call (an AFIB call needs {AFIB_MIN_BEATS})"
    return {"report": report, "labels": labels, "scores": scores[labelled], **table}


def _unscored(
    common: dict[str, Any], missing: str, n: int, table: dict[str, Any]
) -> dict[str, Any]:
    """The result for records without a label: predicted, nothing scored."""
    unit = "beats" if common["task"] == "beats" else "windows"
    report = {**common, "n_predicted": n,
              "note": f"no {missing} in the scored records: nothing scored; the model's calls "
                      f"on {n} {unit} are in predictions.csv"}  # fmt: skip
    return {"report": report, "labels": None, "scores": None, **table}


def _numbered(names: list[str]) -> list[str]:
    """`names`, each repeated one numbered from its second time on (`a/s1`, `a/s1 #2`): two
    folders of one name may each hold a record of one name."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name} #{seen[name]}")
    return out
