"""One logging interface for training: metrics.jsonl, TensorBoard, optional W&B (rank 0)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from heartlm.errors import HeartlmError

REQUIRED_FIELDS = (
    "step",
    "loss",
    "lr",
    "tokens_per_s",
    "mfu",
    "data_wait_pct",
    "max_mem_gib",
    "grad_norm",
    "step_time_s",
    "elapsed_s",
)


class MetricsLogger:
    """Appends one JSON object per optimizer step; mirrors scalars to TensorBoard / W&B.

    On ranks other than 0 every method does nothing, so the loop has no rank checks.
    """

    def __init__(
        self,
        run_dir: Path,
        enabled: bool,
        wandb: bool = False,
        config: dict | None = None,
        resume_step: int = 0,
        restore: Path | None = None,
    ) -> None:
        """`restore`: the checkpoint's copy of the log, which replaces ours on resume (a
        line cut off by a crash or written after the checkpoint must not stay or leave a
        gap); a run that starts at step 0 starts a new log."""
        self.enabled = enabled
        self.tb = self.wandb = None
        self.file = None
        if not enabled:
            return
        path = run_dir / "metrics.jsonl"
        if restore is not None and restore.is_file():
            shutil.copyfile(restore, path)
        elif resume_step and path.is_file():
            _truncate_after(path, resume_step)
        elif not resume_step:
            path.unlink(missing_ok=True)
        self.file = open(path, "a")  # noqa: SIM115 - kept open for the whole run
        from torch.utils.tensorboard import SummaryWriter

        self.tb = SummaryWriter(str(run_dir / "tb"), purge_step=resume_step or None)
        if wandb:
            try:
                import wandb as wb
            except ImportError:
                raise HeartlmError(
                    "--wandb: wandb is not installed: pip install 'heartlm[wandb]'"
                ) from None
            os.environ.setdefault("WANDB_DIR", str(run_dir))
            self.wandb = wb.init(
                project=os.environ.get("WANDB_PROJECT", "heartlm"),
                config=config,
                dir=str(run_dir),
                resume="allow",
                id=os.environ.get("WANDB_RUN_ID"),
            )

    def log(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps(record) + "\n")
        step = record["step"]
        for key, value in record.items():
            if key != "step" and isinstance(value, int | float):
                self.tb.add_scalar(
                    f"train/{key}" if not key.startswith("val_") else f"val/{key[4:]}", value, step
                )
        if self.wandb is not None:
            self.wandb.log(record, step=step)

    def flush(self) -> None:
        if self.enabled:
            self.file.flush()
            self.tb.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        self.file.close()
        self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def _truncate_after(path: Path, step: int) -> None:
    """Drop lines past `step` (written after the checkpoint we resume from)."""
    kept = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line)
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    path.write_text("".join(f"{line}\n" for line in kept))


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every row of RUN/metrics.jsonl; a damaged line is one HeartlmError naming the file."""
    path = Path(run_dir) / "metrics.jsonl"
    rows = []
    for n, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError as exc:  # bad JSON or not UTF-8
            raise HeartlmError(f"line {n} is not a JSON object ({exc})", path) from None
    return rows


def last_values(path: Path) -> dict[str, Any]:
    """The loop's final numbers as the log has them: the last loss, tokens/s, MFU and
    validation loss."""
    found: dict[str, Any] = {}
    if not path.is_file():
        return found
    names = {"loss": "loss", "val_loss": "val_loss", "tokens_per_s": "tps", "mfu": "mfu"}
    for line in path.read_bytes().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            found.update({names[k]: v for k, v in row.items() if k in names})
    return found
