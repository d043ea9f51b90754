"""`finetune(...)`: a pretrained encoder plus a beat or window head, trained on labelled records.

Composes the shared engine (`heartlm.train.loop.train`) with the objectives of this package.
Early stopping: validation runs every `val_every` steps on held-out training records, a
checkpoint is kept at each validation, and the exported model is the one with the lowest
validation loss (the loop exports the last; `_export_best` replaces it).
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from heartlm.ecg.labels import AAMI_CLASSES
from heartlm.errors import HeartlmError
from heartlm.finetune import data as fdata
from heartlm.finetune.lineage import FINETUNE_INFO, copy_lineage
from heartlm.finetune.objectives import AfibWindows, BeatClasses, keep_table
from heartlm.finetune.splits import RecordRef, Split, split_records
from heartlm.log import logger
from heartlm.outdir import atomic_write_text, check_writable, partial_dir, swap_in

TASKS = ("beats", "afib")
DEFAULT_WINDOW = {"beats": 128, "afib": 32}
SELECT = ("f1", "loss")
INPUTS = ("all", "relative")
MIN_VAL_SUPPORT = 10


@dataclass
class FinetuneConfig:
    task: str = "beats"
    """beats: per-beat AAMI class; afib: per-window AFIB vs not"""
    window: int | None = None
    """beats per window (default 128 for beats, 32 for afib, capped at the model's max_len)"""
    stride: int | None = None
    """training window stride in beats (default window / 2)"""
    label_fraction: float = 1.0
    """keep this seeded fraction of the training labels (beats, or afib windows)"""
    val_fraction: float = 0.2
    """share of training records held out for validation / early stopping"""
    records: list[str] | None = None
    """training records (NAME or DB/NAME); default: MIT-BIH DS1, every labelled record else"""
    from_scratch: bool = False
    """same architecture as RUN, randomly initialised (the baseline)"""
    max_class_weight: float = 20.0
    """clip of the balanced class weights"""
    select: str = "f1"
    """best checkpoint by validation `f1` (beats: macro F1 of the classes with >= 10 validation
    beats; afib: window F1) or by validation `loss` (class-weighted)"""
    class_weight_power: float = 0.5
    """class weights (n / (K n_c)) ** power: 1 balanced, 0.5 square root, 0 none"""
    morph_dropout: float = 0.0
    """training only: share of beats whose morphology token is replaced by MASK"""
    dropout: float | None = None
    """the model's dropout while fine-tuning (default: the pretrained run's)"""
    inputs: str = "all"
    """all: codes and every feature; relative: only the patient-relative features and rhythm
    (codes read as MASK, absolute shape columns as zero), in training and at evaluation"""
    seed: int = 0
    device: str | None = None
    """cuda or cpu (default: cuda when available)"""
    overwrite: bool = False
    timeout_s: float = 600.0
    """seconds before a stuck rendezvous or collective fails"""

    def validate(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"--task must be one of {', '.join(TASKS)}, not {self.task!r}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"--window must be >= 1, not {self.window}")
        if self.stride is not None and self.stride < 1:
            raise ValueError(f"--stride must be >= 1, not {self.stride}")
        if not 0.0 < self.label_fraction <= 1.0:
            raise ValueError(f"--label-fraction must be in (0, 1], not {self.label_fraction}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"--val-fraction must be in [0, 1), not {self.val_fraction}")
        if self.select not in SELECT:
            raise ValueError(f"--select must be one of {', '.join(SELECT)}, not {self.select!r}")
        if not 0.0 <= self.class_weight_power <= 1.0:
            raise ValueError(
                f"--class-weight-power must be in [0, 1], not {self.class_weight_power}"
            )
        if not 0.0 <= self.morph_dropout < 1.0:
            raise ValueError(f"--morph-dropout must be in [0, 1), not {self.morph_dropout}")
        if self.max_class_weight < 1.0:
            raise ValueError("--max-class-weight must be >= 1")
        if self.inputs not in INPUTS:
            raise ValueError(f"--inputs must be one of {', '.join(INPUTS)}, not {self.inputs!r}")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"--dropout must be in [0, 1), not {self.dropout}")
        if not self.timeout_s > 0:
            raise ValueError(
                f"--timeout must be a positive number of seconds, not {self.timeout_s}"
            )


def record_refs(data: Any, task: str) -> list[RecordRef]:
    """One RecordRef per record of a TokenData, with its label flags for `task`."""
    meta_records = data.meta.get("records", [])
    refs = []
    for i in range(len(data.records)):
        lo, hi = int(data.boundaries[i]), int(data.boundaries[i + 1])
        info = meta_records[i] if i < len(meta_records) else {}
        if task == "beats":
            has, positive = bool((data.aami[lo:hi] >= 0).any()), False
        else:
            codes = data.rhythm_label[lo:hi]
            has = bool(((codes != fdata.UNKNOWN_RHYTHM) & (codes >= 0)).any())
            positive = bool((codes == fdata.AFIB).any())
        refs.append(RecordRef(i, data.records[i], str(info.get("db", "")), hi - lo, has, positive))
    return refs


def _check_labels(refs: list[RecordRef], task: str, tokens: Path) -> None:
    if not any(r.has_labels for r in refs):
        what = "AAMI beat labels" if task == "beats" else "rhythm labels (no (AFIB/(N episodes)"
        raise HeartlmError(f"holds no {what}: nothing to fine-tune --task {task} on", tokens)


def _check_afib(split: Split, task: str, tokens: Path) -> None:
    """AFIB windows must exist in training, or the model learns to never say AFIB."""
    if task == "afib" and not any(r.positive for r in split.train):
        raise HeartlmError(
            "its training records hold no (AFIB episode: --task afib would learn only "
            "'not AFIB' (F1 0); add records with atrial fibrillation",
            tokens,
        )


def build_model(run: Path, data: Any, cfg: FinetuneConfig, window: int | None):
    """The pretrained model (or the same architecture from scratch), bidirectional, and the
    window: `window`, or the task's default capped at the model's positions."""
    from heartlm.model import HeartLM, ModelConfig, load_pretrained

    torch.manual_seed(cfg.seed)
    overrides: dict[str, Any] = {"causal": False}
    if cfg.dropout is not None:
        overrides["dropout"] = cfg.dropout
    if cfg.inputs == "relative":
        from heartlm.tokens.features import absolute_columns

        overrides["relative_only"] = True
        overrides["absolute_columns"] = tuple(absolute_columns(data.meta.get("features", [])))
    model, saved = load_pretrained(run, vocab_size=data.vocab_size, **overrides)
    # The tokenizer's content hash identifies a vocabulary; a re-saved codebook file may differ
    # byte for byte and still be the same vocabulary.
    for key in ("codebook_hash",):
        want, got = saved.get(key), data.meta.get(key)
        if want and got and want != got:
            raise HeartlmError(
                "was pretrained on tokens of another codebook than --data's; tokenize the "
                "records with --codebook set to the pretraining token folder",
                run,
            )
    if cfg.from_scratch:
        model = HeartLM(ModelConfig.from_dict(model.cfg.to_dict()))
    if window is None:
        window = min(DEFAULT_WINDOW[cfg.task], model.cfg.max_len)
    if window > model.cfg.max_len:
        raise HeartlmError(
            f"--window {window} is longer than the model's {model.cfg.max_len} positions", run
        )
    return model, window


def _class_weights(train_d: Any, cfg: FinetuneConfig, window: int, stride: int) -> np.ndarray:
    if cfg.task == "beats":
        return fdata.class_weights(
            np.asarray(train_d.aami),
            len(AAMI_CLASSES),
            cfg.max_class_weight,
            cfg.class_weight_power,
        )
    streams = fdata.streams_of(train_d)
    w = fdata.cut_windows(streams, range(len(train_d.records)), window, stride, "afib")
    return fdata.class_weights(w.window_label, 2, cfg.max_class_weight, cfg.class_weight_power)


def finetune(run: Path, tokens: Path, out: Path, cfg: FinetuneConfig, tcfg: Any) -> dict:
    """Fine-tune `run` on `tokens` into `out` (built in its partial folder, which
    `tcfg.resume` continues); returns what run.json holds (rank 0), or {"interrupted":
    True} when a stop signal ended it after a checkpoint."""
    from heartlm.train import stopsignal
    from heartlm.train.data import WindowSampler, load_tokens
    from heartlm.train.distributed import barrier, collective_errors, init_distributed, shutdown
    from heartlm.train.loop import train

    t0 = time.perf_counter()
    cfg.validate()
    data = load_tokens(tokens)
    refs = record_refs(data, cfg.task)
    _check_labels(refs, cfg.task, tokens)
    split = split_records(refs, cfg.task, cfg.val_fraction, cfg.seed, cfg.records)
    _check_afib(split, cfg.task, tokens)
    model, window = build_model(run, data, cfg, cfg.window)
    stride = cfg.stride or max(1, window // 2)
    train_d = data.subset([r.index for r in split.train])
    if cfg.task == "beats":
        train_d.aami = fdata.keep_label_fraction(train_d.aami, cfg.label_fraction, cfg.seed)
    weights = _class_weights(train_d, cfg, window, stride)
    env = init_distributed(cfg.timeout_s, device=cfg.device)
    ok = False
    try:
        train_s = WindowSampler(train_d, window, stride, cfg.seed, env.device, pad_short=True)
        columns = data.shape_columns(absolute_only=True)
        if cfg.task == "beats":
            objective = BeatClasses(weights, cfg.morph_dropout, columns)
        else:
            table = None
            if cfg.label_fraction < 1.0:
                n_positions = _total_steps(tcfg, train_s) * tcfg.batch
                table = keep_table(train_s, n_positions, cfg.label_fraction, cfg.seed)
            objective = AfibWindows(
                weights,
                cfg.label_fraction,
                cfg.seed,
                cfg.morph_dropout,
                keep_by_position=table,
                shape_columns=columns,
            )
        val_s = None
        if split.val:
            val_d = data.subset([r.index for r in split.val])
            if cfg.task == "beats":  # only a fraction F of all labels is ever used
                val_d.aami = fdata.keep_label_fraction(val_d.aami, cfg.label_fraction, cfg.seed + 1)
            val_s = WindowSampler(val_d, window, window, cfg.seed, env.device, pad_short=True)
        if val_s is not None and not tcfg.val_every:
            tcfg.val_every = max(1, train_s.steps_per_epoch(tcfg.batch))
        tcfg.ckpt_every = tcfg.val_every if val_s is not None else 0
        tcfg.keep_ckpts = 0  # all: the best validation is chosen among them at the end
        tcfg.val_batches = None
        stage = partial_dir(out)
        if env.is_main:
            stage.mkdir(parents=True, exist_ok=True)
        barrier(env)
        meta = {
            "task": cfg.task,
            "codebook_hash": data.meta.get("codebook_hash"),
            "from_scratch": cfg.from_scratch,
        }
        with stopsignal.handling(), collective_errors(env, cfg.timeout_s):
            result = train(tcfg, model, objective, train_s, val_s, stage, env, meta)
        if result.interrupted:
            ok = True
            return {"interrupted": True}
        scorer = None
        if val_s is not None and cfg.select == "f1":
            scorer = _val_scorer(val_d, cfg.task, window, env.device)
        best = _export_best(stage, model, env, tcfg, scorer) if val_s is not None else None
        ok = True
        if not env.is_main:
            return {}
        info = _finish(run, tokens, out, stage, cfg, tcfg, split, weights, window, stride, best)
        info["train"] = asdict(result)
        logger.info(f"{out}: fine-tuned ({cfg.task}) in {time.perf_counter() - t0:.1f} s")
        return info
    finally:
        if ok:  # after a failure, a process-group teardown could wait on the failed peers
            shutdown(env)


def _total_steps(tcfg: Any, sampler: Any) -> int:
    if tcfg.steps is not None:
        return int(tcfg.steps)
    return int(np.ceil(tcfg.epochs * sampler.steps_per_epoch(tcfg.batch)))


def _val_scorer(val_d: Any, task: str, window: int, device: Any) -> Any:
    """A function model -> validation score (higher is better) on the validation records,
    computed the way `heartlm evaluate` scores: beats, the macro F1 over the classes with at
    least MIN_VAL_SUPPORT labelled validation beats (each beat scored once, from the window
    whose centre is nearest); afib, the F1 of non-overlapping windows at probability 0.5."""
    from heartlm.evaluate.predict import afib_scores, beat_predictions

    streams = fdata.streams_of(val_d)
    records = range(len(val_d.records))
    if task == "beats":
        windows = fdata.cut_windows(streams, records, window, max(1, window // 2), task)
        reference = np.asarray(val_d.aami).astype(np.int64)
        support = np.bincount(reference[reference >= 0], minlength=len(AAMI_CLASSES))
        classes = np.flatnonzero(support >= MIN_VAL_SUPPORT)

        def score(model: Any) -> float:
            beat, pred = beat_predictions(model, windows, 64, device)
            ref = reference[beat]
            keep = ref >= 0
            ref, pred = ref[keep], pred[keep]
            f1 = [_f1(ref == c, pred == c) for c in classes]
            return float(np.mean(f1)) if f1 else 0.0

        return score
    windows = fdata.cut_windows(streams, records, window, window, task)
    labelled = windows.window_label >= 0

    def score_afib(model: Any) -> float:
        p = afib_scores(model, windows, 64, device)[labelled] >= 0.5
        return _f1(windows.window_label[labelled] == 1, p)

    return score_afib


def _f1(truth: np.ndarray, pred: np.ndarray) -> float:
    tp = int(np.sum(truth & pred))
    denom = int(truth.sum() + pred.sum())
    return 2.0 * tp / denom if denom else 0.0


def _export_best(
    stage: Path, model: Any, env: Any, tcfg: Any, scorer: Any = None
) -> dict[str, Any] | None:
    """Replace the exported weights by those of the best validation step: the highest
    `scorer(model)` (validation F1), or without a scorer the lowest validation loss."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from heartlm.model.load import export_model, read_config
    from heartlm.train import checkpoint as ckpt
    from heartlm.train.optim import build_adamw

    vals = [
        json.loads(line)
        for line in (stage / "metrics.jsonl").read_text().splitlines()
        if '"val_loss"' in line
    ]
    if not vals:
        return None
    path = ckpt.list_checkpoints(stage / "checkpoints")
    # Same parameter groups as training, so the checkpoints' optimizer state fits.
    optimizer = build_adamw(
        model, 1e-4, 0.0, (0.9, 0.95), fused=False, layer_decay=tcfg.layer_decay,
        n_layers=model.cfg.n_layers,
    )  # fmt: skip

    def checkpoint(step: int) -> Path:
        chosen = next((p for p in path if p.name == f"step_{step:08d}"), None)
        if chosen is None:
            raise HeartlmError(f"checkpoint of the validation step {step} is missing", stage)
        return chosen

    if scorer is None:
        best = min(vals, key=lambda r: (r["val_loss"], -r["step"]))
    else:
        for r in vals:
            ckpt.load_checkpoint(checkpoint(r["step"]), model, optimizer, restore_rng=False)
            r["val_f1"] = scorer(model)
        # Ties go to the later step (more training at the same validation score).
        best = max(vals, key=lambda r: (r["val_f1"], r["step"]))
        logger.info(
            "validation F1 by step: " + ", ".join(f"{r['step']}: {r['val_f1']:.3f}" for r in vals)
        )
    ckpt.load_checkpoint(checkpoint(best["step"]), model, optimizer, restore_rng=False)
    state = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if env.is_main:
        config = read_config(stage)
        info = {k: v for k, v in config.items() if k not in ("format", "version", "model")}
        export_model(stage, state, model.cfg, {**info, "best_step": best["step"]})
    return {
        "step": best["step"],
        "criterion": "val_f1" if scorer is not None else "val_loss",
        "val_loss": best["val_loss"],
        "val_acc": best.get("val_acc"),
        "val_f1": best.get("val_f1"),
    }


def _finish(
    run: Path,
    tokens: Path,
    out: Path,
    stage: Path,
    cfg: FinetuneConfig,
    tcfg: Any,
    split: Split,
    weights: np.ndarray,
    window: int,
    stride: int,
    best: dict[str, Any] | None,
) -> dict[str, Any]:
    """Rank 0: make the folder self-contained, write finetune.json and run.json, rename."""
    from heartlm.runinfo import write_run_json

    shutil.rmtree(stage / "checkpoints", ignore_errors=True)
    lineage = copy_lineage(tokens, stage)
    names = AAMI_CLASSES if cfg.task == "beats" else ("not AFIB", "AFIB")
    info = {
        "task": cfg.task,
        "window": window,
        "stride": stride,
        "pretrained": None if cfg.from_scratch else str(run),
        "architecture_from": str(run),
        "from_scratch": cfg.from_scratch,
        "label_fraction": cfg.label_fraction,
        "train_records": [r.key for r in split.train],
        "val_records": [r.key for r in split.val],
        "class_weights": dict(zip(names, np.round(weights, 4).tolist(), strict=True)),
        "imbalance": "class-weighted cross-entropy, weights (n/(K*n_c))^"
        f"{cfg.class_weight_power:g} from training labels, clipped at {cfg.max_class_weight:g}",
        "afib_rule": fdata.AFIB_RULE if cfg.task == "afib" else None,
        "best": best,
    }
    atomic_write_text(stage / FINETUNE_INFO, json.dumps(info, indent=2) + "\n")
    run_info = write_run_json(
        stage,
        "finetune",
        {"finetune": asdict(cfg), "train": asdict(tcfg)},
        counts={"train_records": len(split.train), "val_records": len(split.val)},
        extra={"run": str(run), "tokens": str(tokens), "lineage": lineage, "finetune": info},
    )
    check_writable(out, cfg.overwrite)
    swap_in(stage, out)
    return run_info
