"""`heartlm pretrain TOKENS --out RUN`: pretrain the Heart Language Model on token shards."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heartlm.errors import HeartlmError
from heartlm.inputs import INPUTS
from heartlm.log import logger
from heartlm.model.config import (
    FEATURE_EMBEDDINGS,
    MAX_BEAT_MLP_BINS,
    MAX_BEAT_MLP_DEPTH,
    PRESETS,
    check_dropout,
)
from heartlm.settings import field_defaults, setting
from heartlm.train.config import LaunchConfig, TrainConfig

MODEL = "model and objective"
EXPORTS = ("last", "best")
FEATURE_TARGETS = ("shape", "all")
OBJECTIVES = ("masked", "next", "forecast", "contrastive")
CAUSAL_OBJECTIVES = ("next", "forecast", "contrastive")
BEAT_CODE_WEIGHT = 1.0
"""`--beat-mlp`: the weight of the per-beat network's code loss beside the objective's (the
code's cross-entropy of both is about the same size, 2-4 nats on the study's corpora)"""
VAL_RISE = 0.10
"""A validation loss this far (relative) above its lowest at the end of a run exported with
`--export last` is reported: the encoder is fitting its training records (the model
study's runs rose by 23-31 % after step 400-500, benchmarks/README.md round 15)."""


@dataclass
class PretrainConfig:
    tokens: Path | None = setting(positional=True, required=True, metavar="TOKENS")
    """token folder written by `heartlm tokenize`"""
    out: Path | None = setting(required=True, metavar="RUN")
    """run folder to write"""
    overwrite: bool = False
    """replace a run already in --out"""
    preset: str = setting("small", choices=PRESETS, group=MODEL)
    """model size"""
    objective: str = setting("masked", choices=OBJECTIVES, group=MODEL)
    """masked: masked-beat modelling (bidirectional); next: next-beat prediction (causal);
    forecast: next-beat prediction of the code and of the next beat's features (causal);
    contrastive: forecast's inputs, and a learnt critic that picks the real next beat out of
    the window's later beats (contrastive predictive coding, causal)"""
    window: int = setting(128, group=MODEL)
    """beats per window"""
    stride: int | None = setting(None, group=MODEL)
    """beats between windows (default: --window)"""
    mask_prob: float = setting(0.15, group=MODEL)
    """share of beats masked"""
    mask_mode: str = setting("bert", choices=("bert", "mask"), group=MODEL)
    """bert: 80/10/10 MASK/random/kept; mask: all MASK"""
    mask_span: int = setting(1, group=MODEL)
    """masked objective: beats are masked in aligned runs of this many (1: one by one); a
    run hides a beat's neighbours too, so its RR cannot be read off theirs"""
    label_smoothing: float = setting(0.0, group=MODEL)
    """label smoothing of the code's cross-entropy"""
    feature_weight: float = setting(1.0, group=MODEL)
    """masked, forecast and contrastive objectives: weight of predicting the masked
    (forecast, contrastive: the next) beats' features (those of --feature-target; mean squared
    error in standardised units, contrastive: the cross-entropy of picking the next beat)
    beside the code's cross-entropy; 0 = off"""
    feature_target: str = setting("shape", choices=FEATURE_TARGETS, group=MODEL)
    """masked, forecast and contrastive objectives: the feature columns predicted (contrastive:
    those the critic's key reads): shape (the morphology columns) or all (every column, RR
    and P wave included; masked: a replaced beat hides them and its rhythm token becomes
    MASK too)"""
    code_weight: float = setting(1.0, group=MODEL)
    """masked, forecast and contrastive objectives: weight of the code's cross-entropy beside
    the features; 0 = only the features are predicted (the codes are partly patient-specific)"""
    feature_embedding: str = setting("linear", choices=FEATURE_EMBEDDINGS, group=MODEL)
    """how the beat features enter the model: linear (one projection) or periodic (learnt
    cosines and sines per feature, then a small layer of its own: PLR embeddings)"""
    dropout: float = setting(0.0, metavar="P", group=MODEL)
    """the model's dropout (embeddings, attention and residual branches) while pretraining:
    against fitting a small corpus; fine-tuning keeps it unless given its own --dropout"""
    inputs: str = setting("all", choices=INPUTS, group=MODEL)
    """the beat inputs the model reads, as `heartlm finetune --inputs`: pretraining on the view
    that fine-tuning will have (relative and rhythm read every code as MASK)"""
    beat_mlp: int = setting(0, metavar="WIDTH", group=MODEL)
    """pretrain the per-beat network of `heartlm finetune --beat-mlp` too, WIDTH wide (0:
    none): beside the objective it learns to name each beat's own morphology code from the
    beat's and its two neighbours' feature columns (never from the transformer), so
    fine-tuning starts it from what it learnt; fine-tuning then keeps its width, depth and
    bin edges"""
    beat_mlp_depth: int = setting(1, metavar="N", group=MODEL)
    """with --beat-mlp: its hidden layers (1-4)"""
    beat_mlp_bins: int = setting(0, metavar="N", group=MODEL)
    """with --beat-mlp: each of its input columns also through a piecewise-linear encoding
    over N (2-256) quantile bins of the training beats (0: off)"""
    beat_mlp_inputs: str | None = setting(None, choices=INPUTS, group=MODEL)
    """with --beat-mlp: the feature columns it reads, as --inputs names them (default:
    --inputs'); the view fine-tuning will give it, e.g. relative while the transformer reads
    all"""
    skip_short: bool = setting(False, group=MODEL)
    """skip records shorter than --window instead of padding them"""
    val_fraction: float = setting(0.1, group=MODEL)
    """share of records held out for validation"""
    export: str = setting("last", choices=EXPORTS, group=MODEL)
    """weights written to model.safetensors: last (the last step's) or best (the validation
    with the lowest loss: the held-out records are other patients, so an encoder fitted to
    its training patients is caught there)"""
    train: TrainConfig = setting(factory=lambda: TrainConfig(steps=1000))
    launch: LaunchConfig = setting(factory=LaunchConfig)

    def inert_settings(self) -> dict[str, str]:
        """The objective settings that do nothing for this objective, each with why (given,
        they are refused; `objective_settings` leaves them out for a resume to compare)."""
        inert = {}
        if self.objective != "masked":
            why = f"--mask-prob and --mask-mode are for --objective masked: {self.objective} "
            inert = dict.fromkeys(("mask_prob", "mask_mode"), why + "hides no beat")
        if self.objective == "next":
            inert["feature_weight"] = ("--feature-weight is for --objective masked or a "
                                       "forecast: next predicts the code alone")  # fmt: skip
        if self.code_weight == 0:
            inert["label_smoothing"] = ("--label-smoothing smooths the code loss, which "
                                        "--code-weight 0 leaves out")  # fmt: skip
        return inert

    def validate(self) -> None:
        """The settings TrainConfig does not check (ValueError naming the flag)."""
        from heartlm.train.objectives import FORECASTS

        self.train.validate()
        self.launch.validate()
        self.train.check_overwrite(self.overwrite)
        if self.window < 1:
            raise ValueError(f"--window must be >= 1, not {self.window}")
        if self.stride is not None and self.stride < 1:
            raise ValueError(f"--stride must be >= 1, not {self.stride}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"--val-fraction must be in [0, 1), not {self.val_fraction}")
        check_dropout(self.dropout)
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"--label-smoothing must be in [0, 1), not {self.label_smoothing}")
        if self.train.head_first > 0:
            raise ValueError("--head-first is for fine-tuning a pretrained encoder")
        if self.feature_weight < 0:
            raise ValueError(f"--feature-weight must be >= 0, not {self.feature_weight}")
        if self.code_weight < 0:
            raise ValueError(f"--code-weight must be >= 0, not {self.code_weight}")
        if self.code_weight == 0 and self.feature_weight == 0:
            raise ValueError("--code-weight 0 with --feature-weight 0: nothing to predict")
        if self.objective == "next" and (
            self.code_weight != 1 or self.feature_target != "shape" or self.mask_span != 1
        ):
            raise ValueError(
                "--code-weight, --feature-target and --mask-span are for --objective masked "
                "or a forecast (--mask-span: masked only)"
            )
        if self.objective in FORECASTS and self.mask_span != 1:
            raise ValueError("--mask-span is for --objective masked")
        inert = self.inert_settings()
        for name, default in field_defaults(type(self), inert).items():
            if getattr(self, name) != default:
                raise ValueError(inert[name])
        if self.objective in FORECASTS and self.feature_weight == 0:
            raise ValueError(
                f"--objective {self.objective} predicts features: --feature-weight must be > 0"
            )
        if not 1 <= self.mask_span <= self.window:
            raise ValueError(f"--mask-span must be in [1, --window], not {self.mask_span}")
        if self.export == "best" and self.val_fraction == 0:
            raise ValueError("--export best needs validation records (--val-fraction > 0)")
        if self.train.patience and self.export != "best":
            raise ValueError("--patience stops on the validation loss: it needs --export best")
        self._validate_beat_mlp()

    def _validate_beat_mlp(self) -> None:
        if self.beat_mlp < 0:
            raise ValueError(f"--beat-mlp must be >= 0, not {self.beat_mlp}")
        if not 1 <= self.beat_mlp_depth <= MAX_BEAT_MLP_DEPTH:
            raise ValueError(f"--beat-mlp-depth must be between 1 and {MAX_BEAT_MLP_DEPTH}, "
                             f"not {self.beat_mlp_depth}")  # fmt: skip
        if not (self.beat_mlp_bins == 0 or 2 <= self.beat_mlp_bins <= MAX_BEAT_MLP_BINS):
            raise ValueError(f"--beat-mlp-bins must be 0 or between 2 and {MAX_BEAT_MLP_BINS}, "
                             f"not {self.beat_mlp_bins}")  # fmt: skip
        shaping = [flag for flag, given in (("--beat-mlp-depth", self.beat_mlp_depth != 1),
                                            ("--beat-mlp-bins", self.beat_mlp_bins != 0),
                                            ("--beat-mlp-inputs", self.beat_mlp_inputs))
                   if given]  # fmt: skip
        if shaping and not self.beat_mlp:
            raise ValueError(f"{shaping[0]} shapes the per-beat network: add --beat-mlp WIDTH")


Config = PretrainConfig


def _resolve(cfg: PretrainConfig) -> tuple[Any, Any, Any]:
    """Validate every setting and load the tokens: (data, objective, ModelConfig)."""
    import torch

    from heartlm.inputs import model_inputs
    from heartlm.model import model_config
    from heartlm.train.config import resolve_batch
    from heartlm.train.data import load_tokens
    from heartlm.train.launch import is_elastic_restart, world_size
    from heartlm.train.objectives import FORECASTS, make_objective

    cfg.train.require_packages()
    cfg.train.resume = cfg.train.resume or is_elastic_restart()
    try:
        cfg.validate()
    except ValueError as exc:
        raise HeartlmError(str(exc)) from None
    cfg.train.keep_best = cfg.export == "best"  # the engine then exports the best validation's
    _, accum = resolve_batch(cfg.train.batch, cfg.train.micro_batch, world_size(cfg.launch.nproc))
    if cfg.train.backend == "deepspeed":
        from heartlm.train.zero import check_supported

        check_supported(accum, cfg.train.resume)
    data = load_tokens(cfg.tokens)
    try:
        seen = model_inputs(cfg.inputs, data.meta.get("features", []))
    except ValueError as exc:
        raise HeartlmError(str(exc), cfg.tokens / "tokens.json") from None
    columns = data.shape_columns()
    lookahead = _forecast_hidden(cfg, data, seen) if cfg.objective in FORECASTS else None
    network = _beat_mlp_settings(cfg, data, seen["absolute_columns"])
    if columns is not None and cfg.feature_target == "all":
        columns = torch.ones_like(columns)
    try:
        objective = make_objective(
            cfg.objective,
            data.vocab_size,
            mask_prob=cfg.mask_prob,
            mode=cfg.mask_mode,
            label_smoothing=cfg.label_smoothing,
            seed=cfg.train.seed,
            feature_columns=columns,
            feature_weight=cfg.feature_weight,
            code_weight=cfg.code_weight,
            hide_rhythm=cfg.feature_target == "all",
            span=cfg.mask_span,
            beat_code_weight=BEAT_CODE_WEIGHT if cfg.beat_mlp else 0.0,
            **({"lookahead_columns": lookahead} if lookahead is not None else {}),
        )
        mcfg = model_config(
            cfg.preset,
            vocab_size=data.vocab_size,
            rhythm_vocab_size=data.rhythm_vocab_size,
            n_features=data.n_features,
            feature_embedding=cfg.feature_embedding,
            max_len=cfg.window,
            causal=cfg.objective in CAUSAL_OBJECTIVES,
            choice_critic=cfg.objective == "contrastive",
            dropout=cfg.dropout,
            **network,
            **seen,
        )
    except ValueError as exc:
        raise HeartlmError(str(exc)) from None
    lengths = data.record_lengths()
    if lengths.size and cfg.window > lengths.max():
        raise HeartlmError(
            f"--window {cfg.window} is longer than every record (longest: "
            f"{data.records[int(lengths.argmax())]}, {int(lengths.max())} beats)",
            cfg.tokens,
        )
    return data, objective, mcfg


def _beat_mlp_settings(cfg: PretrainConfig, data: Any, seen: tuple[int, ...]) -> dict[str, Any]:
    """The ModelConfig fields of `--beat-mlp` (none without it), beside the columns `seen`
    that --inputs hides from the whole model; HeartlmError where the tokens carry no beat
    features for it to read, or --beat-mlp-inputs would show it more or leave it none. The
    network's hidden columns name every column it must not read, those of `seen` too, so it
    keeps its view when fine-tuning's --inputs shows the transformer more."""
    if not cfg.beat_mlp:
        return {}
    if not data.n_features:
        raise HeartlmError("--beat-mlp reads beat features; these tokens have none (tokenize "
                           "with beat features)", cfg.tokens / "tokens.json")  # fmt: skip
    from heartlm.inputs import hidden_columns

    names = data.meta.get("features", [])
    own = hidden_columns(names, cfg.beat_mlp_inputs or cfg.inputs)
    if shown := sorted(set(seen) - set(own)):
        raise HeartlmError(f"--beat-mlp-inputs {cfg.beat_mlp_inputs} would show the per-beat "
                           f"network columns that --inputs {cfg.inputs} hides from the whole "
                           f"model ({names[shown[0]]}, ...): it can only hide more",
                           cfg.tokens / "tokens.json")  # fmt: skip
    if len(own) == len(names):
        raise HeartlmError(f"--beat-mlp-inputs {cfg.beat_mlp_inputs} with --inputs {cfg.inputs} "
                           "leave the per-beat network no feature column",
                           cfg.tokens / "tokens.json")  # fmt: skip
    return {"beat_mlp": cfg.beat_mlp, "beat_mlp_depth": cfg.beat_mlp_depth,
            "beat_mlp_bins": cfg.beat_mlp_bins, "beat_codes": True,
            "beat_mlp_hidden": tuple(own)}  # fmt: skip


def _forecast_hidden(cfg: PretrainConfig, data: Any, seen: dict[str, Any]) -> Any:
    """The bool mask of the feature columns a forecast (FORECASTS) hides from its input
    (`heartlm.inputs.lookahead_columns`); HeartlmError where the tokens have no features,
    lack the columns it reads, or `--inputs` hides the RR before each beat, its only timing
    input."""
    import torch

    from heartlm.inputs import lookahead_columns

    where = cfg.tokens / "tokens.json"
    if data.shape_columns() is None:
        raise HeartlmError(
            f"--objective {cfg.objective} predicts the next beat's features; these tokens have "
            "none (tokenize with beat features)",
            where,
        )
    names = data.meta.get("features", [])
    if "log_rr_prev" not in names:
        raise HeartlmError(
            f"--objective {cfg.objective} reads log_rr_prev; these tokens lack it", where
        )
    if names.index("log_rr_prev") in seen["absolute_columns"]:
        raise HeartlmError(
            f"--objective {cfg.objective} reads the timing through log_rr_prev only, which "
            f"--inputs {cfg.inputs} hides (use --inputs all)"
        )
    mask = torch.zeros(len(names), dtype=torch.bool)
    mask[lookahead_columns(names)] = True
    return mask


def _expected_meta(cfg: PretrainConfig, data: Any, mcfg: Any) -> dict[str, Any]:
    """What a checkpoint of this run records (the trainer adds the same keys)."""
    return {
        "model": mcfg.to_dict(),
        "window": cfg.window,
        "objective": cfg.objective,
        "objective_settings": objective_settings(cfg),
        "objective_defaults": OBJECTIVE_DEFAULTS,
        "optimizer": cfg.train.optimizer_shape(),
        "codebook_hash": data.meta.get("codebook_hash"),
    }


OBJECTIVE_SETTINGS = ("mask_prob", "mask_mode", "mask_span", "label_smoothing",
                      "feature_weight", "feature_target", "code_weight")  # fmt: skip
"""The settings that define the objective's loss: a resume must keep them, or the best
validation so far would be compared with losses of another objective."""


OBJECTIVE_DEFAULTS = field_defaults(PretrainConfig, OBJECTIVE_SETTINGS)
"""What a checkpoint that does not record one of OBJECTIVE_SETTINGS was trained with."""


def objective_settings(cfg: PretrainConfig) -> dict[str, Any]:
    """`cfg`'s OBJECTIVE_SETTINGS that act on its objective (not its `inert_settings`, so a
    resume of a run that recorded one compares none), by name; a contrastive run also records
    its temperature (`heartlm.train.objectives.CHOICE_TEMPERATURE`), so a resume under another
    is refused."""
    inert = cfg.inert_settings()
    settings = {name: getattr(cfg, name) for name in OBJECTIVE_SETTINGS if name not in inert}
    if cfg.objective == "contrastive":
        from heartlm.train.objectives import CHOICE_TEMPERATURE

        settings["choice_temperature"] = CHOICE_TEMPERATURE
    return settings


def _nothing_to_do(plan: Any, cfg: PretrainConfig, train_d: Any, expected: dict) -> str | None:
    """Why a --resume has nothing to train (the run reached its last step), or None.
    A damaged or incompatible checkpoint is refused here, before anything is written."""
    from heartlm.train import checkpoint as ckpt
    from heartlm.train.data import window_starts

    latest = ckpt.select_checkpoint(plan.checkpoints, quiet=True)
    if latest is None:
        return None
    meta = ckpt.read_meta(latest)
    ckpt.check_compatible(meta, expected, latest)
    started = "best" if "best" in meta else "last"  # the engine's keep_best keeps "best" there
    if started != cfg.export:
        raise HeartlmError(
            f"the run was started with --export {started}; resume it with the same", latest
        )
    n = window_starts(train_d.boundaries, cfg.window, cfg.stride or cfg.window, not cfg.skip_short)
    tcfg = cfg.train
    total = tcfg.total_steps(-(-n[0].size // tcfg.batch))
    target = min(total, tcfg.stop_at or total)
    if tcfg.patience and meta["step"] < target and _stopped_on_patience(plan.work):
        return (
            f"already stopped at step {meta['step']}: no lower validation loss in "
            f"{tcfg.patience} validations (--patience); nothing to do (--patience 0 trains on "
            "to the last step)"
        )
    if meta["step"] < target:
        return None
    if target == total and not (plan.work / "model.safetensors").is_file():
        return None  # the export after the last checkpoint is still to be written
    if target < total:
        return f"already at step {meta['step']} (--stop-at {tcfg.stop_at}): nothing to do"
    return (
        f"already finished at step {meta['step']} (--steps {total}): nothing to do; "
        "raise --steps to train further"
    )


def _stopped_on_patience(run: Path) -> bool:
    """Whether the finished run in `run` ended early on --patience (exported, not stopped by
    a signal)."""
    try:
        result = json.loads((run / "result.json").read_text())
    except (OSError, ValueError):
        return False
    done = result.get("exported") and not result.get("interrupted")
    return bool(done and result.get("stopped_early") and (run / "model.safetensors").is_file())


def run(cfg: PretrainConfig) -> int:
    from heartlm.outdir import check_separate
    from heartlm.train import rundir
    from heartlm.train.data import split_records
    from heartlm.train.launch import maybe_relaunch

    # Every setting, the tokens and the run folder are checked once here, before anything
    # is written and before any relaunch.
    data, objective, mcfg = _resolve(cfg)
    plan = rundir.plan_pretrain(cfg.out, cfg.train.resume, cfg.overwrite)
    check_separate(plan.out, [cfg.tokens])
    splits = split_records(data, cfg.val_fraction, cfg.train.seed)
    if cfg.export == "best":
        _check_validation(cfg, splits[1])
    if cfg.train.resume:
        why = _nothing_to_do(plan, cfg, splits[0], _expected_meta(cfg, data, mcfg))
        if why:
            logger.info("%s: %s", plan.out, why)
            return 0

    def body() -> int:
        code = maybe_relaunch(cfg.launch)
        return _train(cfg, plan, data, splits, objective, mcfg) if code is None else code

    return rundir.run_owned(plan, body)


def _check_validation(cfg: PretrainConfig, val_d: Any) -> None:
    """--export best needs a validation window: without one the engine would export the last
    weights under the name of the best."""
    lengths = val_d.record_lengths()
    if not val_d.records or (cfg.skip_short and not (lengths >= cfg.window).any()):
        raise HeartlmError(
            f"--export best: no validation window (held-out records: {len(val_d.records)}; "
            f"--val-fraction {cfg.val_fraction:g}, --window {cfg.window})",
            cfg.tokens,
        )


def _samplers(cfg: PretrainConfig, splits: Any, device: Any) -> tuple[Any, Any]:
    """Training and validation windows (no validation when none fits --window)."""
    from heartlm.train.data import WindowSampler

    train_d, val_d = splits
    pad, seed = not cfg.skip_short, cfg.train.seed
    train_s = WindowSampler(train_d, cfg.window, cfg.stride, seed, device, pad)
    val_s = None
    if val_d.records:
        try:
            val_s = WindowSampler(val_d, cfg.window, cfg.stride, seed, device, pad)
        except HeartlmError:
            logger.warning("no validation window fits --window %d; skipping validation", cfg.window)
    return train_s, val_s


def _train(
    cfg: PretrainConfig, plan: Any, data: Any, splits: Any, objective: Any, mcfg: Any
) -> int:
    """One process's part of the run (all of it without torchrun)."""
    import torch

    from heartlm.model import HeartLM
    from heartlm.runinfo import write_run_json
    from heartlm.settings import to_dict
    from heartlm.train import stopsignal
    from heartlm.train.callbacks import from_environment
    from heartlm.train.distributed import barrier, collective_errors, init_distributed, shutdown
    from heartlm.train.loop import train

    t0 = time.perf_counter()
    env = init_distributed(cfg.launch.timeout, cfg.launch.device, cfg.train.parallel.nccl_max_ctas)
    ok = False
    try:
        barrier(env)  # the owner (rank 0) has prepared the folder
        train_s, val_s = _samplers(cfg, splits, env.device)
        torch.manual_seed(cfg.train.seed)
        model = HeartLM(mcfg)
        if splits[0].features is not None:  # a resume's checkpoint then restores the same
            model.fit_beat_mlp_bins(splits[0].features, cfg.train.seed)
        info = {
            "vocab_size": data.vocab_size,
            "rhythm_vocab_size": data.rhythm_vocab_size,
            "codebook_hash": data.meta.get("codebook_hash"),
            "tokens": str(cfg.tokens),
            "fs": data.meta.get("fs"),
            "window_samples": data.meta.get("window_samples"),
            "val_records": splits[1].records,
            "objective_settings": objective_settings(cfg),
        }
        counts = {
            "train_records": len(splits[0].records),
            "val_records": len(splits[1].records),
            "train_windows": train_s.n_windows,
            "parameters": model.num_params(),
            "world_size": env.world_size,
        }
        facts = {"model": mcfg, "tokens": str(cfg.tokens)}
        if env.is_main:
            write_run_json(plan.work, "pretrain", to_dict(cfg), counts, extra=facts)
        logger.info(
            "%s preset, %.1f M parameters, %d training windows of %d beats, %d process(es)",
            cfg.preset, model.num_params() / 1e6, train_s.n_windows, cfg.window, env.world_size,
        )  # fmt: skip
        with stopsignal.handling(), collective_errors(env, cfg.launch.timeout):
            result = train(cfg.train, model, objective, train_s, val_s, plan.work, env, info,
                           callbacks=from_environment(), shown_as=plan.out)  # fmt: skip
        if env.is_main:
            timings = {"total": time.perf_counter() - t0, "train": result.elapsed_s}
            write_run_json(plan.work, "pretrain", to_dict(cfg), counts, timings,
                           extra={**facts, "result": result})  # fmt: skip
            _card(plan.work, cfg, splits, result)
            last = cfg.export == "last" and result.exported
            rose = validation_rise(plan.work) if last else None
            if rose:
                logger.warning("%s: %s", plan.out, rose)
        logger.info(
            "step %d: loss %.4f%s",
            result.step,
            result.loss,
            "" if result.val_loss is None else f", val_loss {result.val_loss:.4f}",
        )
        ok = True
    finally:
        if ok:  # after a failure, a process-group teardown could wait on the failed peers
            shutdown(env)
    if result.interrupted:
        logger.info("%s: stopped at step %d; continue with %s", plan.out, result.step,
                    plan.continue_with)  # fmt: skip
        return stopsignal.EXIT_STOPPED
    return 0


def validation_rise(run: Path) -> str | None:
    """A sentence when the run's last validation loss is more than VAL_RISE above its lowest
    one at an earlier step (RUN/metrics.jsonl), else None."""
    from heartlm.train.metrics import read_metrics

    try:
        rows = read_metrics(run)
    except (HeartlmError, OSError) as exc:  # advice only: a finished run stays finished
        logger.debug("%s: no validation check (%s)", run, exc)
        return None
    checks = [(r["step"], r["val_loss"]) for r in rows if isinstance(r.get("val_loss"), float)]
    if len(checks) < 2:
        return None
    best_step, best = min(checks, key=lambda c: c[1])
    last_step, last = checks[-1]
    if best_step == last_step or last <= best * (1 + VAL_RISE):
        return None
    return (
        f"validation loss was lowest at step {best_step} ({best:.4g}) and is {last:.4g} at "
        f"step {last_step}: the exported last weights may be fitted to the training records; "
        "--export best exports the best validation's weights"
    )


def _card(run: Path, cfg: PretrainConfig, splits: Any, result: Any) -> None:
    """The model card of an exported run (README.md beside model.safetensors)."""
    from heartlm.modelcard import write_model_card

    if not (run / "model.safetensors").is_file():
        return
    validation = {} if result.val_loss is None else {"val_loss": result.val_loss}
    write_model_card(
        run,
        kind="pretrained",
        data={"tokens": str(cfg.tokens), "train_records": list(splits[0].records),
              "val_records": list(splits[1].records)},
        training={"objective": cfg.objective, "window": cfg.window, "steps": result.step,
                  "batch": cfg.train.batch},
        validation=validation,
    )  # fmt: skip
