"""The `heartlm` command: one entry point, one subcommand per pipeline stage.

Each subcommand lives in its own module. A module with a settings dataclass `Config`
gets its flags, `--config` and `--print-config` from it (`heartlm.settings`) and runs as
`run(config) -> int`; the others expose `add_arguments(parser)` and `run(args) -> int`.
Modules are imported only when their command runs, so `heartlm qrs` never pays for
importing torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from heartlm import settings
from heartlm.errors import HeartlmError
from heartlm.log import setup_logging

COMMANDS: dict[str, tuple[str, str]] = {
    "synth": ("heartlm.synth.cli", "write a synthetic, labelled ECG corpus as WFDB records"),
    "qrs": ("heartlm.qrs.cli", "detect QRS complexes; score against reference annotations"),
    "ingest": ("heartlm.ingest.cli", "WFDB records to a beat store"),
    "tokenize": ("heartlm.tokens.cli", "beat store to codebook and token shards"),
    "pretrain": ("heartlm.pretrain", "pretrain the Heart Language Model"),
    "finetune": ("heartlm.finetune.cli", "fine-tune a pretrained run for beat classes or AFIB"),
    "evaluate": ("heartlm.evaluate.cli", "score a fine-tuned run on tokens or WFDB records"),
    "embed": ("heartlm.embed", "per-beat and per-window embeddings of tokens or WFDB records"),
    "scale": ("heartlm.scale.cli", "run the scaling-study grid"),
    "report": ("heartlm.report.cli", "figures and report.md from a scaling study"),
    "slurm": ("heartlm.cluster.cli", "write SLURM sbatch scripts and an Apptainer definition"),
    "quickstart": ("heartlm.quickstart", "the whole pipeline on a synthetic corpus"),
}


def build_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, object | None]:
    parser = argparse.ArgumentParser(prog="heartlm", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in argv if a in COMMANDS), None)
    module = None
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
        if name == chosen:
            module = importlib.import_module(module_name)
            if hasattr(module, "Config"):
                settings.add_arguments(p, module.Config)
            else:
                module.add_arguments(p)
    return parser, module


def _version() -> str:
    from heartlm import __version__

    return f"heartlm {__version__}"


def describe_os_error(exc: OSError) -> str:
    """One line naming the path and the cause (`heartlm.outdir.claimed` names the output
    folder where the failing call gave no file name)."""
    return f"{exc.filename or 'cannot write'}: {exc.strerror or exc}"


def _say_error(message: str) -> None:
    """One write of the whole line: every rank of a failed run prints it into one pipe."""
    sys.stderr.write(f"heartlm: error: {message}\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # wfdb 4.3 calls pandas in ways pandas now deprecates: noise for our users.
    warnings.filterwarnings("ignore", message="The inplace keyword")
    try:
        parser, module = build_parser(argv)
        args = parser.parse_args(argv)
        if module is None:
            parser.print_help(sys.stderr)
            return 2
        setup_logging(args.verbose)
        if not hasattr(module, "Config"):
            return int(module.run(args) or 0)
        config = settings.resolve(module.Config, args, args.command)
        if args.print_config:
            sys.stdout.write(settings.dump(config))
            return 0
        return int(module.run(config) or 0)
    except HeartlmError as exc:
        _say_error(str(exc))
        return 2
    except OSError as exc:  # the machine, not the input: a full or read-only disk, a limit
        _say_error(describe_os_error(exc))
        return 2
    except KeyboardInterrupt:
        print("heartlm: interrupted", file=sys.stderr)
        return 130
