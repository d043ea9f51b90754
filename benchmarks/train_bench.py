"""Training throughput of heartlm's engine (tokens/s, MFU) on random tokens, with variants.

Runs the real loop (`heartlm.train.loop.train`) for each window:batch config and each
variant, and prints one JSON line per run (also appended to --out). Throughput is the
median over the log windows after the warm-up (each window ends with a host sync).

    python benchmarks/train_bench.py --configs 128:256,1024:32 --out results/train.jsonl \
        --variants "default:;cudnn:sdpa=cudnn;rms:norm=rmsnorm"

Variant keys: compile (0/1), compile_mode, sdpa (auto/flash/cudnn/efficient/math), norm
(layernorm/rmsnorm), micro (micro-batch), gather (1: vocabulary head only at masked beats),
precision (bf16/fp32), tf32 (0/1), compile_loss (1: compile masking + loss with the model),
cudagraph (1: the whole optimizer step as one CUDA graph), act (gelu/gelu_tanh), bf16res
(1: bf16 residual stream), ac (none/full/selective: activation checkpointing), ind_<name>
(a torch._inductor.config knob for this run, e.g. ind_coordinate_descent_tuning=1; bool
knobs take 0/1).

Activation checkpointing of `large` at window 1024 (issue 15; memory is max_mem_gib):

    python benchmarks/train_bench.py --preset large --configs 1024:16 --out $OUT/ac.jsonl \
        --variants "none:;full:ac=full;selective:ac=selective"

The sweep for issue 4 item 6 (single-GPU MFU of the base preset):

    python benchmarks/train_bench.py --configs 128:256,1024:32 --out $OUT/mfu.jsonl \
        --variants "default:;loss:compile_loss=1;tanh:act=gelu_tanh;bf16res:bf16res=1"
    python benchmarks/train_bench.py --configs 128:256,1024:32 --out $OUT/mfu.jsonl \
        --variants "graph:cudagraph=1;graph_tuned:cudagraph=1,compile_loss=1,\
ind_coordinate_descent_tuning=1;all:...,bf16res=1,act=gelu_tanh;graph_flash:..."

(CUDA-graph variants in a second process: a failed capture can spoil the CUDA context.)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from heartlm.model import HeartLM, model_config
from heartlm.runinfo import versions
from heartlm.shards import NUM_SPECIAL
from heartlm.train.data import TokenData, WindowSampler
from heartlm.train.distributed import DistEnv
from heartlm.train.flops import flops_per_token
from heartlm.train.loop import TrainConfig, train
from heartlm.train.metrics import read_metrics
from heartlm.train.objectives import MaskedBeats

VOCAB = 1032


def random_tokens(n_records: int, beats: int, seed: int = 0) -> TokenData:
    rng = np.random.default_rng(seed)
    n = n_records * beats
    return TokenData(
        morph=rng.integers(NUM_SPECIAL, VOCAB, n).astype(np.int32),
        rhythm=rng.integers(NUM_SPECIAL, NUM_SPECIAL + 8, n).astype(np.int32),
        aami=rng.integers(0, 5, n).astype(np.int8),
        rhythm_label=rng.integers(0, 8, n).astype(np.int8),
        boundaries=np.arange(0, n + 1, beats, dtype=np.int64),
        records=[f"r{i}" for i in range(n_records)],
        vocab_size=VOCAB,
        rhythm_vocab_size=NUM_SPECIAL + 8,
    )


def parse_variants(text: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for item in filter(None, (v.strip() for v in text.split(";"))):
        name, _, rest = item.partition(":")
        opts = dict(kv.split("=", 1) for kv in filter(None, rest.split(",")))
        out.append((name, opts))
    return out


def inductor_knobs(opts: dict[str, str]) -> dict[str, object]:
    """torch._inductor.config values from the variant's ind_<name>=<value> keys."""
    import torch._inductor.config as ind

    knobs: dict[str, object] = {}
    for key, text in opts.items():
        if not key.startswith("ind_"):
            continue
        name = key[4:]
        current = getattr(ind, name)  # AttributeError: an unknown knob fails the variant
        if isinstance(current, bool):
            knobs[name] = text == "1"
        elif isinstance(current, int):
            knobs[name] = int(text)
        else:
            knobs[name] = text
    return knobs


def run_one(
    args: argparse.Namespace,
    window: int,
    batch: int,
    name: str,
    opts: dict[str, str],
    device: torch.device,
) -> dict:
    torch._dynamo.reset()
    gc.collect()  # the last run's model, optimizer and graphs
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)  # max_mem_gib is this run's own peak
    torch.backends.cuda.matmul.allow_tf32 = opts.get("tf32", "1") == "1"
    data = random_tokens(args.records, max(window * 4, args.beats_per_record))
    sampler = WindowSampler(data, window, window, seed=0, device=device)
    mcfg = model_config(
        args.preset,
        vocab_size=VOCAB,
        rhythm_vocab_size=data.rhythm_vocab_size,
        max_len=window,
        norm=opts.get("norm", "layernorm"),
        activation=opts.get("act", "gelu_tanh"),
        bf16_residual=opts.get("bf16res", "1") == "1",
    )
    model = HeartLM(mcfg)
    objective = MaskedBeats(VOCAB, gather_head=opts.get("gather", "1") == "1")
    steps = args.warmup + args.timed
    cfg = TrainConfig(
        steps=steps,
        batch=batch,
        micro_batch=int(opts["micro"]) if "micro" in opts else None,
        lr=1e-4,
        warmup_steps=10,
        log_every=args.log_every,
        val_every=0,
        ckpt_every=0,
        ac=opts.get("ac", "none"),
        compile=opts.get("compile", "1" if device.type == "cuda" else "0") == "1",
        compile_mode=opts.get("compile_mode"),
        sdpa=opts.get("sdpa", "auto"),
        compile_objective=opts.get("compile_loss", "0") == "1",
        cudagraph=opts.get("cudagraph", "0") == "1",
        precision=opts.get("precision", "bf16"),
        final_save=False,
    )
    t0 = time.perf_counter()
    knobs = inductor_knobs(opts)
    patch = torch._inductor.config.patch(knobs) if knobs else contextlib.nullcontext()
    with tempfile.TemporaryDirectory() as tmp, patch:
        train(cfg, model, objective, sampler, None, Path(tmp), DistEnv(device=device))
        rows = read_metrics(tmp)
    timed = [r for r in rows if r["step"] > args.warmup]
    tps = statistics.median(r["tokens_per_s"] for r in timed)
    fpt = flops_per_token(mcfg, window, objective.predicted_per_window(window))
    return {
        "impl": "heartlm",
        "variant": name,
        "options": opts,
        "preset": args.preset,
        "window": window,
        "batch": batch,
        "tokens_per_s": round(tps, 1),
        "mfu": round(statistics.median(r["mfu"] for r in timed), 4),
        "step_time_s": round(statistics.median(r["step_time_s"] for r in timed), 5),
        "flops_per_token": fpt,
        "params": model.num_params(),
        "max_mem_gib": round(max(r["max_mem_gib"] for r in rows), 2),
        "final_loss": rows[-1]["loss"],
        "timed_steps": len(timed),
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def table(path: str) -> str:
    """A markdown table of the JSON lines in `path` (heartlm and peer rows)."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    out = [
        "| impl | variant | window | batch | tokens/s | MFU | step s | max mem GiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if "error" in r:
            out.append(
                f"| {r['impl']} | {r.get('variant', '')} | {r.get('window')} | "
                f"{r.get('batch')} | error: {r['error'][:80]} | | | |"
            )
            continue
        out.append(
            f"| {r['impl']} | {r.get('variant', '')} | {r['window']} | {r['batch']} | "
            f"{r['tokens_per_s']:.0f} | {r['mfu']:.3f} | {r['step_time_s']:.4f} | "
            f"{r['max_mem_gib']} |"
        )
    if rows:
        first = rows[0]
        out.append(
            f"\n{first.get('device')}, {first.get('date')}, "
            f"torch {first.get('versions', {}).get('torch')}"
        )
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", metavar="JSONL", help="only print a markdown table of a results file")
    p.add_argument("--preset", default="base")
    p.add_argument("--configs", default="128:256,1024:32", help="window:batch,...")
    p.add_argument("--variants", default="default:", help="name:key=val,...;name2:...")
    p.add_argument("--warmup", type=int, default=20, help="steps not timed (compile)")
    p.add_argument("--timed", type=int, default=30)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--records", type=int, default=64)
    p.add_argument("--beats-per-record", type=int, default=8192)
    p.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default=None, help="append JSON lines here too")
    args = p.parse_args()
    if args.table:
        print(table(args.table))
        return 0
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    env = {
        "device": card,
        "host": platform.node(),
        "versions": versions(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([sys.executable, *sys.argv]),
    }
    for item in args.configs.split(","):
        window, batch = (int(x) for x in item.split(":"))
        for name, opts in parse_variants(args.variants):
            try:
                result = run_one(args, window, batch, name, opts, device)
            except Exception as exc:  # one failing variant must not end the sweep
                result = {
                    "impl": "heartlm",
                    "variant": name,
                    "options": opts,
                    "window": window,
                    "batch": batch,
                    "error": repr(exc)[:500],
                }
            line = json.dumps({**result, **env})
            print(line, flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
