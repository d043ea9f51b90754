"""`heartlm tokenize STORE --out TOKENS`: command-line front end of `heartlm.tokens.tokenize`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from heartlm.errors import HeartlmError
from heartlm.tokens.pipeline import TokenizeConfig, tokenize

_DEFAULTS = TokenizeConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = _DEFAULTS
    parser.add_argument(
        "store", type=Path, metavar="STORE", help="beat store folder (from `heartlm ingest`)"
    )
    parser.add_argument(
        "--out", type=Path, required=True, metavar="TOKENS", help="token folder to write"
    )
    parser.add_argument(
        "--vocab",
        type=int,
        default=d.vocab,
        metavar="K",
        help="codebook size (default %(default)s; 256-8192)",
    )
    parser.add_argument(
        "--codebook",
        type=Path,
        metavar="FILE",
        help="reuse a codebook: a token folder or its codebook.json",
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=d.sample,
        metavar="N",
        help="beats sampled to learn the codebook (default %(default)s)",
    )
    parser.add_argument(
        "--iters",
        type=int,
        default=d.iters,
        metavar="N",
        help="k-means iterations at most (default %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=d.seed,
        metavar="S",
        help="seed of sample and k-means (default %(default)s)",
    )
    parser.add_argument(
        "--rr-window",
        type=int,
        default=d.rr_window,
        metavar="N",
        help="beats in the local mean RR (default %(default)s)",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=d.batch,
        metavar="N",
        help="beats per assignment batch (default %(default)s)",
    )
    parser.add_argument("--device", default=d.device, help="auto (default), cpu, cuda or cuda:N")
    parser.add_argument(
        "--decode", action="store_true", help="write decode/: reconstruction PNG and report"
    )
    parser.add_argument(
        "--decode-records",
        type=int,
        default=d.decode_records,
        metavar="N",
        help="records in the PNG (default %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")


def run(args: argparse.Namespace) -> int:
    config = TokenizeConfig(
        vocab=args.vocab,
        sample=args.sample,
        iters=args.iters,
        seed=args.seed,
        codebook=args.codebook,
        rr_window=args.rr_window,
        batch=args.batch,
        device=args.device,
        decode=args.decode,
        decode_records=args.decode_records,
        overwrite=args.overwrite,
    )
    try:
        summary = tokenize(args.store, args.out, config)
    except ValueError as exc:
        raise HeartlmError(str(exc)) from None
    if args.json:
        print(json.dumps(summary, indent=1, default=float))
        return 0
    c = summary["counts"]
    print(
        f"{args.out}: {c['beats']} beats of {c['records']} records,"
        f" {c['codes_used']} codes used, {c['unk_morph']} UNK morphology,"
        f" {c['unk_rhythm']} UNK rhythm, {summary['beats_per_s']:.0f} beats/s"
    )
    if "decode" in summary:
        from heartlm.tokens.decode import format_table

        sys.stdout.write(format_table(summary["decode"]))
    return 0
