"""`heartlm ingest SRC... --out STORE`: the command-line face of `heartlm.ingest.ingest`."""

from __future__ import annotations

import argparse
from pathlib import Path

from heartlm.errors import HeartlmError
from heartlm.ingest.config import BEAT_SOURCES, IngestConfig

_DEFAULTS = IngestConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "sources",
        nargs="+",
        type=Path,
        metavar="SRC",
        help="WFDB record paths or folders of records",
    )
    parser.add_argument(
        "--out", type=Path, required=True, metavar="STORE", help="beat store folder to write"
    )
    parser.add_argument(
        "--lead",
        default=None,
        metavar="NAME",
        help="lead to keep, case-insensitive; NAME,NAME,... takes the first a record has "
        "(default: MLII, II, V5, V1, ...); a record without it is refused",
    )
    parser.add_argument(
        "--fs",
        type=float,
        default=_DEFAULTS.fs,
        metavar="HZ",
        help=f"store sampling rate (default {_DEFAULTS.fs:g})",
    )
    parser.add_argument(
        "--pre",
        type=float,
        default=_DEFAULTS.pre,
        metavar="S",
        help=f"seconds before the R peak (default {_DEFAULTS.pre:g})",
    )
    parser.add_argument(
        "--post",
        type=float,
        default=_DEFAULTS.post,
        metavar="S",
        help=f"seconds after the R peak (default {_DEFAULTS.post:g})",
    )
    parser.add_argument(
        "--align",
        type=float,
        default=_DEFAULTS.align,
        metavar="S",
        help="snap each beat to the largest |signal| within S seconds "
        f"(default {_DEFAULTS.align:g}; 0 = off)",
    )
    parser.add_argument(
        "--band",
        type=_band,
        default=_DEFAULTS.band,
        metavar="LO,HI",
        help="band-pass corners in Hz (default 0.5,40)",
    )
    parser.add_argument(
        "--beats",
        choices=BEAT_SOURCES,
        default=_DEFAULTS.beats,
        help="beats from reference annotations, our detector, or auto "
        "(annotations when the record has them)",
    )
    parser.add_argument(
        "--annotations",
        default=_DEFAULTS.annotations,
        metavar="EXT",
        help="reference annotation extensions, comma-separated, first found wins "
        "(default atr; LUDB: ii)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=_DEFAULTS.workers,
        metavar="N",
        help="worker processes (default: one per core)",
    )
    parser.add_argument(
        "--skip-bad",
        action="store_true",
        help="skip unreadable records with a warning instead of stopping",
    )
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing STORE")  # fmt: skip


def _band(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO,HI in Hz, got {text!r}") from None
    return lo, hi


def run(args: argparse.Namespace) -> int:
    from heartlm.ingest.pipeline import ingest

    try:
        config = IngestConfig(
            lead=args.lead,
            fs=args.fs,
            pre=args.pre,
            post=args.post,
            align=args.align,
            band=args.band,
            beats=args.beats,
            annotations=args.annotations,
            workers=args.workers,
            skip_bad=args.skip_bad,
        )
    except ValueError as exc:
        raise HeartlmError(str(exc)) from None
    ingest(args.sources, args.out, config, overwrite=args.overwrite)
    return 0
