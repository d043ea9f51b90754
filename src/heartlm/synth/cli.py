"""`heartlm synth OUT`: write a synthetic, labelled ECG corpus as WFDB records."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from heartlm.synth.corpus import SynthConfig, write_config

_DEFAULTS = SynthConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", type=Path, metavar="OUT", help="output folder for the records")
    parser.add_argument(
        "--records",
        type=int,
        default=_DEFAULTS.records,
        help="number of records (default: %(default)s)",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=_DEFAULTS.minutes,
        help="length of each record (default: %(default)s)",
    )
    parser.add_argument(
        "--fs",
        type=float,
        default=_DEFAULTS.fs,
        help="sampling rate, 100-1000 Hz (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=_DEFAULTS.seed,
        help="random seed; same seed, same bytes (default: %(default)s)",
    )
    parser.add_argument(
        "--leads",
        type=int,
        default=_DEFAULTS.leads,
        choices=(1, 2),
        help="1: MLII; 2: MLII, V1 (default: %(default)s)",
    )
    parser.add_argument(
        "--afib-fraction",
        type=float,
        default=_DEFAULTS.afib_fraction,
        help="share of records with AFIB episodes (default: %(default)s)",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="parallel processes (default: all cores)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    parser.add_argument("--json", action="store_true", help="print run.json's counts as JSON")


def run(args: argparse.Namespace) -> int:
    config = SynthConfig(
        records=args.records,
        minutes=args.minutes,
        fs=args.fs,
        seed=args.seed,
        leads=args.leads,
        afib_fraction=args.afib_fraction,
    )
    info = write_config(args.out, config, workers=args.workers, overwrite=args.overwrite)
    if args.json:
        json.dump(info["counts"], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        counts = info["counts"]
        classes = " ".join(f"{k}={v}" for k, v in counts["classes"].items())
        print(f"{args.out}: {counts['records']} records, {counts['beats']} beats ({classes})")
    return 0
