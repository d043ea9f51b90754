"""The peer: Hugging Face `BertForMaskedLM` (sdpa) under `transformers.Trainer`, random tokens.

Same size as heartlm's `base` (hidden 768, 12 layers, 12 heads, intermediate 3072,
vocabulary 1032), bf16, fused AdamW, 4 DataLoader workers, a fixed number of steps;
tokens/s over the timed steps after the warm-up. One JSON line per window:batch config.

    python benchmarks/hf_peer.py --configs 128:256,1024:32 --out results/train.jsonl
    torchrun --standalone --nproc-per-node 4 benchmarks/hf_peer.py ...   # DDP, 4 GPUs

Under torchrun the Trainer runs DDP (find_unused_parameters off: every weight is used);
`batch` is per GPU, `tokens_per_s` counts all GPUs, `mfu` is per GPU, and rank 0 alone
writes the line.

MFU uses the FLOPs this model computes per token (heartlm.train.flops formula with the
vocabulary head at every position, plus BERT's 768x768 head transform).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time

import numpy as np
import torch

VOCAB = 1032
MASK_ID = 1


class RandomMLM(torch.utils.data.Dataset):
    """Random token windows with 15 % of positions masked (labels -100 elsewhere)."""

    def __init__(self, n: int, window: int, seed: int = 0) -> None:
        self.n, self.window, self.seed = n, window, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        rng = np.random.default_rng(self.seed * 1_000_003 + i)
        ids = rng.integers(5, VOCAB, self.window)
        labels = np.full(self.window, -100)
        pick = rng.random(self.window) < 0.15
        labels[pick] = ids[pick]
        ids = np.where(pick, MASK_ID, ids)
        return {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(labels)}


def run_one(args: argparse.Namespace, window: int, batch: int) -> dict:
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    cuda = torch.cuda.is_available() and args.device == "cuda"
    cfg = BertConfig(
        vocab_size=VOCAB,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=4 * args.hidden,
        max_position_embeddings=max(512, window),
        pad_token_id=0,
        attn_implementation="sdpa",
    )
    model = BertForMaskedLM(cfg)
    steps = args.warmup + args.timed
    marks: dict[str, float] = {}

    class Clock(TrainerCallback):
        def on_step_end(self, targs, state, control, **kw):
            if state.global_step in (args.warmup, steps):
                if cuda:
                    torch.cuda.synchronize()
                marks[state.global_step] = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:
        targs = TrainingArguments(
            output_dir=tmp,
            per_device_train_batch_size=batch,
            max_steps=steps,
            bf16=cuda,
            optim="adamw_torch_fused" if cuda else "adamw_torch",
            learning_rate=1e-4,
            warmup_steps=10,
            dataloader_num_workers=args.workers,
            dataloader_pin_memory=cuda,
            logging_steps=10_000,
            save_strategy="no",
            report_to=[],
            disable_tqdm=True,
            seed=0,
            use_cpu=not cuda,
            ddp_find_unused_parameters=False,
        )
        trainer = Trainer(
            model=model,
            args=targs,
            train_dataset=RandomMLM(steps * batch, window),
            callbacks=[Clock()],
        )
        with contextlib.redirect_stdout(sys.stderr):  # Trainer prints its log dicts
            trainer.train()
    seconds = marks[steps] - marks[args.warmup]
    world = int(os.environ.get("WORLD_SIZE", "1"))
    tps = args.timed * batch * window / seconds * world
    d, L = args.hidden, args.layers
    n_body = L * (4 * d * d + 2 * d * 4 * d)
    v_pad = VOCAB  # BERT does not pad its vocabulary
    fpt = 6 * n_body + 12 * L * window * d + 6 * d * v_pad + 6 * d * d
    peak = 0.0
    if cuda:
        from heartlm.train.flops import peak_flops

        peak = peak_flops(torch.device("cuda"))
    return {
        "impl": "hf_bert_trainer",
        "variant": "sdpa",
        "window": window,
        "batch": batch,
        "tokens_per_s": round(tps, 1),
        "world_size": world,
        "mfu": round(fpt * tps / (peak * world), 4) if peak else 0.0,
        "step_time_s": round(seconds / args.timed, 5),
        "flops_per_token": fpt,
        "params": sum(p.numel() for p in model.parameters()),
        "timed_steps": args.timed,
        "max_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else 0.0,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="128:256,1024:32", help="window:batch,...")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--timed", type=int, default=30)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    try:
        import transformers
    except ImportError:
        print(
            json.dumps(
                {
                    "impl": "hf_bert_trainer",
                    "error": "transformers is not installed: pip install 'heartlm[bench]'",
                }
            )
        )
        return 1
    from heartlm.runinfo import versions

    card = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor()
    env = {
        "device": card,
        "host": platform.node(),
        "versions": {**versions(), "transformers": transformers.__version__},
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([sys.executable, *sys.argv]),
    }
    for item in args.configs.split(","):
        window, batch = (int(x) for x in item.split(":"))
        try:
            result = run_one(args, window, batch)
        except Exception as exc:  # report and go on to the next config
            result = {
                "impl": "hf_bert_trainer",
                "window": window,
                "batch": batch,
                "error": repr(exc)[:500],
            }
        line = json.dumps({**result, **env})
        if os.environ.get("RANK", "0") != "0":
            continue
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
