"""`run.json`: what produced an output folder (command, config, versions, counts, timings)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import platform
import sys
import types
import typing
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
    except RecursionError:
        raise HeartlmError(f"{path.name} nests its JSON too deeply", path) from None
    if not isinstance(value, dict):
        raise HeartlmError(f"{path.name} is not a JSON object", path)
    return value


_KINDS = {bool: ("true or false", "true or false"), int: ("an integer", "integers"),
          float: ("a number", "numbers"), str: ("a string", "strings"),
          dict: ("a JSON object", "JSON objects"), list: ("a list", "lists"),
          type(None): ("null", "null")}  # fmt: skip


def json_field(values: dict[str, Any], key: str, kind: Any, path: Path, where: str = "") -> Any:
    """`values[key]` if it is JSON of type `kind` (int, float, str, bool, dict, `list[str]`,
    `int | None`, ...; a float takes an integer, a missing key reads as null); else one
    HeartlmError naming `path` and the field, `where` (`records[3].`) before its name."""
    if key not in values and not _conforms(None, kind):
        raise HeartlmError(f"{path.name} lacks {where}{key}", path)
    value = values.get(key)
    _check(value, kind, f"{where}{key}", path)
    return float(value) if kind is float else value


def json_fields(values: dict[str, Any], kinds: dict[str, Any], path: Path, where: str = "") -> None:
    """`json_field` for each key of `kinds` (key -> type)."""
    for key, kind in kinds.items():
        json_field(values, key, kind, path, where)


def check_json_dataclass(
    cls: type, values: Any, path: Path, where: str, unknown_ok: bool = False
) -> None:
    """Check that the JSON object `values` holds the fields of dataclass `cls` with the types
    its annotations give (those with a default may be absent), so that `cls(**values)`
    cannot fail on a type; unknown keys are refused unless `unknown_ok`."""
    if not isinstance(values, dict):
        raise HeartlmError(f"{where} {_show(values)} is not a JSON object", path)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if f.name in values or required:
            json_field(values, f.name, hints[f.name], path, f"{where}.")
    unknown = sorted(values.keys() - hints.keys())
    if unknown and not unknown_ok:
        raise HeartlmError(f"{where} has an unknown field {unknown[0]!r}", path)


def _check(value: Any, kind: Any, label: str, path: Path) -> None:
    if typing.get_origin(kind) in (types.UnionType, typing.Union):
        # the member the value's JSON type matches decides (a list's items are checked too)
        member = next((k for k in typing.get_args(kind) if _conforms(value, k)), None)
        kind = kind if member is None else member
    args = [a for a in typing.get_args(kind) if a is not Ellipsis]
    if typing.get_origin(kind) in (list, tuple) and isinstance(value, list):
        for i, item in enumerate(value):
            _check(item, args[0], f"{label}[{i}]", path)
    elif not _conforms(value, kind):
        raise HeartlmError(f"{label} {_show(value)} is not {_describe(kind)}", path)


def _conforms(value: Any, kind: Any) -> bool:
    origin = typing.get_origin(kind) or kind
    if origin in (types.UnionType, typing.Union):
        return any(_conforms(value, k) for k in typing.get_args(kind))
    if isinstance(value, bool) and origin is not bool:
        return False  # JSON true is not the integer 1
    if origin is float:  # Python's json reads NaN and Infinity, which no field may hold
        return isinstance(value, int | float) and math.isfinite(value)
    return isinstance(value, list if origin is tuple else origin)


def _describe(kind: Any, plural: bool = False) -> str:
    origin, args = typing.get_origin(kind) or kind, typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_describe(k, plural) for k in args)
    if origin in (list, tuple) and args:
        return f"{'lists' if plural else 'a list'} of {_describe(args[0], plural=True)}"
    return _KINDS.get(list if origin is tuple else origin, (str(kind), str(kind)))[plural]


def _show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_run_json(folder: str | Path, stage: str | None = None) -> dict[str, Any]:
    """Read `folder/run.json`, checking that it came from `stage` when given."""
    info = read_json(folder, "run.json", "no run.json: not a heartlm output folder")
    if stage is not None and info.get("stage") != stage:
        raise HeartlmError(f"is a '{info.get('stage')}' folder, expected '{stage}'", folder)
    return info
