"""The model study's recipe names: the configuration, views, pretraining run, floors and
recorded flags a name stands for, and the recipe the folds chose for each initialisation."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import model_configs as cfg


def pretrain_variant(config: str) -> str:
    """The PRETRAIN_VARIANTS key a configuration starts from (the word in its name; from
    scratch: SCRATCH_VARIANT, for the architecture only)."""
    if config.startswith("scratch"):
        return cfg.SCRATCH_VARIANT
    words = set(config.split("_"))
    return next((v for v in cfg.PRETRAIN_VARIANTS if v and v in words), "")


def pretraining_run(seed: int, variant: str = "") -> str:
    """The pretrained run that fine-tuning seed `seed` starts from: its own pretraining run
    (`pre` for seed 0, as before round 13), so a seed's spread includes pretraining's."""
    name = f"pre_{variant}" if variant else "pre"
    return name if seed == 0 else f"{name}_s{seed}"


def _inputs(flags: list[str]) -> str:
    """The `--inputs` value of a configuration's flags (finetune's default: all)."""
    return flags[flags.index("--inputs") + 1] if "--inputs" in flags else "all"


def floor_name(
    inputs: str,
    context: int = 0,
    synthetic: tuple[str, ...] | None = None,
    data: str = "tok_beats",
) -> str:
    """The floor's row name; `synthetic`: the synthetic folders an AFIB floor trains on, named
    where they are not SYNTHETIC (the floors of earlier rounds keep their names); `data`: a
    beat floor's training token folder, named where it is BEATS_LEADS."""
    parts = [inputs, *([f"context {context}"] if context else [])]
    if synthetic is not None and synthetic != cfg.SYNTHETIC:
        parts.append(f"synthetic {' '.join(synthetic)}")
    if data == cfg.BEATS_LEADS or data in ectopy_folders():
        parts.append("lead copies")
    if data in ectopy_folders():
        parts.append("ectopy patients")
    sick = {folder: suffix for suffix, (folder, _) in cfg.BEATS_SICK.items()}
    if data in sick:
        parts.append(f"sick sinus {sick[data].removeprefix('_sick')}")
    if data in {folder for folder, _ in cfg.BEATS_FUSION.values()}:
        parts.append("fusion patients")
    if cfg.KEEP_SYNTHETIC_LABELS:  # its shares below 1 drawn from DS1's labels alone
        parts.append("synthetic labels kept")
    return f"tree floor ({', '.join(parts)})"


def _patients_swapped() -> dict[str, tuple[str, tuple[str, ...]]]:
    """The beat token folders that hold BEATS_ECTOPY's sources with other folders in
    SICK_TRAINING's place, by the configuration suffix that names them (BEATS_SICK's and
    BEATS_FUSION's): suffix -> (token folder, the folders in SICK_TRAINING's place)."""
    return {**cfg.BEATS_SICK, **cfg.BEATS_FUSION}


def beat_data(config: str) -> str:
    """The token folder a beat configuration trains on (every one is scored on tok_beats)."""
    swapped = [folder for suffix, (folder, _) in _patients_swapped().items()
               if cfg.has_suffix(config, suffix)]  # fmt: skip
    assert len(swapped) <= 1, f"{config}: names more than one set of extra patients"
    if swapped:
        return swapped[0]
    if cfg.has_suffix(config, cfg.BEAT_ECTOPY_SUFFIX):
        return cfg.BEATS_ECTOPY
    return cfg.BEATS_LEADS if cfg.has_suffix(config, cfg.LEAD_COPIES_SUFFIX) else "tok_beats"


def ectopy_folders() -> set[str]:
    """The beat token folders with BEATS_ECTOPY's sources: BEATS_ECTOPY and the BEATS_SICK and
    BEATS_FUSION folders, which only swap or add to its sick-sinus patients."""
    return {cfg.BEATS_ECTOPY, *(folder for folder, _ in _patients_swapped().values())}


def train_synthetic(folder: str) -> tuple[str, ...]:
    """TRAIN_SYNTHETIC as a beat token folder holds it: in a BEATS_SICK or BEATS_FUSION folder
    with its own folders in place of SICK_TRAINING."""
    sick = dict(_patients_swapped().values()).get(folder, (cfg.SICK_TRAINING,))
    return tuple(f for t in cfg.TRAIN_SYNTHETIC for f in (sick if t == cfg.SICK_TRAINING else (t,)))


def folder_synthetic(folder: str) -> tuple[str, ...]:
    """The synthetic patient folders whose records train beside DS1's in a beat token folder:
    train_synthetic's, and in the ectopy_folders the ectopy patients (AFIB_ONLY_SYNTHETIC)
    too."""
    extra = cfg.AFIB_ONLY_SYNTHETIC if folder in ectopy_folders() else ()
    return (*train_synthetic(folder), *extra)


def beat_floor_kinds(configs: list[str]) -> list[tuple[str, str]]:
    """(inputs, training token folder) of the floors beside these beat configurations."""
    return sorted({(_inputs(cfg.CONFIGS[c]), beat_data(c)) for c in configs})


def afib_window() -> int:
    """The AFIB windows every model and floor is scored on (the goal's 32 beats)."""
    return int(cfg.AFIB[cfg.AFIB.index("--window") + 1])


def _afib_context(flags: list[str]) -> int:
    """Beats of context an AFIB configuration sees around each scored window (0: none)."""
    window = int(flags[flags.index("--window") + 1]) if "--window" in flags else afib_window()
    return window if window > afib_window() else 0


def afib_floor_kinds(configs: list[str]) -> list[tuple[str, int, tuple[str, ...]]]:
    """(inputs, context, synthetic folders) of the floors beside these AFIB configurations
    (names of AFIB_CONFIGS): each floor sees what its recipes see and trains on the same
    records."""
    table = cfg.AFIB_CONFIGS
    return sorted({(_inputs(table[c]), _afib_context(table[c]), afib_synthetic(c))
                   for c in configs})  # fmt: skip


def viewed(config: str, views: int) -> str:
    """A beat recipe's name: the configuration, with `_viewsN` when scored over N windows."""
    return config if views == 1 else f"{config}_views{views}"


def offsetted(recipe: str, name: str, offset: float) -> str:
    """A beat recipe's name with one class's offset (`evaluate --class-offset NAME=OFFSET`),
    which `select` chose for it on the folds: `_offsetV+1.5`."""
    return f"{recipe}_offset{name}{offset:+g}"


def shared(recipe: str, share: str) -> str:
    """A beat recipe's name scored with its per-beat network's logits weighed by `share`, as
    `evaluate --beat-mlp-share` reads it (`0.75`, `0.25,V=1`): `_share0.75`, `_share0.25V1`."""
    from heartlm.labelled.shares import parse_shares

    name = f"{recipe}_share{share.replace(',', '').replace('=', '')}"
    numbers = [item.rpartition("=")[2] for item in share.split(",")]
    try:
        parse_shares(share.split(","))
    except ValueError as exc:
        raise SystemExit(f"{recipe}: {exc}") from None
    if share_of(name) != share or any(f"{float(x):g}" != x for x in numbers):
        raise SystemExit(f"--beat-mlp-share {share!r}: not a share `shared` names once (a "
                         "bare share first, then CLASS=S items, each number as :g writes "
                         "it)")  # fmt: skip
    return name


RECIPE = re.compile(
    f"(?P<config>.+?)(?:{cfg.VIEWS_SUFFIX})?(?:{cfg.SHARE_SUFFIX})?(?:{cfg.OFFSET_SUFFIX})?"
)


def _parse_recipe(name: str) -> tuple[str, int]:
    """(configuration, views) a row's name reads as; the configuration may be unknown."""
    found = RECIPE.fullmatch(name)
    assert found is not None  # the configuration matches anything
    return found["config"], int(found["views"] or 1)


def offset_of(recipe: str) -> tuple[str, float] | None:
    """(class, offset) of a beat recipe named with `offsetted`; None without one."""
    found = RECIPE.fullmatch(recipe)
    return (found["cls"], float(found["offset"])) if found and found["cls"] else None


def offset_args(recipe: str) -> list[str]:
    """What `evaluate` is given for a recipe's class offset (nothing without one)."""
    offset = offset_of(recipe)
    return [] if offset is None else ["--class-offset", f"{offset[0]}={offset[1]:g}"]


def share_of(recipe: str) -> str | None:
    """The per-beat network's share of a beat recipe named with `shared`, as `evaluate
    --beat-mlp-share` reads it (`0.25,V=1`); None without one."""
    found = RECIPE.fullmatch(recipe)
    if not (found and found["share"]):
        return None
    items = re.findall(r"([NSVFQ]?)([01](?:\.\d+)?)", found["share"])
    return ",".join(f"{name}={share}" if name else share for name, share in items)


def share_args(recipe: str) -> list[str]:
    """What `evaluate` is given for a recipe's per-beat network share (nothing without one)."""
    share = share_of(recipe)
    return [] if share is None else ["--beat-mlp-share", share]


def scoring_args(recipe: str) -> list[str]:
    """What `evaluate` is given, beyond its views, to score a beat recipe as it is named."""
    return [*share_args(recipe), *offset_args(recipe)]


def _table(configs: dict[str, list] | None) -> dict[str, list]:
    """The configuration table a recipe helper reads: CONFIGS (beats) unless given one (AFIB:
    AFIB_CONFIGS); read when called, so a table swapped in later is the one read."""
    return cfg.CONFIGS if configs is None else configs


def split_recipe(recipe: str, configs: dict[str, list] | None = None) -> tuple[str, int]:
    """(configuration, views) of a recipe's name (beats: of CONFIGS, the default; AFIB: of
    AFIB_CONFIGS); SystemExit for an unknown one."""
    config, views = _parse_recipe(recipe)
    if config not in _table(configs):
        which = "CONFIGS" if configs is None else "AFIB_CONFIGS"
        raise SystemExit(
            f"{recipe!r}: not a configuration of {which} (with an optional _viewsN, "
            "then _shareS, then _offsetCLASS+X)"
        )
    return config, views


def _is_recipe(name: str, configs: dict[str, list] | None = None) -> bool:
    """Whether a selection row is a recipe (a configuration, perhaps with _viewsN)."""
    return _parse_recipe(name)[0] in _table(configs)


def config_of(recipe: str, configs: dict[str, list] | None = None) -> str:
    return split_recipe(recipe, configs)[0]


def views_of(recipe: str, configs: dict[str, list] | None = None) -> int:
    return split_recipe(recipe, configs)[1]


def recipe_flags(recipe: str, configs: dict[str, list] | None = None) -> list[str]:
    """A recipe's fine-tuning flags, then how it is scored where that is not one view (the
    flags the tables and the DS2 ledger record)."""
    config, views = split_recipe(recipe, configs)
    data = data_note(beat_data(config)) if configs is None else []
    scored = [["--views", f"{views}"]] if views > 1 else []
    scored += [args for args in (share_args(recipe), offset_args(recipe)) if args]
    notes = [word for flag, value in scored for word in (f"(evaluate {flag}", f"{value})")]
    return [*_table(configs)[config], *notes, *data]


def data_note(folder: str) -> list[str]:
    """What a beat recipe's or floor's recorded flags add when it trains on BEATS_LEADS
    (nothing for tok_beats, so earlier rounds' flags stay as they were)."""
    return [] if folder == "tok_beats" else ["(trained on", f"{folder})"]


def afib_synthetic(config: str) -> tuple[str, ...]:
    """The synthetic folder keys an AFIB configuration trains on (in both folds, and on DS2)."""
    return cfg.AFIB_TRAIN_SYNTHETIC.get(config, cfg.SYNTHETIC)


def afib_recipe_flags(recipe: str) -> list[str]:
    """An AFIB recipe's flags as the tables and the DS2 ledger record them: its fine-tuning
    flags and views, then its synthetic training folders where they are not SYNTHETIC."""
    synthetic = afib_synthetic(config_of(recipe, cfg.AFIB_CONFIGS))
    return [*recipe_flags(recipe, cfg.AFIB_CONFIGS), *synthetic_note(synthetic)]


def synthetic_note(synthetic: tuple[str, ...]) -> list[str]:
    """What a recipe's or floor's recorded flags add when it trains on other synthetic
    folders than SYNTHETIC (nothing otherwise, so earlier rounds' flags stay as they were)."""
    return [] if synthetic == cfg.SYNTHETIC else ["(synthetic", f"{' '.join(synthetic)})"]


def best_afib(rows: dict[str, Any], init: str) -> str:
    """The `init` ("pretrained" or "scratch") AFIB configuration with the best window F1
    pooled over the folds, each at its own fold-chosen threshold."""
    table = cfg.AFIB_CONFIGS
    candidates = [
        c for c in rows if _is_recipe(c, table)
        and ("--from-scratch" in table[config_of(c, table)]) == (init == "scratch")
    ]  # fmt: skip
    if not candidates:
        raise SystemExit(f"select_afib.json: no {init} configuration of AFIB_CONFIGS")
    return max(candidates, key=lambda c: rows[c].get("threshold_f1", rows[c].get("f1", 0.0)))


def select_score(
    report: dict[str, Any], classes: Sequence[str], floor: dict[str, Any] | None = None
) -> float:
    """What beat recipes are ranked by: the mean F1 of `classes` (cfg.SELECT_CLASSES), or,
    given the floor's report on the same records, the smallest F1 less the floor's
    (cfg.SELECT_RULE "floor_margin")."""
    c = report["per_class"]
    if floor is not None:
        return min(c[k]["f1"] - floor["per_class"][k]["f1"] for k in classes)
    return sum(c[k]["f1"] for k in classes) / len(classes)


def beat_floor_of(name: str) -> str:
    """The floor row beside a beat recipe or a VOTING_PAIRS row: the tree on the same inputs
    and training token folder (a pair's members share theirs, or it has none)."""
    configs = cfg.VOTING_PAIRS[name] if name in cfg.VOTING_PAIRS else (config_of(name),)
    floors = {floor_name(_inputs(cfg.CONFIGS[c]), data=beat_data(c)) for c in configs}
    if len(floors) > 1:
        raise SystemExit(f"VOTING_PAIRS {name}: its members have different floors "
                         f"({', '.join(sorted(floors))}); no one margin compares it "
                         "with both")  # fmt: skip
    return floors.pop()


def rule_floor(rows: dict[str, Any], name: str, rule: str) -> dict[str, Any] | None:
    """The report that `rule` measures row `name` of a selection against: its floor's for
    "floor_margin", none for "mean"."""
    if rule == "mean":
        return None
    if rule != "floor_margin":
        raise SystemExit(f"SELECT_RULE {rule!r}: not 'mean' or 'floor_margin'")
    if (floor := beat_floor_of(name)) not in rows:
        raise SystemExit(f"selection: no row {floor!r} to rank {name} by its margin over")
    return rows[floor]


def selection_rule(selection: dict[str, Any]) -> str:
    """The rule a selection file's seed table was computed by (before round 55 no file says:
    the mean)."""
    return selection.get("select_rule", "mean")


def select_classes(selection: dict[str, Any]) -> tuple[str, ...]:
    """The classes a selection file's recipes were ranked by (before round 52 no file says:
    cfg.EARLIER_SELECT_CLASSES)."""
    return tuple(selection.get("select_classes", cfg.EARLIER_SELECT_CLASSES))


def ensembled(recipe: str) -> str:
    """The row of a recipe's fold models of every SELECT_SEEDS averaged (`evaluate
    --ensemble`): a measurement beside the recipes, never chosen (`_is_recipe` rejects it)."""
    return f"{recipe}_ensemble{len(cfg.SELECT_SEEDS)}"


def _candidates(selection: dict[str, Any], init: str) -> list[str]:
    return [n for n in selection["beats"] if _is_recipe(n) and (
        "--from-scratch" in cfg.CONFIGS[config_of(n)]) == (init == "scratch")]  # fmt: skip


def _read_selection(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise SystemExit(f"{path}: run the select stage first (FINAL = auto reads it)")
    return json.loads(path.read_text())


def best_selected(path: Path, init: str) -> str:
    """The `init` ("pretrained" or "scratch") configuration ranked first by SELECT_RULE over
    the classes the selection names."""
    return _best_in(_read_selection(path), init, path)


def _best_in(selection: dict[str, Any], init: str, path: Path) -> str:
    if not (candidates := _candidates(selection, init)):
        raise SystemExit(f"{path}: the selection holds no {init} configuration")
    if not (kept := [name for name in candidates if not s_mostly_from_network(name)]):
        raise SystemExit(f"{path}: every {init} row reads S mostly from the per-beat network, "
                         "which model_configs.S_NEEDS_TRANSFORMER bars")  # fmt: skip
    return max(kept, key=lambda name: ranked_score(selection, name))


def choice_rule() -> dict[str, Any]:
    """How `final` chooses from a selection, as select and final files record it: the ranking
    (cfg.SELECT_RULE) and whether the S guard (cfg.S_NEEDS_TRANSFORMER) is in force."""
    return {"select_rule": cfg.SELECT_RULE, "s_needs_transformer": cfg.S_NEEDS_TRANSFORMER}


def s_mostly_from_network(name: str) -> bool:
    """Whether cfg.S_NEEDS_TRANSFORMER keeps recipe `name` from being chosen: it is read with
    the per-beat network's share of S above the trained half."""
    from heartlm.ecg.labels import AAMI_CLASSES
    from heartlm.labelled.shares import TRAINED_SHARE, parse_shares

    if not cfg.S_NEEDS_TRANSFORMER or (share := share_of(name)) is None:
        return False
    return bool(parse_shares(share.split(","))[AAMI_CLASSES.index("S")] > TRAINED_SHARE)


def adopt_selection(stages: Sequence[str], path: Path) -> list[str]:
    """Add to cfg.CONFIGS each configuration that the selection file `path` measured and
    CONFIGS lacks (CONFIGS has moved on to a later round), with the fine-tuning flags the
    selection recorded, so that a `final` of an earlier call's selection trains what the folds
    chose; the names added. Only for `final` (FINAL auto) without `select` before it.
    SystemExit where CONFIGS holds a selected name with other flags: the folds did not measure
    those."""
    if "final" not in stages or "select" in stages or cfg.FINAL != "auto" or not path.is_file():
        return []
    adopted = []
    for name, recorded in _read_selection(path)["configs"].items():
        words = [str(word) for word in recorded]
        if not words or not words[0].startswith("--") or any(
                w.startswith("(evaluate") for w in words):  # fmt: skip
            continue  # a floor, or a configuration's row read another way
        flags = words[: next((i for i, w in enumerate(words) if w.startswith("(")), len(words))]
        if name not in cfg.CONFIGS:
            cfg.CONFIGS[name] = flags
            adopted.append(name)
        elif [str(f) for f in cfg.CONFIGS[name]] != flags:
            raise SystemExit(f"{path}: {name} was measured with other flags than CONFIGS gives "
                             "it now; select again, or restore its flags")  # fmt: skip
    return adopted


def best_of_each_init(path: Path) -> dict[str, str]:
    """best_selected for each initialisation the selection holds a configuration of (a
    selection of one initialisation: round 61's held scratch recipes, round 74's)."""
    selection = _read_selection(path)
    return {init: _best_in(selection, init, path) for init in ("pretrained", "scratch")
            if _candidates(selection, init)}  # fmt: skip


def ranked_score(selection: dict[str, Any], name: str) -> float:
    """Row `name`'s score by the rule in force (cfg.SELECT_RULE) over the classes its
    selection file was measured for."""
    rows = selection["beats"]
    floor = rule_floor(rows, name, cfg.SELECT_RULE)
    return select_score(rows[name], select_classes(selection), floor)


def voting_pair_flags(pair: str) -> list[str]:
    """How a VOTING_PAIRS row votes, as its recorded flags say: its two recipes' models of the
    same training records and seed (a fold in `select`, a label share in `final`) together."""
    first, second = cfg.VOTING_PAIRS[pair]
    return [f"(evaluate --views {cfg.VIEWS} --ensemble: {first} with {second}, "
            "trained on the same records with the same seed)"]  # fmt: skip


def pair_recipe_flags(pair: str) -> list[str]:
    """A VOTING_PAIRS recipe's flags as `final` records them and DS2_LEDGER keys them: each
    member's own flags (a member changed under its name makes a new pair), then how it votes
    (last: pool_rounds reads a recipe's flags up to its first "(evaluate")."""
    members = cfg.VOTING_PAIRS[pair]
    return [*(flag for m in members for flag in (f"({m}:", *recipe_flags(m), ")")),
            *voting_pair_flags(pair)]  # fmt: skip


def pair_members(pair: str) -> list[tuple[str, str]]:
    """(init, configuration) of a VOTING_PAIRS row's two members, in voting order."""
    return [("scratch" if "--from-scratch" in cfg.CONFIGS[m] else "pretrained", m)
            for m in cfg.VOTING_PAIRS[pair]]  # fmt: skip


def best_pair(path: Path) -> str | None:
    """The VOTING_PAIRS row of a selection that scored above both its members (each over the
    pair's own VIEWS views) by SELECT_RULE over the classes it names, the best of those;
    None where none did: a pair that only ties its better member adds a model for nothing."""
    selection = json.loads(path.read_text())
    rows = selection["beats"]

    def score(name: str) -> float:
        return ranked_score(selection, name)

    winners = [
        pair for pair, members in cfg.VOTING_PAIRS.items()
        if pair in rows and all(viewed(m, cfg.VIEWS) in rows for m in members)
        and score(pair) > max(score(viewed(m, cfg.VIEWS)) for m in members)
    ]  # fmt: skip
    return max(winners, key=score, default=None)
