"""Does pretraining pay? DS2 beat classes and AFIB windows, pretrained vs from scratch.

    .venv/bin/python benchmarks/finetune_results.py --profile gpu --out /tmp/ft_results
    .venv/bin/python benchmarks/finetune_results.py --profile cpu --out /tmp/ft_results_cpu

One script runs the whole recipe through the `heartlm` command (every command is logged
and written into the results), then writes `results.json` and `results.md` into --out and
copies them to `benchmarks/results/finetune_<profile>.{json,md}`.

Data (read in place from --ecg, default ../shared/ecg):

- Pretraining, no labels used: MIT-BIH records outside DS2 (DS1 + the 4 paced records),
  NSTDB 118e00/118e06/119e06 (same patients as DS1 records 118/119, so never a test set),
  LUDB (60 records, 500 Hz, resampled by ingest) and a synthetic corpus (`heartlm synth`).
- Beat classes: fine-tuned on DS1 (validation records carved from DS1), scored on DS2 only;
  from the pretrained run and from scratch (same architecture), with 100 % and 10 % of
  DS1's labels.
- AFIB windows: (a) trained on MIT-BIH outside DS2 plus LUDB, scored on DS2 (AFIB records
  202, 210, 219, 221, 222); (b) trained on MIT-BIH outside DS2 only, scored on DS2 and on
  the raw LUDB folder (LUDB's labels never seen; its unlabelled signals were in pretraining).

Profiles: `gpu` (small preset, bounded steps: a few minutes of one H100) gives results;
`cpu` (tiny preset, a handful of records and steps) only proves that the pipeline runs, and
its numbers are pipeline checks, not results.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from heartlm.ecg.labels import MITDB_DS1, MITDB_DS2, MITDB_PACED
from heartlm.runinfo import versions

REPO = Path(__file__).resolve().parents[1]
GOALS = {"accuracy": 0.95, "V_f1": 0.92, "S_f1": 0.75, "afib_f1": 0.95}

PROFILES = {
    "gpu": {
        "preset": "small",
        "mitdb_pretrain": list(MITDB_DS1 + MITDB_PACED),
        "mitdb_all": list(MITDB_DS1 + MITDB_DS2 + MITDB_PACED),
        "ludb": None,  # every record
        # 90 k unlabelled real beats alone over-fit in a few hundred steps: add ~430 k synthetic
        # beats and cut overlapping windows (stride 16), ~12 passes in all.
        "synth": ["--records", "200", "--minutes", "30", "--fs", "360"],
        "vocab": 512,
        "pretrain": ["--window", "128", "--stride", "16", "--batch", "256", "--steps", "1500",
                     "--warmup", "150", "--lr", "6e-4", "--val-every", "250"],
        # Beat context of 128 (the model's max_len), sqrt class weights, best validation F1:
        # chosen on a 2-fold record split of DS1 (docs/finetune.md), never on DS2.
        "finetune": ["--window", "128", "--stride", "32", "--epochs", "20", "--batch", "64",
                     "--lr", "3e-4", "--warmup", "100", "--class-weight-power", "0.5"],
        "afib": ["--window", "32", "--stride", "16", "--epochs", "20", "--batch", "64",
                 "--lr", "3e-4", "--warmup", "100", "--class-weight-power", "0.5"],
        "device": "auto",
        "workers": [],
    },
    "cpu": {
        "preset": "tiny",
        "mitdb_pretrain": ["101", "106", "119", "201", "203", "208"],
        "mitdb_all": ["101", "106", "119", "201", "203", "208", "100", "202", "210"],
        "ludb": ["1", "8", "38", "2", "3", "4"],
        "synth": ["--records", "4", "--minutes", "2", "--fs", "360"],
        "vocab": 64,
        "pretrain": ["--window", "32", "--batch", "16", "--steps", "20", "--warmup", "5",
                     "--val-every", "10"],
        "finetune": ["--window", "32", "--steps", "12", "--batch", "16", "--warmup", "2",
                     "--val-every", "4"],
        "afib": ["--window", "16", "--steps", "12", "--batch", "16", "--warmup", "2",
                 "--val-every", "4"],
        "device": "cpu",
        "workers": ["--workers", "1"],
    },
}  # fmt: skip


class Recipe:
    """Runs heartlm commands in order, logging each one with its wall time."""

    def __init__(self, out: Path, resume: bool) -> None:
        self.out = out
        self.resume = resume
        self.commands: list[dict] = []

    def heartlm(self, *args: str | Path, capture: bool = False) -> str:
        argv = [sys.executable, "-m", "heartlm", *map(str, args)]
        shown = "heartlm " + shlex.join(argv[3:])
        made = _output_of(argv[3:])
        # pretrain writes into its folder as it goes: done only once the model is exported.
        marker = "model.safetensors" if argv[3] == "pretrain" else ""
        if self.resume and made and (self.out / made / marker).exists():
            print(f"# done before: {shown}", file=sys.stderr, flush=True)
            self.commands.append({"command": shown, "seconds": None, "rc": 0})
            return ""
        print(f"$ {shown}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        done = subprocess.run(argv, cwd=self.out, text=True, stdout=subprocess.PIPE if capture
                              else None)  # fmt: skip
        seconds = time.perf_counter() - t0
        self.commands.append(
            {"command": shown, "seconds": round(seconds, 1), "rc": done.returncode}
        )
        if done.returncode != 0:
            raise SystemExit(f"failed ({done.returncode}): {shown}")
        return done.stdout or ""

    def evaluate(self, run: str, data: str | Path, *extra: str) -> dict:
        return json.loads(self.heartlm("evaluate", run, data, "--json", *extra, capture=True))


def _output_of(args: list[str]) -> str | None:
    """The folder a heartlm command writes (`--out X`, or synth's first argument)."""
    if args[0] == "synth":
        return args[1]
    return args[args.index("--out") + 1] if "--out" in args else None


def record_paths(folder: Path, names: list[str] | None) -> list[str]:
    if names is None:
        return [str(folder)]
    return [str(folder / n) for n in names]


def run_recipe(profile: str, ecg: Path, out: Path, seed: int, resume: bool) -> dict:
    p = PROFILES[profile]
    r = Recipe(out, resume)
    dev = ["--device", p["device"]]
    cmp = ["--no-compile"]
    mitdb, ludb, nstdb = ecg / "mitdb", ecg / "ludb", ecg / "nstdb"

    # 1. Unlabelled pretraining corpus: nothing from DS2.
    r.heartlm("synth", "synth", *p["synth"], "--seed", str(seed))
    pre_sources = [*record_paths(mitdb, p["mitdb_pretrain"]), str(nstdb)]
    pre_sources += [*record_paths(ludb, p["ludb"]), "synth"]
    r.heartlm("ingest", *pre_sources, "--out", "store_pre", *p["workers"])
    r.heartlm("tokenize", "store_pre", "--out", "tok_pre", "--vocab", str(p["vocab"]),
              "--seed", str(seed))  # fmt: skip
    r.heartlm("pretrain", "tok_pre", "--out", "pre", "--preset", p["preset"], *p["pretrain"],
              "--seed", str(seed), *dev, *cmp)  # fmt: skip

    # 2. Labelled token folders with the pretraining codebook.
    r.heartlm("ingest", *record_paths(mitdb, p["mitdb_all"]), "--out", "store_mitdb",
              *p["workers"])  # fmt: skip
    r.heartlm("tokenize", "store_mitdb", "--out", "tok_mitdb", "--codebook", "tok_pre")
    afib_sources = record_paths(mitdb, p["mitdb_all"]) + record_paths(ludb, p["ludb"])
    r.heartlm("ingest", *afib_sources, "--out", "store_afib", *p["workers"])
    r.heartlm("tokenize", "store_afib", "--out", "tok_afib", "--codebook", "tok_pre")

    # 3. Beat classes: DS1 -> DS2, pretrained vs scratch, 100 % vs 10 % of the labels.
    beats = []
    for init in ("pretrained", "scratch"):
        for fraction in ("1.0", "0.1"):
            name = f"ft_beats_{init}_{fraction}"
            extra = ["--from-scratch"] if init == "scratch" else []
            r.heartlm("finetune", "pre", "--task", "beats", "--data", "tok_mitdb", "--out", name,
                      "--label-fraction", fraction, *extra, *p["finetune"], "--seed", str(seed),
                      *dev, *cmp)  # fmt: skip
            rep = r.evaluate(name, "tok_mitdb")
            beats.append({"run": name, "init": init, "label_fraction": float(fraction), **rep})

    # 4. AFIB windows with record-level splits.
    afib = []
    mitdb_train = [n for n in p["mitdb_all"] if n not in MITDB_DS2]
    for init in ("pretrained", "scratch"):
        extra = ["--from-scratch"] if init == "scratch" else []
        name = f"ft_afib_mitdb_ludb_{init}"
        r.heartlm("finetune", "pre", "--task", "afib", "--data", "tok_afib", "--out", name,
                  *extra, *p["afib"], "--seed", str(seed), *dev, *cmp)  # fmt: skip
        rep = r.evaluate(name, "tok_mitdb")
        afib.append({"run": name, "init": init, "train": "MIT-BIH non-DS2 + LUDB",
                     "test": "MIT-BIH DS2", **rep})  # fmt: skip
    name = "ft_afib_mitdb_pretrained"
    r.heartlm("finetune", "pre", "--task", "afib", "--data", "tok_mitdb", "--out", name,
              "--records", *mitdb_train, *p["afib"], "--seed", str(seed), *dev, *cmp)  # fmt: skip
    for test, data in (("MIT-BIH DS2", "tok_mitdb"), ("LUDB (raw WFDB)", str(ludb))):
        rep = r.evaluate(name, data)
        afib.append({"run": name, "init": "pretrained", "train": "MIT-BIH non-DS2",
                     "test": test, **rep})  # fmt: skip
    data = {
        "pretrain": "MIT-BIH outside DS2, NSTDB, LUDB and the synthetic corpus (no labels used)",
        "pretrain_sources": pre_sources,
        "beats_train": "MIT-BIH DS1 (validation records carved from DS1)",
        "beats_test": "MIT-BIH DS2",
    }
    return {"beats": beats, "afib": afib, "data": data, "commands": r.commands}


def machine() -> dict:
    import torch

    info = {"host": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def markdown(results: dict) -> str:
    lines = [
        f"# Fine-tuning results ({results['profile']} profile)",
        "",
        f"{results['date']} on {', '.join(f'{k} {v}' for k, v in results['machine'].items())}; "
        + ", ".join(f"{k} {v}" for k, v in results["versions"].items()),
        "",
        f"Command: `{results['command']}` ({results['total_s']} s in all)",
        "",
        f"Pretraining data: {results['data']['pretrain']}: "
        + " ".join(Path(x).name for x in results["data"]["pretrain_sources"]),
        "",
    ]
    if results["profile"] == "cpu":
        lines += ["**CPU profile: a pipeline check with the tiny preset on a handful of records,"
                  " not results.**", ""]  # fmt: skip
    lines += [
        "## MIT-BIH DS2 beat classes (trained on DS1, inter-patient)",
        "",
        f"Goals: accuracy >= {GOALS['accuracy']}, V F1 >= {GOALS['V_f1']}, "
        f"S F1 >= {GOALS['S_f1']}.",
        "",
        "| init | DS1 labels | beats | accuracy | N F1 | S Se | S +P | S F1 | V Se | V +P | "
        "V F1 | F F1 | Q F1 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for b in results["beats"]:
        c = b["per_class"]
        lines.append(
            f"| {b['init']} | {b['label_fraction']:.0%} | {b['n_beats']} | {b['accuracy']:.4f} | "
            f"{c['N']['f1']:.3f} | {c['S']['se']:.3f} | {c['S']['ppv']:.3f} | {c['S']['f1']:.3f} | "
            f"{c['V']['se']:.3f} | {c['V']['ppv']:.3f} | {c['V']['f1']:.3f} | "
            f"{c['F']['f1']:.3f} | {c['Q']['f1']:.3f} |"
        )
    lines += [
        "",
        f"## AFIB windows (goal F1 >= {GOALS['afib_f1']}; rule: {results['afib_rule']})",
        "",
        "| init | trained on | tested on | windows (AFIB) | F1 | Se | +P | AUROC |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for a in results["afib"]:
        s = a["afib"]
        auroc = "n/a" if s["auroc"] is None else f"{s['auroc']:.4f}"
        lines.append(
            f"| {a['init']} | {a['train']} | {a['test']} | {a['n_windows']} "
            f"({a['n_afib_windows']}) | {s['f1']:.4f} | {s['se']:.4f} | {s['ppv']:.4f} | "
            f"{auroc} |"
        )
    lines += ["", "## Commands (run in the output folder, in this order)", ""]
    lines += [
        f"    {c['command']}    # " + ("done in an earlier run" if c["seconds"] is None
                                      else f"{c['seconds']} s")
        for c in results["commands"]
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", choices=sorted(PROFILES), default="gpu")
    ap.add_argument("--ecg", type=Path, default=REPO.parent / "shared" / "ecg")
    ap.add_argument("--out", type=Path, required=True, help="work folder (created, must be new)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--overwrite", action="store_true", help="remove --out first")
    ap.add_argument(
        "--resume", action="store_true", help="keep --out and skip the commands already done"
    )
    args = ap.parse_args()
    if not (args.ecg / "mitdb").is_dir():
        ap.error(f"{args.ecg}: no mitdb folder (give --ecg)")
    if args.out.exists() and not args.resume:
        if not args.overwrite:
            ap.error(f"{args.out} exists (use --overwrite or --resume)")
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    ecg = args.ecg.resolve()
    t0 = time.perf_counter()
    found = run_recipe(args.profile, ecg, args.out.resolve(), args.seed, args.resume)
    from heartlm.labelled.windows import AFIB_RULE

    results = {
        "profile": args.profile,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "versions": versions(),
        "goals": GOALS,
        "afib_rule": AFIB_RULE,
        "total_s": round(time.perf_counter() - t0, 1),
        **found,
    }
    text = json.dumps(results, indent=2) + "\n"
    (args.out / "results.json").write_text(text)
    (args.out / "results.md").write_text(markdown(results))
    dest = REPO / "benchmarks" / "results"
    dest.mkdir(exist_ok=True)
    (dest / f"finetune_{args.profile}.json").write_text(text)
    (dest / f"finetune_{args.profile}.md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
