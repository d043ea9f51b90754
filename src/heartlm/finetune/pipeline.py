"""`finetune(cfg, out)`: a pretrained encoder plus a beat or window head, trained on labelled
records.

Composes the shared engine (`heartlm.train.loop.train`) with the objectives of this package.
Model selection: validation runs every `val_every` steps (default: once per epoch) on
held-out training records, and the engine's `keep_best` exports the weights of the best
validation: the highest validation F1 (`--select f1`, the default; `selection.ValidationF1`)
or the lowest class-weighted validation loss (`--select loss`).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from heartlm.ecg.labels import AAMI_CLASSES
from heartlm.errors import HeartlmError
from heartlm.finetune.cli import FinetuneConfig
from heartlm.finetune.objectives import AfibWindows, BeatClasses, keep_table
from heartlm.labelled import windows
from heartlm.labelled.lineage import FINETUNE_INFO, check_codebook, copy_lineage
from heartlm.labelled.splits import RecordRef, Split, split_records
from heartlm.log import logger
from heartlm.outdir import atomic_write_text, check_writable, partial_dir, swap_in
from heartlm.settings import field_defaults

DEFAULT_WINDOW = {"beats": 128, "afib": 32}


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
            has = bool(((codes != windows.UNKNOWN_RHYTHM) & (codes >= 0)).any())
            positive = bool((codes == windows.AFIB).any())
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


def build_model(run: Path, data: Any, cfg: FinetuneConfig) -> tuple[Any, int]:
    """The pretrained model (or the same architecture from scratch), bidirectional, and the
    window: --window, or the task's default capped at the model's positions."""
    from heartlm.model import HeartLM, ModelConfig, load_pretrained
    from heartlm.model.load import read_config

    torch.manual_seed(cfg.train.seed)
    overrides: dict[str, Any] = {"causal": False}
    if cfg.dropout is not None:
        overrides["dropout"] = cfg.dropout
    added = (("--local-stats", cfg.local_stats, "local_stats"),
             ("--beat-mlp", cfg.beat_mlp, "beat_mlp"),
             ("--beat-mlp-bins", cfg.beat_mlp_bins, "beat_mlp_bins"),
             ("--beat-mlp-depth", cfg.beat_mlp_depth, "beat_mlp_depth"),
             ("--beat-mlp-context", cfg.beat_mlp_context or None, "beat_mlp_context"))  # fmt: skip
    # depth 1 is a one-layer network's: it adds no weights
    asked = [
        flag for flag, value, field in added if value and (field, value) != ("beat_mlp_depth", 1)
    ]
    pretrained = read_config(run)["model"]
    if asked:  # weights added to the encoder: it must read beat features
        if not pretrained.get("n_features"):
            raise HeartlmError(f"{asked[0]} needs an encoder pretrained with beat features", run)
        positions = pretrained.get("max_len", ModelConfig.max_len)
        if cfg.local_stats and cfg.local_stats > positions:
            raise HeartlmError(f"--local-stats {cfg.local_stats} is wider than the model's "
                               f"{positions} positions", run)  # fmt: skip
        shaping = [
            f for f in asked if f in ("--beat-mlp-bins", "--beat-mlp-depth", "--beat-mlp-context")
        ]
        if shaping and not (cfg.beat_mlp or pretrained.get("beat_mlp")):
            raise HeartlmError(f"has no per-beat network for {shaping[0]}: add --beat-mlp WIDTH",
                               run)  # fmt: skip
        if cfg.beat_mlp_context and pretrained.get("beat_codes"):
            raise HeartlmError(
                "its per-beat network was pretrained to name morphology codes (pretrain "
                "--beat-mlp) and reads no transformer state: --beat-mlp-context needs a network "
                "that fine-tuning adds",
                run,
            )
    overrides.update({field: value for _, value, field in added if value is not None})
    from heartlm.inputs import model_inputs

    try:  # --inputs all too: an encoder pretrained on fewer inputs then reads them all
        overrides.update(model_inputs(cfg.inputs, data.meta.get("features", [])))
    except ValueError as exc:
        raise HeartlmError(str(exc), cfg.data / "tokens.json") from None
    if not cfg.from_scratch:
        _warn_of_inputs_pretraining_hid(run, pretrained, overrides, cfg.inputs)
    if pretrained.get("beat_codes"):  # a pretrained network keeps the view it learnt with
        overrides["beat_mlp_hidden"] = tuple(sorted(
            {*pretrained.get("beat_mlp_hidden", ()), *pretrained.get("absolute_columns", ())}
        ))  # fmt: skip
    check_codebook(cfg.data)
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
    window = cfg.window
    if window is None:
        window = min(DEFAULT_WINDOW[cfg.task], model.cfg.max_len)
    if window > model.cfg.max_len:
        raise HeartlmError(
            f"--window {window} is longer than the model's {model.cfg.max_len} positions", run
        )
    return model, window


def _warn_of_inputs_pretraining_hid(
    run: Path, pretrained: dict[str, Any], overrides: dict[str, Any], inputs: str
) -> None:
    """One line when fine-tuning shows the encoder inputs its pretraining hid (finetune's
    default --inputs all on a run pretrained with --inputs relative): its weights for them
    were never trained. Hiding more than pretraining did is a choice, and says nothing."""
    shown = []
    if pretrained.get("relative_only") and not overrides["relative_only"]:
        shown.append("the morphology codes")
    columns = set(pretrained.get("absolute_columns", ())) - set(overrides["absolute_columns"])
    if columns:
        shown.append(f"{len(columns)} feature columns")
    if shown:
        logger.warning(
            "%s: pretrained without %s; --inputs %s shows them to weights never trained on "
            "them (give --inputs as in pretraining to keep the view it learnt)",
            run,
            " and ".join(shown),
            inputs,
        )


def _class_weights(train_d: Any, cfg: FinetuneConfig, window: int, stride: int) -> np.ndarray:
    if cfg.task == "beats":
        return windows.class_weights(
            np.asarray(train_d.aami),
            len(AAMI_CLASSES),
            cfg.max_class_weight,
            cfg.class_weight_power,
        )
    streams = windows.streams_of(train_d)
    w = windows.cut_windows(streams, range(len(train_d.records)), window, stride, "afib")
    return windows.class_weights(w.window_label, 2, cfg.max_class_weight, cfg.class_weight_power)


@dataclass
class Prepared:
    """What the training of every rank starts from: data, split, model, windows, weights."""

    data: Any
    split: Split
    train_d: Any
    model: Any
    window: int
    stride: int
    weights: np.ndarray


def prepare(cfg: FinetuneConfig) -> Prepared:
    """Load and check the labelled tokens, split the records, build the model."""
    data = load_tokens(cfg.data)
    refs = record_refs(data, cfg.task)
    _check_labels(refs, cfg.task, cfg.data)
    split = split_records(refs, cfg.task, cfg.val_fraction, cfg.train.seed, cfg.records)
    _check_afib(split, cfg.task, cfg.data)
    model, window = build_model(cfg.run, data, cfg)
    if cfg.afib_beat_loss > 0.0 and model.cfg.cls_token:
        why = "--afib-beat-loss needs a model that pools its beats for the window head; "
        raise HeartlmError(why + "this one reads a CLS token", cfg.run)
    if cfg.beat_mlp_loss > 0.0 and not model.cfg.beat_mlp:
        why = "--beat-mlp-loss trains the per-beat network; this model has none (--beat-mlp WIDTH)"
        raise HeartlmError(why, cfg.run)
    if cfg.beat_encoder_loss > 0.0 and not model.cfg.beat_mlp:
        why = (
            "--beat-encoder-loss trains the transformer beside the per-beat network; "
            "this model has none (--beat-mlp WIDTH)"
        )
        raise HeartlmError(why, cfg.run)
    stride = cfg.stride or max(1, window // 2)
    train_d = data.subset([r.index for r in split.train])
    if cfg.task == "beats":
        every = train_d.aami
        _check_kept_databases(cfg, split.train)
        train_d.aami = _label_share(train_d, split.train, cfg, cfg.train.seed)
        _warn_lost_classes(every, train_d.aami, cfg)
        if train_d.features is not None:  # every training beat: the edges need no labels
            model.fit_beat_mlp_bins(train_d.features, cfg.train.seed)
    weights = _class_weights(train_d, cfg, window, stride)
    return Prepared(data, split, train_d, model, window, stride, weights)


def _warn_lost_classes(every: Any, kept: Any, cfg: FinetuneConfig) -> None:
    """One line when --label-fraction kept no label of a class the training records hold:
    the head cannot learn to call it."""

    def counts(aami: Any) -> np.ndarray:
        labels = np.asarray(aami)
        return np.bincount(labels[labels >= 0], minlength=len(AAMI_CLASSES))

    lost = [c for c, n, k in zip(AAMI_CLASSES, counts(every), counts(kept), strict=True)
            if n and not k]  # fmt: skip
    if lost:
        logger.warning(
            "%s: --label-fraction %g kept no label of class %s: the model cannot learn to call it",
            cfg.data,
            cfg.label_fraction,
            ", ".join(lost),
        )


def _label_share(
    part: Any, refs: Sequence[RecordRef], cfg: FinetuneConfig, seed: int
) -> np.ndarray:
    """The beat labels of `part` (the records `refs`, in order) that --label-fraction keeps:
    drawn per recording, so a record's lead copies keep the same beats' labels, and from the
    records of databases outside --keep-labels-of only (theirs are all kept)."""
    return windows.keep_recording_label_fraction(
        part.aami, part.boundaries, [r.recording for r in refs], cfg.label_fraction, seed,
        whole=[r.db in cfg.keep_labels_of for r in refs],
    )  # fmt: skip


def _check_kept_databases(cfg: FinetuneConfig, refs: Sequence[RecordRef]) -> None:
    """--keep-labels-of names only databases the training records come from (a misspelt
    name would leave every label to the fraction without a word)."""
    held = sorted({r.db for r in refs})
    if unknown := [db for db in cfg.keep_labels_of if db not in held]:
        raise HeartlmError(f"--keep-labels-of {','.join(unknown)}: no training record is of "
                           f"that database (they are of {', '.join(held)})", cfg.data)  # fmt: skip


def load_tokens(folder: Path) -> Any:
    from heartlm.train.data import load_tokens as load

    return load(folder)


def _objective(cfg: FinetuneConfig, p: Prepared, train_s: Any) -> Any:
    columns = p.data.shape_columns(absolute_only=True)
    if cfg.task == "beats":
        skip = [AAMI_CLASSES.index(c) for c in cfg.beat_mlp_loss_skip]
        return BeatClasses(p.weights, cfg.morph_dropout, columns, cfg.label_smoothing,
                           mlp_loss=cfg.beat_mlp_loss, mlp_skip=skip,
                           encoder_loss=cfg.beat_encoder_loss)  # fmt: skip
    table = None
    if cfg.label_fraction < 1.0:
        n_positions = cfg.train.total_steps(train_s.steps_per_epoch(cfg.train.batch))
        table = keep_table(train_s, n_positions * cfg.train.batch, cfg.label_fraction,
                           cfg.train.seed)  # fmt: skip
    return AfibWindows(p.weights, cfg.label_fraction, cfg.train.seed, cfg.morph_dropout,
                       keep_by_position=table, shape_columns=columns,
                       beat_loss=cfg.afib_beat_loss,
                       label_smoothing=cfg.label_smoothing)  # fmt: skip


def _validation(cfg: FinetuneConfig, p: Prepared, device: torch.device) -> tuple[Any, list]:
    """The validation windows and, with --select f1, the callback that scores them."""
    from heartlm.finetune.selection import ValidationF1
    from heartlm.train.data import WindowSampler

    if not p.split.val:
        return None, []
    val_d = p.data.subset([r.index for r in p.split.val])
    if cfg.task == "beats":  # only a fraction F of all labels is ever used
        val_d.aami = _label_share(val_d, p.split.val, cfg, cfg.train.seed + 1)
    val_s = WindowSampler(val_d, p.window, p.window, cfg.train.seed, device, pad_short=True)
    scorer = [ValidationF1(val_d, cfg.task, p.window, device)] if cfg.select == "f1" else []
    return val_s, scorer


def finetune(cfg: FinetuneConfig, out: Path) -> dict:
    """Fine-tune `cfg.run` on `cfg.data` into `out` (built in its partial folder, which
    --resume continues); returns what run.json holds (rank 0), or {"interrupted": True}
    when a stop signal or --stop-at ended it after a checkpoint."""
    from heartlm.train import stopsignal
    from heartlm.train.callbacks import from_environment
    from heartlm.train.data import WindowSampler
    from heartlm.train.distributed import barrier, collective_errors, init_distributed, shutdown
    from heartlm.train.loop import train

    t0 = time.perf_counter()
    p = prepare(cfg)
    env = init_distributed(cfg.launch.timeout, cfg.launch.device, cfg.train.parallel.nccl_max_ctas)
    ok = False
    try:
        seed = cfg.train.seed
        train_s = WindowSampler(p.train_d, p.window, p.stride, seed, env.device, pad_short=True)
        objective = _objective(cfg, p, train_s)
        val_s, scorer = _validation(cfg, p, env.device)
        if val_s is not None and not cfg.train.val_every:
            cfg.train.val_every = max(1, train_s.steps_per_epoch(cfg.train.batch))
        stage = partial_dir(out)
        if env.is_main:
            stage.mkdir(parents=True, exist_ok=True)
        barrier(env)
        meta = {"task": cfg.task, "codebook_hash": p.data.meta.get("codebook_hash"),
                "from_scratch": cfg.from_scratch, "label_fraction": cfg.label_fraction,
                "seed": cfg.train.seed,
                "train_records": [r.key for r in p.split.train],
                "val_records": [r.key for r in p.split.val],
                "objective_settings": objective_settings(cfg),
                "objective_defaults": OBJECTIVE_DEFAULTS}  # fmt: skip
        with stopsignal.handling(), collective_errors(env, cfg.launch.timeout):
            result = train(cfg.train, p.model, objective, train_s, val_s, stage, env, meta,
                           callbacks=[*scorer, *from_environment()], shown_as=out)  # fmt: skip
        ok = True
        if not result.exported:  # a stop signal, or --stop-at
            return {"interrupted": result.interrupted, "stopped": True}
        if not env.is_main:
            return {}
        info = _finish(cfg, out, stage, p, result)
        logger.info(f"{out}: fine-tuned ({cfg.task}) in {time.perf_counter() - t0:.1f} s")
        return info
    finally:
        if ok:  # after a failure, a process-group teardown could wait on the failed peers
            shutdown(env)


OBJECTIVE_SETTINGS = ("class_weight_power", "max_class_weight", "label_smoothing",
                      "morph_dropout", "afib_beat_loss", "beat_mlp_loss",
                      "beat_mlp_loss_skip", "beat_encoder_loss", "keep_labels_of")  # fmt: skip
"""The settings that shape fine-tuning's loss: a resume must keep them (`heartlm.train.
checkpoint` compares them), or one model would be trained on two objectives and its
finetune.json would name only the last."""


OBJECTIVE_DEFAULTS = field_defaults(FinetuneConfig, OBJECTIVE_SETTINGS)
"""What a checkpoint that does not record one of OBJECTIVE_SETTINGS was trained with."""


def objective_settings(cfg: FinetuneConfig) -> dict[str, Any]:
    """`cfg`'s OBJECTIVE_SETTINGS that act, by name (not its `inert_settings`, so a resume of
    a run that recorded one compares none)."""
    inert = cfg.inert_settings()
    return {name: getattr(cfg, name) for name in OBJECTIVE_SETTINGS if name not in inert}


def _best(cfg: FinetuneConfig, result: Any) -> dict[str, Any] | None:
    """finetune.json's `best`: the selected validation's step, criterion and scores."""
    if result.best is None:
        return None
    b = result.best
    return {"step": b["step"], "criterion": cfg.train.best_metric, "val_loss": b.get("val_loss"),
            "val_acc": b.get("val_acc"), "val_f1": b.get("val_f1")}  # fmt: skip


def _finish(
    cfg: FinetuneConfig, out: Path, stage: Path, p: Prepared, result: Any
) -> dict[str, Any]:
    """Rank 0: make the folder self-contained, write finetune.json, run.json and the
    model card, rename."""
    from heartlm.modelcard import write_model_card
    from heartlm.runinfo import write_run_json
    from heartlm.settings import to_dict

    lineage = copy_lineage(cfg.data, stage)
    names = AAMI_CLASSES if cfg.task == "beats" else ("not AFIB", "AFIB")
    info = {
        "task": cfg.task,
        "window": p.window,
        "stride": p.stride,
        "pretrained": None if cfg.from_scratch else str(cfg.run),
        "architecture_from": str(cfg.run),
        "from_scratch": cfg.from_scratch,
        "label_fraction": cfg.label_fraction,
        "keep_labels_of": cfg.keep_labels_of,
        "train_records": [r.key for r in p.split.train],
        "val_records": [r.key for r in p.split.val],
        "class_weights": dict(zip(names, np.round(p.weights, 4).tolist(), strict=True)),
        "imbalance": "class-weighted cross-entropy, weights (n/(K*n_c))^"
        f"{cfg.class_weight_power:g} from training labels, clipped at {cfg.max_class_weight:g}",
        "afib_rule": windows.AFIB_RULE if cfg.task == "afib" else None,
        "afib_beat_loss": cfg.afib_beat_loss if cfg.task == "afib" else None,
        "beat_mlp_loss": cfg.beat_mlp_loss if cfg.task == "beats" else None,
        "beat_mlp_loss_skip": cfg.beat_mlp_loss_skip if cfg.task == "beats" else None,
        "beat_encoder_loss": cfg.beat_encoder_loss if cfg.task == "beats" else None,
        "best": _best(cfg, result),
    }
    atomic_write_text(stage / FINETUNE_INFO, json.dumps(info, indent=2) + "\n")
    run_info = write_run_json(
        stage, "finetune", to_dict(cfg),
        counts={"train_records": len(p.split.train), "val_records": len(p.split.val)},
        extra={"run": str(cfg.run), "tokens": str(cfg.data), "lineage": lineage,
               "finetune": info, "train": asdict(result)},
    )  # fmt: skip
    write_model_card(
        stage, kind=f"fine-tuned ({cfg.task})",
        data={"tokens": str(cfg.data), "pretrained run": info["pretrained"],
              "train_records": info["train_records"], "val_records": info["val_records"]},
        training={"task": cfg.task, "window": p.window, "steps": result.step,
                  "batch": cfg.train.batch, "label_fraction": cfg.label_fraction,
                  "selected": cfg.train.best_metric},
        validation=info["best"] or {},
    )  # fmt: skip
    check_writable(out, cfg.overwrite)
    swap_in(stage, out)
    # Only now, with the run in place: a run that fails before can be continued (--resume).
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    return run_info
