"""The model study's heartlm commands: the Runner that logs them, the `prepare` stage's token
folders and the `pretrain` stage's runs."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import model_configs as cfg
from model_ledger import scored_rounds
from model_recipes import (
    afib_recipe_flags,
    beat_data,
    best_afib,
    best_of_each_init,
    best_pair,
    config_of,
    ectopy_folders,
    pair_members,
    pair_recipe_flags,
    pretrain_variant,
    pretraining_run,
    recipe_flags,
    train_synthetic,
)

import heartlm
from heartlm.ecg.labels import MITDB_DS1, MITDB_PACED
from heartlm.outdir import partial_dir
from heartlm.tokens.codebook import VERSION as CODEBOOK_VERSION
from heartlm.train.rundir import checkpointed

EVALUATIONS = ".evaluations"
"""The work folder's cache of `evaluate` answers, kept per run (Runner.evaluate)."""

ANSWERED = "answered"
"""Marks a run's answers as all those the job that trained it asked (Runner.parallel)."""


@functools.cache
def heartlm_digest() -> str:
    """Digest of the heartlm source that answers `evaluate`: an answer kept from other code
    (a work folder reused after a change, RESUME from another commit) is asked again."""
    root = Path(heartlm.__file__).parent
    digest = hashlib.sha1()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _source_digest(script: str) -> str:
    """Digest of one of the benchmarks' own scripts."""
    return hashlib.sha1((Path(__file__).parent / script).read_bytes()).hexdigest()[:12]


def stale_codebook(work: Path) -> str | None:
    """A sentence when `work`'s token folders were made with another codebook format than
    this heartlm writes: the stages would reuse them (and the runs trained on them) and the
    results would claim CODEBOOK_VERSION."""
    meta = work / "tok_pre" / "codebook.json"
    if not meta.is_file():
        return None
    try:
        version = json.loads(meta.read_text()).get("version")
    except (OSError, ValueError, AttributeError) as exc:
        return f"{meta}: unreadable ({exc})"
    if version != CODEBOOK_VERSION:
        return (f"{meta}: codebook format {version}, this heartlm writes {CODEBOOK_VERSION}; "
                "use a fresh --work")  # fmt: skip
    return None


def run_tag(*parts: Any) -> str:
    """Short digest of what a run was trained with (flags, records, label share, heartlm's
    source) for its folder name: a work folder reused after a change never passes an old run
    off as new, nor fails on one whose weights the changed model cannot read."""
    parts = (*parts, f"codebook {CODEBOOK_VERSION}", f"heartlm {heartlm_digest()}")
    if cfg.KEEP_SYNTHETIC_LABELS:  # earlier tags stay as they were
        parts = (*parts, "synthetic labels kept")
    text = json.dumps([cfg.PRETRAIN, cfg.BEATS, cfg.AFIB, cfg.TRAIN_SYNTHETIC, *parts], default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:8]


class Runner:
    """Runs heartlm commands in the work folder, logging each with its wall time."""

    def __init__(
        self,
        work: Path,
        device: str,
        jobs: int,
        ecg: Path,
        replicate: bool = False,
        gpus: Sequence[str] = (),
    ) -> None:
        self.work, self.device, self.jobs, self.ecg = work, device, jobs, ecg
        self.replicate = replicate
        """score on DS2 a recipe DS2_LEDGER lists (`unscored`)"""
        self.gpus = list(gpus)
        """the GPUs (CUDA_VISIBLE_DEVICES ids) a command may be given, each command one; none:
        commands see what this process sees"""
        self.busy = dict.fromkeys(self.gpus, 0)
        """commands running on each GPU"""
        self.commands: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.deferred: dict[str, list[Any]] = {}
        """fine-tuning runs an earlier call scored (`finetune`): trained only on a cache miss"""
        self.training: dict[str, threading.Lock] = {}
        """held while a deferred run is trained: whoever evaluates it waits"""
        self.asking: dict[str, threading.Lock] = {}
        """held while a run's evaluation is asked and kept"""
        self.job = threading.local()
        """the runs the current `parallel` job fine-tuned (or deferred), and those it asked"""

    def heartlm(self, *args: Any, capture: bool = False, done: str | None = None) -> str:
        argv = [sys.executable, "-m", "heartlm", *map(str, args)]
        # Logged with the databases' folder as ECG: no machine's paths in committed results.
        shown = "heartlm " + shlex.join(argv[3:]).replace(str(self.ecg), "ECG")
        # A resumed run is the run its first command started: the stamp leaves --resume out.
        made = "heartlm " + shlex.join(a for a in argv[3:] if a != "--resume")
        made = made.replace(str(self.ecg), "ECG")
        stamp = None if done is None else self.work / f".{Path(done).parts[0]}.command"
        if done is not None and (self.work / done).exists():
            made_by = stamp.read_text() if stamp.is_file() else made  # older folders: trusted
            if made_by != made:
                raise SystemExit(f"{self.work / done}: made by `{made_by}`, not `{made}`; "
                                 "use a fresh --work or remove it")  # fmt: skip
            return ""
        print(f"$ {shown}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        with self._least_busy_gpu() as visible:
            env = {**os.environ, "HEARTLM_PROGRESS": "0", **visible}
            result = subprocess.run(
                argv, cwd=self.work, text=True, env=env, stdout=subprocess.PIPE if capture else None
            )
        with self.lock:
            self.commands.append({"command": shown, "seconds": round(time.perf_counter() - t0, 1)})
        if result.returncode != 0:
            raise SystemExit(f"failed ({result.returncode}): {shown}")
        if stamp is not None:
            stamp.write_text(made)
        return result.stdout or ""

    @contextlib.contextmanager
    def _least_busy_gpu(self) -> Iterator[dict[str, str]]:
        """The environment that puts one command on the GPU running the fewest of this
        runner's commands, held as busy until the command ends; none with fewer than two."""
        if len(self.gpus) < 2:
            yield {}
            return
        with self.lock:
            gpu = min(self.gpus, key=self.busy.__getitem__)
            self.busy[gpu] += 1
        try:
            yield {"CUDA_VISIBLE_DEVICES": gpu}
        finally:
            with self.lock:
                self.busy[gpu] -= 1

    def finetune(self, name: str, task: str, data: str, *extra: Any, pre: str = "pre") -> None:
        """Train run `name`, unless it is there already. A run this work folder lacks but whose
        answers an earlier call left (`evaluations`, carried with RESUME), all of those its
        job asked, is not trained until an evaluation it has no answer for is asked: a call
        cut off by its time limit is continued on a fresh machine without training again
        what it scored."""
        flags = cfg.BEATS if task == "beats" else cfg.AFIB
        argv = ["finetune", pre, "--task", task, "--data", data, "--out", name, *flags, *extra,
                "--device", self.device, "--no-compile"]  # fmt: skip
        if getattr(self.job, "runs", None) is not None:
            self.job.runs.append(name)
        if not (self.work / name).exists() and (self.evaluations(name) / ANSWERED).is_file():
            with self.lock:
                self.deferred[name] = argv
                self.training.setdefault(name, threading.Lock())
            return
        self._train(name, argv)

    def _trained(self, run: str) -> None:
        """Train `run` now if it was deferred; if another thread is training it, wait."""
        with self.lock:
            training = self.training.get(run)
        if training is None:
            return
        with training:
            with self.lock:
                argv = self.deferred.pop(run, None)
            if argv is not None:
                self._train(run, argv)

    def _train(self, name: str, argv: list[Any]) -> None:
        if not (self.work / name).exists():
            # answers of another model of this name would be mixed with the new model's
            shutil.rmtree(self.evaluations(name), ignore_errors=True)
        if checkpointed(partial_dir(self.work / name)):
            argv = [*argv, "--resume"]  # a call cut off mid-run left its checkpoints
        self.heartlm(*argv, done=name)

    def evaluations(self, name: str) -> Path:
        """Where run `name`'s evaluation answers are kept, one JSON file per command."""
        return self.work / EVALUATIONS / name

    def _question(self, name: str, data: str, extra: tuple[Any, ...]) -> tuple[list[str], str]:
        """An evaluation's arguments and the key its answer is kept under."""
        args = ["evaluate", name, data, "--json", "--device", self.device, *map(str, extra)]
        return args, f"{heartlm_digest()} {shlex.join(args)}"

    def evaluate(self, name: str, data: str, *extra: Any) -> dict[str, Any]:
        args, what = self._question(name, data, extra)
        if getattr(self.job, "asked", None) is not None:
            self.job.asked.update([name, *map(str, extra)])  # an --ensemble's runs too

        def ask() -> dict[str, Any]:
            for run in (name, *map(str, extra)):  # an --ensemble's members need weights too
                self._trained(run)
            return json.loads(self.heartlm(*args, capture=True))

        return self._kept(name, what, shlex.join(args), ask)

    def evaluate_trained(self, name: str, data: str, *extra: Any) -> dict[str, Any] | None:
        """`evaluate`, or None where that would train again a run this call deferred (one
        whose answers RESUME carried): the seeds' models together (`--ensemble`), asked after
        the seeds' own jobs, must not replace the models those jobs' answers came from."""
        args, what = self._question(name, data, extra)
        with self.lock:
            waiting = [run for run in (name, *map(str, extra)) if run in self.deferred]
        if waiting and not self._answer(name, what).is_file():
            print(f"not asked (its runs' weights are not in this call: {' '.join(waiting)}): "
                  f"heartlm {shlex.join(args)}", file=sys.stderr)  # fmt: skip
            return None
        return self.evaluate(name, data, *extra)

    def remember(self, name: str, compute: Callable[[], dict[str, Any]], *key: Any) -> dict:
        """`compute()`'s answer (a floor's), kept beside the runs' answers under `name` and
        carried by RESUME as theirs are; `key` says what it was computed from. An answer of
        other heartlm or tree_floor.py source is computed again."""
        what = json.dumps([heartlm_digest(), _source_digest("tree_floor.py"), *key], default=str)
        return self._kept(name, what, what, compute)

    def _kept(
        self, name: str, what: str, command: str, compute: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """The answer kept under `name` for `what` (a digest names its file), computed and
        kept whole (staged, then renamed: a call's limit may stop it anywhere) if there is
        none; one computation per run at a time."""
        answer = self._answer(name, what)
        with self.lock:
            asking = self.asking.setdefault(name, threading.Lock())
        with asking:
            if not answer.is_file():
                report = compute()
                answer.parent.mkdir(parents=True, exist_ok=True)
                staged = answer.with_suffix(".partial")
                staged.write_text(json.dumps({"command": command, "report": report}))
                staged.replace(answer)
            return json.loads(answer.read_text())["report"]

    def _answer(self, name: str, what: str) -> Path:
        """The file the answer kept under `name` for `what` is in."""
        return self.evaluations(name) / f"{hashlib.sha1(what.encode()).hexdigest()[:16]}.json"

    def parallel(self, jobs: list[Any]) -> list[Any]:
        def run(job: Callable[[], Any]) -> Any:
            self.job.runs, self.job.asked = [], set()
            result = job()
            # every answer the job asked of a run it trained is kept: RESUME may skip the run
            # (an --ensemble's member too, whose answers are kept under the first run)
            for name in (n for n in self.job.runs if n in self.job.asked):
                kept = self.evaluations(name)
                kept.mkdir(parents=True, exist_ok=True)
                if (self.work / name / "finetune.json").is_file():  # its split, for the record
                    shutil.copy2(self.work / name / "finetune.json", kept / "finetune.json")
                (kept / ANSWERED).touch()
            return result

        with ThreadPoolExecutor(self.jobs) as pool:
            return list(pool.map(run, jobs))


def visible_gpus(device: str) -> list[str]:
    """The ids of the GPUs this process may use (CUDA_VISIBLE_DEVICES's, else 0..n-1) when
    `device` lets heartlm choose one (auto, cuda); none for the CPU or a numbered GPU, which
    every command then gets as given."""
    if device not in ("auto", "cuda"):
        return []
    import torch

    count = torch.cuda.device_count()
    listed = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    listed = [g for g in listed if g]
    return listed[:count] if listed else [str(i) for i in range(count)]


def prepare(r: Runner, ecg: Path, synth_records: int) -> None:
    """The token folders every stage reads, in four waves of commands that do not depend on
    each other (`r.jobs` at a time): the records (synthetic ones, and the lead copies), their
    stores, the codebook (`tok_pre`), and every other folder tokenized with it."""
    mitdb, nstdb, ludb = ecg / "mitdb", ecg / "nstdb", ecg / "ludb"
    real = [*(mitdb / n for n in MITDB_DS1 + MITDB_PACED), ludb]
    corpora = _extra_corpora()
    scale = cfg.SCALE
    records: list[tuple[Any, ...]] = [
        ("synth", "--records", synth_records, "--minutes", 30, "--fs", 360, "--seed", 0),
        *((folder, "--records", 20, "--minutes", 10, "--fs", 360, "--seed", seed, *flags)
          for folder, (seed, flags) in cfg.PATIENTS.items()),
    ]  # fmt: skip
    if "tok_pre_scale" in corpora:
        records.append((scale["folder"], "--records", scale["records"], "--minutes",
                        scale["minutes"], "--fs", 360, "--seed", scale["seed"],
                        *scale["flags"]))  # fmt: skip
    copies: list[str] = []

    def lead_copies() -> None:
        if {"tok_pre_leads", cfg.BEATS_LEADS, *ectopy_folders()} & corpora:
            copies.extend(write_lead_copies(r, [*real, nstdb]))

    r.parallel([lead_copies, *(lambda a=a: r.heartlm("synth", *a, done=a[0]) for a in records)])

    pre = [*real, nstdb, "synth", *cfg.TRAIN_SYNTHETIC]
    stores: dict[str, tuple[list[Any], str]] = {  # store: (its sources, its token folder)
        "store_pre": (pre, "tok_pre"),
        "store_mitdb": ([mitdb], "tok_mitdb"),
        "store_beats": ([mitdb, *cfg.TRAIN_SYNTHETIC], "tok_beats"),
        **{f"store_{kind}_test": ([f"synth_{kind}_test"], tokens)
           for kind, tokens in cfg.HELD_OUT.items()},
        "store_sick_stress": (list(cfg.SICK_STRESS), cfg.SICK_STRESS_TOKENS),
        "store_afib": ([*real, "synth", *cfg.TRAIN_SYNTHETIC, *cfg.AFIB_ONLY_SYNTHETIC],
                       "tok_afib"),
    }  # fmt: skip
    if "tok_pre_leads" in corpora:
        stores["store_pre_leads"] = ([*pre, *copies], "tok_pre_leads")
    mitdb_copies = [c for c in copies if Path(c).name.startswith(f"{mitdb.name}_")]
    if cfg.BEATS_LEADS in corpora:
        stores["store_beats_leads"] = ([mitdb, *cfg.TRAIN_SYNTHETIC, *mitdb_copies],
                                       cfg.BEATS_LEADS)  # fmt: skip
    for folder in sorted(ectopy_folders() & corpora):  # the ectopy patients after the copies
        stores[f"store_{folder.removeprefix('tok_')}"] = (
            [mitdb, *train_synthetic(folder), *mitdb_copies, *cfg.AFIB_ONLY_SYNTHETIC],
            folder)  # fmt: skip
    if "tok_pre_scale" in corpora:
        stores["store_pre_scale"] = ([*pre, scale["folder"]], "tok_pre_scale")
    r.parallel([lambda store=store, sources=sources: r.heartlm(
        "ingest", *sources, "--out", store, done=store)
        for store, (sources, _) in stores.items()])  # fmt: skip
    r.heartlm(
        "tokenize", "store_pre", "--out", "tok_pre", "--vocab", 512, "--seed", 0, done="tok_pre"
    )
    # every other folder's codes mean what they mean in tok_pre
    r.parallel([lambda store=store, tokens=tokens: r.heartlm(
        "tokenize", store, "--out", tokens, "--codebook", "tok_pre", done=tokens)
        for store, (_, tokens) in stores.items() if tokens != "tok_pre"])  # fmt: skip


def _extra_corpora() -> set[str]:
    """The PRETRAIN_CORPUS token folders that a recipe of CONFIGS or AFIB_CONFIGS starts from,
    and the beat token folders (BEATS_LEADS, BEATS_ECTOPY, BEATS_SICK's, BEATS_FUSION's) a beat
    recipe trains on."""
    variants = {pretrain_variant(c) for c in [*cfg.CONFIGS, *cfg.AFIB_CONFIGS]}
    beats = {beat_data(c) for c in cfg.CONFIGS} - {"tok_beats"}
    return {cfg.PRETRAIN_CORPUS[v] for v in variants if v in cfg.PRETRAIN_CORPUS} | beats


def write_lead_copies(r: Runner, sources: list[Path]) -> list[str]:
    """LEADS's folders (relative to the work folder), written by `lead_copies.py` unless an
    earlier call finished them."""
    from lead_copies import write_all

    done = r.work / f".{cfg.LEADS}.done"
    if not done.is_file():
        print(f"$ lead_copies.py -> {cfg.LEADS}/", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        write_all(sources, r.work / cfg.LEADS)
        with r.lock:
            r.commands.append({"command": f"lead_copies.py ECG/... --out {cfg.LEADS}",
                               "seconds": round(time.perf_counter() - t0, 1)})  # fmt: skip
        done.touch()
    return sorted(str(p.relative_to(r.work)) for p in (r.work / cfg.LEADS).iterdir() if p.is_dir())


def pretraining_runs(
    stages: list[str], work: Path, replicate: bool = False
) -> list[tuple[str, int]]:
    """(variant, seed) of every pretraining run the fine-tuning stages among `stages` start
    from; with none of them, those some recipe of CONFIGS or AFIB_CONFIGS uses. `final`
    (`final_afib`) after an earlier `select` (`select_afib`; its file in `work`) needs only
    the chosen recipes' runs and those of a pair that beat its members (best_pair), and of
    those only the ones DS2_LEDGER does not stop (all of them with `replicate`)."""

    def to_score(stage: str, chosen: dict[str, str], flags: Callable[[str], list[str]]) -> list:
        return [name for init, name in chosen.items()
                if replicate or not scored_rounds(stage, init, name, flags(name))]  # fmt: skip

    inits = ("pretrained", "scratch")
    beats: list[str] = []
    if "select" in stages:
        beats = list(cfg.CONFIGS)
    elif "final" in stages and cfg.FINAL != "auto":
        beats = [config_of(cfg.FINAL)]
    elif "final" in stages:
        chosen = best_of_each_init(work / "select.json")
        beats = [config_of(name) for name in to_score("final", chosen, recipe_flags)]
        if (pair := best_pair(work / "select.json")) and to_score(
                "final", {"pair": pair}, pair_recipe_flags):  # fmt: skip
            beats += [config for _, config in pair_members(pair)]
    if "offset_probe" in stages:
        beats.append(config_of(cfg.OFFSET_PROBE_RECIPE))
    afib: list[str] = list(cfg.AFIB_CONFIGS) if AFIB_STAGES & set(stages) else []
    if afib and "select_afib" not in stages and (work / "select_afib.json").is_file():
        rows = json.loads((work / "select_afib.json").read_text())["afib"]
        chosen = {init: best_afib(rows, init) for init in inits}
        # crossfit_afib trains both chosen recipes, whatever DS2 has scored
        kept = chosen.values() if "crossfit_afib" in stages else to_score(
            "final_afib", chosen, afib_recipe_flags)  # fmt: skip
        afib = [config_of(name, cfg.AFIB_CONFIGS) for name in kept]
    if not set(stages) & FINETUNING_STAGES:
        beats, afib = list(cfg.CONFIGS), list(cfg.AFIB_CONFIGS)
    variants = {pretrain_variant(c) for c in [*beats, *afib]}
    return sorted((v, s) for v in variants for s in _stage_seeds(stages))


def _stage_seeds(stages: list[str]) -> set[int]:
    """The fine-tuning seeds of the stages among `stages` (each seed starts from its own
    pretraining run): `select` SELECT_SEEDS, `select_afib` seed 0, the final stages SEEDS;
    with none of them, every seed some stage uses."""
    per_stage = {"select": cfg.SELECT_SEEDS, "offset_probe": cfg.SELECT_SEEDS,
                 "final": cfg.SEEDS, "select_afib": (0,),
                 "final_afib": cfg.SEEDS, "crossfit_afib": cfg.SEEDS}  # fmt: skip
    seeds = {seed for stage in stages for seed in per_stage.get(stage, ())}
    return seeds or {*cfg.SEEDS, *cfg.SELECT_SEEDS}


def missing_pretraining(stages: list[str], work: Path, replicate: bool = False) -> list[str]:
    """The pretraining runs that the fine-tuning stages among `stages` start from and that
    `work` lacks, when `stages` leaves `pretrain` out (none when it is in: it makes them)."""
    if "pretrain" in stages or not set(stages) & FINETUNING_STAGES:
        return []
    runs = pretraining_runs(stages, work, replicate)
    names = [pretraining_run(seed, variant) for variant, seed in runs]
    return [n for n in names if not (work / n / "model.safetensors").is_file()]


def pretrain(r: Runner, stages: list[str]) -> dict[str, Any]:
    """Every pretraining run the stages need, side by side; their loss curves."""

    def one(variant: str, seed: int) -> None:
        seeded = ["--seed", seed] if seed else []
        name = pretraining_run(seed, variant)
        corpus = cfg.PRETRAIN_CORPUS.get(variant, "tok_pre")
        # A run that an earlier call's time limit stopped continues from its last checkpoint.
        stopped = (r.work / name).exists() and not (r.work / name / "model.safetensors").exists()
        resume = ["--resume"] if stopped else []
        r.heartlm("pretrain", corpus, "--out", name, *cfg.PRETRAIN, *cfg.PRETRAIN_VARIANTS[variant],
                  *seeded, "--device", r.device, *resume,
                  done=f"{name}/model.safetensors")  # fmt: skip

    runs = pretraining_runs(stages, r.work, r.replicate)
    r.parallel([lambda v=v, s=s: one(v, s) for v, s in runs])
    return {
        "pretraining": {
            pretraining_run(s, v): loss_curve(r.work / pretraining_run(s, v)) for v, s in runs
        }
    }


def loss_curve(run: Path) -> dict[str, Any]:
    """A pretraining run's validations from its metrics.jsonl: the step, the training loss
    logged there and the validation loss (and the per-beat network's code loss where
    `pretrain --beat-mlp` reports one), so an encoder fitted to its training records shows as
    a validation loss that rises while the training loss falls."""
    path = run / "metrics.jsonl"
    text = path.read_text() if path.is_file() else ""  # absent: a run made without one
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    kept = ("step", "loss", "val_loss", "val_beat_code_loss")
    checks = [{k: m[k] for k in kept if k in m} for m in rows if "val_loss" in m]
    result = run / "result.json"  # the engine's choice with --export best (ties: the later)
    best = json.loads(result.read_text()).get("best_step") if result.is_file() else None
    if best is None and checks:
        best = min(checks, key=lambda c: c["val_loss"])["step"]
    return {"validations": checks, "best_step": best, "steps": rows[-1]["step"] if rows else 0}


AFIB_STAGES = {"select_afib", "final_afib", "crossfit_afib"}
FINETUNING_STAGES = {"select", "final", "offset_probe", *AFIB_STAGES}
"""The stages that fine-tune from pretraining runs."""
