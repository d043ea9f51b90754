"""Records without the reference annotation file a command reads: named in one warning, or
one error when the user named the extension and no record has it."""

from __future__ import annotations

from pathlib import Path

from heartlm.ecg.wfdbio import annotation_path
from heartlm.ecg.workers import common_folder, listed
from heartlm.errors import HeartlmError
from heartlm.log import logger

DEFAULT_REFERENCE = "atr"  # where no --annotations is given: a preference, not a requirement


def check_references(
    records: list[Path], exts: list[str], named: bool, command: str, fate: str, hint: str = ""
) -> None:
    """One warning naming the records with no annotation file of `exts` (`fate`: what
    becomes of them). When no record has one: an error if the user named `exts` (`atr`
    too), as a misspelt `--annotations` would turn a reference run into a detected one;
    nothing for the default `atr`, as a folder without it (EDF, Holter) is simply detected."""
    missing = [r for r in records if not any(annotation_path(r, e).is_file() for e in exts)]
    if not missing:
        return
    files = " or ".join(f".{e}" for e in exts)
    if len(missing) == len(records):
        if named:
            raise HeartlmError(
                f"no record has a {files} annotation file (--annotations {','.join(exts)}{hint})",
                common_folder(records),
            )
        if exts == [DEFAULT_REFERENCE]:
            return
    logger.warning(
        f"{command}: {len(missing)} of {len(records)} records have no {files} annotation "
        f"file; {fate}: {listed(missing)}"
    )
