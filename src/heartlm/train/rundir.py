"""Where a training command writes, decided before anything is written.

pretrain writes a new run into RUN itself and continues it there with `--resume`. A run
that replaces a folder's contents (`--overwrite`), and every fine-tuning run, is built in
`.NAME.partial` beside it and swapped in only once it has ended, so what was there stays
until the new run is complete. `--resume` (and a torchrun restart) continues the partial
folder where one exists. Only the owner, the process holding the output's lock, creates,
clears or swaps folders; the workers it launches write where it planned.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from heartlm.errors import HeartlmError
from heartlm.lock import held_by_parent
from heartlm.log import logger
from heartlm.outdir import check_writable, claimed, partial_dir, swap_in
from heartlm.runtime import is_main_process
from heartlm.train.stopsignal import EXIT_STOPPED

RUN_MARKERS = ("run.json", "metrics.jsonl", "checkpoints", "model.safetensors")


@dataclass(frozen=True)
class RunPlan:
    out: Path
    """the finished run's folder (absolute)"""
    work: Path
    """where training writes: `out`, or the partial folder that replaces it at the end"""
    resume: bool
    finished: bool = False
    """`out` holds the finished run already: a resume has nothing to do"""
    overwrite: bool = False
    """`--overwrite`: a staged attempt's checkpoints may be cleared to start again"""

    @property
    def continue_with(self) -> str:
        """The flags that continue this run from its checkpoints: a run that was to replace
        `out` (`--overwrite`) continues only with `--overwrite` too."""
        return "--resume --overwrite" if self.overwrite else "--resume"

    @property
    def staged(self) -> bool:
        return self.work != self.out

    @property
    def checkpoints(self) -> Path:
        return self.work / "checkpoints"


def plan_pretrain(out: str | Path, resume: bool, overwrite: bool) -> RunPlan:
    """RUN itself for a new run or `--resume`; the partial folder with `--overwrite`."""
    out = check_writable(out, overwrite=True)
    if not (out.is_dir() and any(out.iterdir())):
        return RunPlan(out, out, resume)
    if overwrite:
        return RunPlan(out, partial_dir(out), resume, overwrite=True)
    if not any((out / m).exists() for m in RUN_MARKERS):
        raise HeartlmError("is not empty and holds no heartlm run (use --overwrite)", out)
    if not resume:
        raise HeartlmError("already holds a run (use --resume to continue it or --overwrite)", out)
    return RunPlan(out, out, resume)


def plan_finetune(out: str | Path, resume: bool, overwrite: bool, marker: str) -> RunPlan:
    """Always the partial folder. A folder holding a finished run (`marker`) with
    `--resume` is a plan with nothing to do, unless a stopped run that was to replace it
    waits in the partial folder (then `--resume --overwrite` continues that one); other
    contents need `--overwrite`."""
    finished = resume and not overwrite and (Path(out) / marker).is_file()
    work = partial_dir(out)
    if finished and checkpointed(work):
        raise HeartlmError(
            f"holds a finished run, and {work.name} a stopped --overwrite run that was to "
            f"replace it: continue that with --resume --overwrite (or remove {work.name})",
            Path(out).absolute(),
        )
    out = check_writable(out, overwrite=overwrite or finished)
    plan = RunPlan(out, work, resume, finished=finished, overwrite=overwrite)
    if not owns(out):  # the owner refuses in `prepare`, under the lock; the other ranks here
        refuse_stopped(plan)
    return plan


def owns(out: Path) -> bool:
    """True in the process that must lock, prepare and finish `out`: rank 0, unless a
    heartlm launcher that holds the lock started this process."""
    return is_main_process() and not held_by_parent(out)


def prepare(plan: RunPlan) -> str:
    """Owner only: make `plan.work` ready (a partial folder of an earlier attempt is
    cleared unless resuming). Returns what it was: "new", "empty" or "used"."""
    if plan.staged and not plan.resume:
        refuse_stopped(plan)
        shutil.rmtree(plan.work, ignore_errors=True)
    before = "new" if not plan.work.exists() else "used" if any(plan.work.iterdir()) else "empty"
    plan.work.mkdir(parents=True, exist_ok=True)
    return before


def refuse_stopped(plan: RunPlan) -> None:
    """A stopped run's checkpoints are never cleared unasked (`--resume` or `--overwrite`)."""
    if not (plan.resume or plan.overwrite) and has_checkpoint(plan):
        raise HeartlmError(
            f"{plan.work.name} holds a stopped run's checkpoints: continue it with --resume, "
            "or start again with --overwrite",
            plan.out,
        )


def checkpointed(work: Path) -> bool:
    """Whether a run folder (a staged one: `partial_dir`) holds a checkpoint to resume from."""
    return (work / "checkpoints").is_dir() and any((work / "checkpoints").glob("step_*"))


def has_checkpoint(plan: RunPlan) -> bool:
    return checkpointed(plan.work)


def discard_unresumable(plan: RunPlan, before: str) -> None:
    """Owner only, after a failed run: what it wrote goes when it left no checkpoint to
    resume from (a folder that was empty before becomes empty again)."""
    if before == "used" or has_checkpoint(plan):
        return
    if before == "new":
        shutil.rmtree(plan.work, ignore_errors=True)
        return
    for child in plan.work.iterdir():
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def complete(plan: RunPlan) -> bool:
    """Whether the run in `plan.work` ended with its export (not at --stop-at or a signal)."""
    try:
        result = json.loads((plan.work / "result.json").read_bytes())
    except (OSError, ValueError):
        return False
    exported = (plan.work / "model.safetensors").is_file()
    return exported and isinstance(result, dict) and not result.get("interrupted")


def finish(plan: RunPlan) -> None:
    """Owner only, after a run ended well: a complete staged run replaces `out`."""
    if plan.staged and complete(plan):
        swap_in(plan.work, plan.out)


def run_owned(plan: RunPlan, body: Callable[[], int]) -> int:
    """Run `body` (train here, or launch the workers that do) with `plan.out` locked and
    prepared when this process owns it; afterwards swap a complete run in, or remove
    what a failed run wrote when it left nothing to resume from."""
    if not owns(plan.out):
        return body()
    with claimed(plan.out):
        before = prepare(plan)
        try:
            code = body()
        except BaseException:
            _after_failure(plan, before)
            raise
        if code == 0:
            finish(plan)
        elif code != EXIT_STOPPED:
            _after_failure(plan, before)
    return code


def _after_failure(plan: RunPlan, before: str) -> None:
    """Remove what a failed run wrote, or say how to continue it from the checkpoints it
    wrote (a refused or failed --resume has been told already)."""
    discard_unresumable(plan, before)
    if not plan.resume and has_checkpoint(plan):
        logger.warning("%s keeps the failed run's checkpoints: continue it with %s",
                       plan.work, plan.continue_with)  # fmt: skip
