"""A command's settings from its dataclass: flags, defaults and help, `--config`, `--print-config`.

A command's dataclass is the only place a setting is written. Each field is one flag
(`--field-name`, or the `flag` given to `setting`); its default is the field's; its help
is the docstring under the field. A field whose type is a dataclass is a section: its
fields are flags too, and in a config file they sit under the section's name.

Values come in three layers, each overriding the one before: the dataclass defaults, a
`--config FILE` (YAML, TOML, or a run folder's run.json, whose `config` it reads), and
the flags given on the command line. `--print-config` prints the resolved settings as
YAML and exits; fed back with `--config`, they reproduce the run.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import itertools
import json
import textwrap
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from heartlm.errors import HeartlmError

MAX_SEED = 2**32 - 1
"""`--seed` runs 0 .. MAX_SEED: what numpy's and torch's generators all take"""


def check_seed(seed: int, flag: str = "--seed") -> None:
    """ValueError, naming `flag`, for a seed the generators would refuse with a traceback."""
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"{flag} must be 0 .. {MAX_SEED}, not {seed}")


def setting(
    default: Any = None,
    *,
    flag: str | None = None,
    positional: bool = False,
    required: bool = False,
    choices: Any = None,
    metavar: str | None = None,
    parse: Callable[[str], Any] | None = None,
    group: str | None = None,
    exclusive: str | None = None,
    cli: bool = True,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """A dataclass field with what its flag needs beyond name, type, default and docstring.

    `exclusive`: fields sharing this name are alternatives (`--steps` / `--epochs`): giving
    one in a layer clears the others. `cli=False`: settable in a config file, no flag.
    `parse`: the flag's text to a value (for types argparse cannot convert itself); on a
    list field the flag then takes one argument, which `parse` turns into the whole list
    (`comma_list`), in place of one argument per item.
    """
    meta = {"flag": flag, "positional": positional, "required": required, "choices": choices,
            "metavar": metavar, "parse": parse, "group": group, "exclusive": exclusive,
            "cli": cli}  # fmt: skip
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def comma_list(item: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    """A `parse` for a list given as one comma-separated argument (`--gpus 1,2,4`); empty
    items are dropped. argparse names it in its error: 'invalid comma-separated int value'."""

    def parse(text: str) -> list[Any]:
        return [item(v.strip()) for v in text.split(",") if v.strip()]

    parse.__name__ = f"comma-separated {getattr(item, '__name__', 'item')}"
    return parse


@dataclasses.dataclass(frozen=True)
class _Leaf:
    """One flag: its dotted name in the config, its field, type hint and stage default."""

    name: str
    field: dataclasses.Field
    hint: Any
    default: Any
    help: str
    cli: bool = True

    def meta(self, key: str) -> Any:
        return self.field.metadata.get(key)

    @property
    def flag(self) -> str:
        return self.meta("flag") or "--" + self.field.name.replace("_", "-")


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of `cls` and its dataclass bases (`x: int = 0` then
    a string literal), as litgpt and jsonargparse read them."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        except (OSError, TypeError):
            continue
        for node, after in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def field_defaults(cls: type, names: Iterable[str]) -> dict[str, Any]:
    """The defaults of the settings `names` of the settings dataclass `cls`."""
    wanted = set(names)
    return {f.name: _default(f) for f in dataclasses.fields(cls) if f.name in wanted}


def leaves(cls: type, defaults: Any = None, prefix: str = "", cli: bool = True) -> Iterator[_Leaf]:
    """Every setting of `cls` depth-first; `defaults` (an instance of a section) supplies
    the defaults a command gives the section in place of the class's own. A section made
    by its class alone (`factory=TheClass`) keeps the class's field defaults, as
    jsonargparse reads them: an instance could hold values its `__post_init__` derived
    from the others (scale's --steps from --gpus), which must be derived again from the
    flags given, not fixed. A section marked `cli=False` has no flags, only its place in
    config files."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        flag = cli and f.metadata.get("cli", True)
        if defaults is not None:
            default = getattr(defaults, f.name)
        elif dataclasses.is_dataclass(hint) and f.default_factory is hint:
            default = None  # the section class's own field defaults
        else:
            default = _default(f)
        if dataclasses.is_dataclass(hint):
            yield from leaves(hint, default, f"{prefix}{f.name}.", flag)
        else:
            yield _Leaf(f"{prefix}{f.name}", f, hint, default, docs.get(f.name, ""), flag)


def _inner(hint: Any) -> tuple[Any, bool]:
    """(the type without None, whether None is allowed)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return (args[0] if len(args) == 1 else hint), len(args) < len(typing.get_args(hint))
    return hint, False


def _help(leaf: _Leaf) -> str:
    text = leaf.help.replace("%", "%%")  # argparse formats help with %: a docstring's 10 % is text
    shown = leaf.default
    nothing = shown is None or shown is False or shown in ((), [])
    if nothing or leaf.meta("positional") or leaf.meta("required"):
        return text or " "
    if isinstance(shown, tuple | list):
        shown = ",".join(map(str, shown))
    shown = str(shown).replace("%", "%%")
    return f"{text} (default: {shown})" if text else f"default: {shown}"


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One flag per setting of `cls`, plus `--config` and `--print-config`. Every flag's
    argparse default is 'not given', so a config file can sit between the defaults and
    the command line (`resolve`)."""
    groups: dict[str, Any] = {}
    exclusive: dict[str, Any] = {}
    for leaf in leaves(cls):
        if not leaf.cli:
            continue
        title = leaf.meta("group")
        target = parser if title is None else groups.get(title)
        if target is None:
            target = groups[title] = parser.add_argument_group(title)
        if leaf.meta("exclusive"):
            key = leaf.meta("exclusive")
            if key not in exclusive:
                exclusive[key] = target.add_mutually_exclusive_group()
            target = exclusive[key]
        _add_flag(target, leaf)
    files = parser.add_argument_group("settings")
    files.add_argument("--config", type=Path, metavar="FILE",
                       help="settings from a YAML or TOML file, or a run's run.json; "
                       "flags given beside it override it")  # fmt: skip
    files.add_argument("--print-config", action="store_true",
                       help="print the resolved settings as YAML and exit")  # fmt: skip


def _add_flag(target: Any, leaf: _Leaf) -> None:
    kwargs: dict[str, Any] = {"dest": leaf.name, "default": argparse.SUPPRESS, "help": _help(leaf)}
    if leaf.meta("metavar"):
        kwargs["metavar"] = leaf.meta("metavar")
    inner, _ = _inner(leaf.hint)
    if inner is bool:
        switch = "store_true" if leaf.default is False else argparse.BooleanOptionalAction
        target.add_argument(leaf.flag, action=switch, **kwargs)
        return
    if typing.get_origin(inner) is list and not leaf.meta("parse"):
        kwargs["nargs"] = "+"
        inner = typing.get_args(inner)[0]
    kwargs["type"] = leaf.meta("parse") or inner
    if leaf.meta("choices") is not None:
        kwargs["choices"] = list(leaf.meta("choices"))
    elif "metavar" not in kwargs:
        kwargs["metavar"] = leaf.field.name.upper()
    if not leaf.meta("positional"):
        target.add_argument(leaf.flag, **kwargs)
        return
    # Optional here, so that a config file can give it; `resolve` checks it is there. (An
    # absent positional is None: argparse would pass a SUPPRESS default through `type`.)
    kwargs["nargs"] = "*" if kwargs.get("nargs") == "+" else "?"
    kwargs["default"] = None
    target.add_argument(kwargs.pop("dest"), **kwargs)


def read_file(path: Path, stage: str) -> dict[str, Any]:
    """A config file's settings: YAML (.yaml, .yml), TOML (.toml) or JSON; a run.json
    gives its `config` (and must come from `stage`)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise HeartlmError(f"cannot read the config file ({exc.strerror})", path) from None
    try:
        text = raw.decode("utf-8")
        if path.suffix == ".toml":
            values = tomllib.loads(text)
        elif path.suffix == ".json":
            values = json.loads(text)
        else:
            import yaml

            values = yaml.safe_load(text)
    except UnicodeDecodeError as exc:
        raise HeartlmError(f"not UTF-8 text (byte {exc.start})", path) from None
    except Exception as exc:  # JSON, TOML and YAML each have their own error type
        detail = " ".join(str(exc).split())[:200]
        kind = {".toml": "TOML", ".json": "JSON"}.get(path.suffix, "YAML")
        raise HeartlmError(f"not a valid {kind} file ({detail})", path) from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise HeartlmError("a config file holds one mapping of settings", path)
    if "stage" in values and "config" in values:  # a run's run.json
        if values["stage"] != stage:
            raise HeartlmError(f"is the run.json of '{values['stage']}', not of '{stage}'", path)
        values = values["config"]
    return _flatten(values, path)


def _flatten(values: dict[str, Any], path: Path, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, path, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """A value from a file as the field's type (YAML has no Path or tuple)."""
    inner, optional = _inner(hint)
    if value is None:
        if optional:
            return None
        raise ValueError(f"{where} cannot be null")
    origin = typing.get_origin(inner)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ValueError(f"{where} must be a list, not {value!r}")
        args = typing.get_args(inner)
        items = [_coerce(v, args[0] if origin is list or ... in args else args[i], where)
                 for i, v in enumerate(value)]  # fmt: skip
        return items if origin is list else tuple(items)
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
        Path: isinstance(value, str),
    }.get(inner, True)
    if not ok:
        raise ValueError(f"{where} must be {getattr(inner, '__name__', inner)}, not {value!r}")
    return inner(value) if inner in (float, Path) else value


def _apply_layer(values: dict[str, Any], layer: dict[str, Any], by_name: dict[str, _Leaf]) -> None:
    """`layer` over `values`; an alternative given here clears its partners."""
    given: dict[str, list[str]] = {}
    for name, value in layer.items():
        group = by_name[name].meta("exclusive")
        if group and value is not None:
            given.setdefault(group, []).append(name)
    for group, names in given.items():
        if len(names) > 1:
            flags = ", ".join(by_name[n].flag for n in names)
            raise ValueError(f"give only one of {flags}")
        for leaf in by_name.values():
            if leaf.meta("exclusive") == group and leaf.name not in layer:
                values[leaf.name] = None
    values.update(layer)


def resolve(cls: type, args: argparse.Namespace, stage: str) -> Any:
    """An instance of `cls`: its defaults, then `--config`, then the flags given. With
    `--print-config` a missing required setting stays null (the printout is a template)."""
    by_name = {leaf.name: leaf for leaf in leaves(cls)}
    values = {name: leaf.default for name, leaf in by_name.items()}
    config = getattr(args, "config", None)
    try:
        if config is not None:
            layer = read_file(config, stage)
            unknown = sorted(set(layer) - set(by_name))
            if unknown:
                meant = [n for n in by_name if n.rsplit(".", 1)[-1] == unknown[0]]
                hint = f" (did you mean {meant[0]!r}?)" if meant else ""
                raise HeartlmError(f"unknown setting {unknown[0]!r}{hint}", config)
            try:
                _apply_layer(values, {k: _file_value(by_name[k], v) for k, v in layer.items()},
                             by_name)  # fmt: skip
            except ValueError as exc:
                raise HeartlmError(str(exc), config) from None
        # Every flag's argparse default is "absent": what the namespace holds was given.
        given = {k: getattr(args, k) for k in by_name if getattr(args, k, None) not in (None, [])}
        _apply_layer(values, given, by_name)
    except ValueError as exc:
        raise HeartlmError(str(exc)) from None
    missing = [by_name[n] for n, v in values.items() if by_name[n].meta("required") and v is None]
    if missing and not getattr(args, "print_config", False):
        leaf = missing[0]
        name = leaf.field.name.upper() if leaf.meta("positional") else leaf.flag
        raise HeartlmError(f"{name} is required (give it, or set {leaf.name} in --config)")
    try:
        return build(cls, values)
    except ValueError as exc:  # a dataclass that validates itself as it is made
        raise HeartlmError(str(exc)) from None


def _file_value(leaf: _Leaf, value: Any) -> Any:
    value = _coerce(value, leaf.hint, leaf.name)
    choices = leaf.meta("choices")
    if choices is not None and value is not None and value not in list(choices):
        raise ValueError(f"{leaf.name} must be one of {', '.join(map(str, choices))}")
    return value


def build(cls: type, values: dict[str, Any], prefix: str = "") -> Any:
    """An instance of `cls` from dotted names -> values."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            kwargs[f.name] = build(hints[f.name], values, f"{prefix}{f.name}.")
        else:
            kwargs[f.name] = values[f"{prefix}{f.name}"]
    return cls(**kwargs)


def to_dict(config: Any) -> dict[str, Any]:
    """The settings as plain values (paths as text, tuples as lists): what run.json holds."""

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return str(value) if isinstance(value, Path) else value

    return plain(dataclasses.asdict(config))


def dump(config: Any) -> str:
    """YAML that `--config` reads back to the same settings."""
    import yaml

    return yaml.safe_dump(to_dict(config), sort_keys=False, default_flow_style=False)
