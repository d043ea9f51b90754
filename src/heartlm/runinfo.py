"""`run.json`: what produced an output folder (command, config, versions, counts, timings)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from heartlm.errors import HeartlmError
from heartlm.outdir import atomic_write_text

_PACKAGES = ("heartlm", "numpy", "scipy", "wfdb", "torch", "safetensors")


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return value.item()
    return value


def write_run_json(
    folder: str | Path,
    stage: str,
    config: Any,
    counts: dict[str, Any] | None = None,
    timings: dict[str, float] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write `folder/run.json` atomically and return what was written."""
    info = {
        "stage": stage,
        "command": sys.argv,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "config": _jsonable(config),
        "counts": _jsonable(counts or {}),
        "timings_s": _jsonable(timings or {}),
        "versions": versions(),
        "host": platform.node(),
        **_jsonable(extra or {}),
    }
    atomic_write_text(Path(folder) / "run.json", json.dumps(info, indent=2) + "\n")
    return info


def read_json(folder: str | Path, name: str, missing: str) -> dict[str, Any]:
    """Parse `folder/name`; a missing file raises `missing` (naming the folder), bad JSON
    or JSON that is not an object a one-line error naming the file."""
    path = Path(folder) / name
    if not path.is_file():
        raise HeartlmError(missing, folder)
    return parse_json_file(path)


def parse_json_file(path: Path) -> dict[str, Any]:
    """The JSON object in `path` (every heartlm metadata file is one); text that is not UTF-8,
    not JSON or not an object is one line naming the file."""
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise HeartlmError(f"{path.name} is not UTF-8 text (byte {exc.start})", path) from None
    except json.JSONDecodeError as exc:
        raise HeartlmError(f"{path.name} is not valid JSON ({exc.msg})", path) from None
    if not isinstance(value, dict):
        raise HeartlmError(f"{path.name} is not a JSON object", path)
    return value


def read_run_json(folder: str | Path, stage: str | None = None) -> dict[str, Any]:
    """Read `folder/run.json`, checking that it came from `stage` when given."""
    info = read_json(folder, "run.json", "no run.json: not a heartlm output folder")
    if stage is not None and info.get("stage") != stage:
        raise HeartlmError(f"is a '{info.get('stage')}' folder, expected '{stage}'", folder)
    return info
