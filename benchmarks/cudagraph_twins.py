"""Each fold-0 seed-0 beat fine-tuning run of a model-study work folder (`select`), trained
again with its step replayed as one CUDA graph (`finetune --cudagraph`), the twins side by
side; the eager run, its seed-1 sibling and the twin scored on the other fold. Whether the
study can pass `--cudagraph` without changing what it measures: a twin should differ from its
eager run by no more than the two seeds differ (dropout draws other masks inside a graph). A
loose yardstick: the seed-1 run also starts from another pretraining run. AFIB runs
(`sel_afib_*`, no seed in their names) are not twinned. With `--eager` the twins are trained
eagerly again instead: how far the same eager run lands from itself, the noise beneath both.

    python3 benchmarks/cudagraph_twins.py --work /tmp/hlm-model --jobs 4   # on the GPU machine
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import model_configs as cfg

STAMP = re.compile(r"\.(sel_.+_fold0_s0_[0-9a-f]+)\.command")
TWIN_PREFIX = "twin_"
AGAIN_PREFIX = "again_"


def stamped_runs(work: Path) -> dict[str, list[str]]:
    """The fold-0 seed-0 runs of `work` that finished, with the finetune arguments their
    stamps (`model_runner.Runner.heartlm`) recorded."""
    runs = {}
    for stamp in sorted(work.glob(".sel_*.command")):
        match = STAMP.fullmatch(stamp.name)
        if match and (work / match.group(1) / "model.safetensors").is_file():
            argv = shlex.split(stamp.read_text())
            if argv[:2] == ["heartlm", "finetune"]:
                runs[match.group(1)] = argv[1:]
    return runs


def twin_argv(argv: list[str], twin: str, graph: bool = True) -> list[str]:
    """`argv` writing to `twin` (replacing a twin of an earlier call), replaying its step as a
    CUDA graph unless not `graph`."""
    at = argv.index("--out") + 1
    rest = [a for a in argv[at + 1 :] if a != "--cudagraph"]
    return [*argv[:at], twin, *rest, *(["--cudagraph"] if graph else []), "--overwrite"]


def twin_of(run: str, graph: bool) -> str:
    """The name of `run`'s twin: a graph (`twin_`) or an eager rerun (`again_`)."""
    return (TWIN_PREFIX if graph else AGAIN_PREFIX) + run


def sibling(run: str) -> str:
    """The seed-1 run of the same recipe and fold (its name ends in the same tag)."""
    return run.replace("_fold0_s0_", "_fold0_s1_")


def heartlm(*args: str, work: Path, log: Any = subprocess.PIPE) -> subprocess.Popen:
    """`heartlm ARGS` in `work`, its output to `log` (an open file) or a pipe."""
    env = {**os.environ, "HEARTLM_PROGRESS": "0"}
    argv = [sys.executable, "-m", "heartlm", *args]
    merged = subprocess.STDOUT if log is not subprocess.PIPE else None
    return subprocess.Popen(argv, cwd=work, env=env, stdout=log, stderr=merged, text=True)


def train_twins(
    work: Path, runs: dict[str, list[str]], jobs: int, graph: bool = True
) -> dict[str, dict[str, Any]]:
    """Train every twin, `jobs` at a time (as graphs unless not `graph`): wall seconds and the
    replay line of each."""
    waiting, running, done = list(runs.items()), {}, {}
    while waiting or running:
        while waiting and len(running) < jobs:
            run, argv = waiting.pop(0)
            twin = twin_of(run, graph)
            log = (work / f"{twin}.log").open("w")
            proc = heartlm(*twin_argv(argv, twin, graph), work=work, log=log)
            running[run] = (proc, time.time(), log)
        for run, (proc, start, log) in list(running.items()):
            if proc.poll() is not None:
                log.close()
                text = Path(log.name).read_text()
                replayed = re.findall(r"--cudagraph: .*", text)
                done[run] = {
                    "seconds": round(time.time() - start, 1),
                    "returncode": proc.returncode,
                    "replayed": replayed[-1] if replayed else None,
                    "tail": text.strip().splitlines()[-1:] if proc.returncode else [],
                }
                del running[run]
        time.sleep(1)
    return done


def score(work: Path, run: str) -> dict[str, Any] | None:
    """Accuracy and S, V F1 of `run` on fold 1 (fold 0 trained it), one view; None if absent."""
    if not (work / run / "model.safetensors").is_file():
        return None
    records = [str(r) for r in cfg.FOLDS[1]]
    proc = heartlm("evaluate", run, "tok_beats", "--json", "--device", "auto", "--views", "1",
                   "--records", *records, work=work)  # fmt: skip
    out, _ = proc.communicate()
    if proc.returncode:
        return None
    report = json.loads(out)
    return {"accuracy": report["accuracy"],
            **{f"{c} F1": report["per_class"][c]["f1"] for c in ("S", "V")},
            "last losses": last_losses(work / run)}  # fmt: skip


def last_losses(run: Path, n: int = 50) -> float | None:
    """Mean training loss over the run's last `n` logged steps."""
    path = run / "metrics.jsonl"
    if not path.is_file():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if '"loss"' in line]
    losses = [r["loss"] for r in rows if "loss" in r][-n:]
    return round(sum(losses) / len(losses), 4) if losses else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="a model-study work folder")
    parser.add_argument("--jobs", type=int, default=4, help="twins trained at once")
    parser.add_argument("--eager", action="store_true", help="train the twins eagerly again")
    parser.add_argument("--out", type=Path, help="JSON result (default WORK/cudagraph_twins.json)")
    args = parser.parse_args()
    graph = not args.eager
    twin_kind = "graph" if graph else "again"
    runs = stamped_runs(args.work)
    if not runs:
        print(f"{args.work}: no finished fold-0 seed-0 `select` runs", file=sys.stderr)
        return 2
    trained = train_twins(args.work, runs, args.jobs, graph=graph)
    rows = []
    for run in runs:
        row = {"run": run, "twin": trained[run]}
        named = {"eager": run, "seed 1": sibling(run), twin_kind: twin_of(run, graph)}
        for kind, name in named.items():
            row[kind] = score(args.work, name)
        rows.append(row)
        print(f"\n{run}\n  twin: {trained[run]}")
        for kind in named:
            print(f"  {kind:7s} {row[kind]}")
    out = args.out or args.work / f"cudagraph_twins{'_eager' if args.eager else ''}.json"
    out.write_text(json.dumps(rows, indent=1))
    return 0 if all(t["returncode"] == 0 for t in trained.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
