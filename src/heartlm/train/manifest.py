"""A checkpoint's digest manifest: every file's size and SHA-256, written last at save and
checked before anything is loaded, so a damaged or altered checkpoint is recognised (and a
resume falls back to an older one) instead of half-loading.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from heartlm.outdir import atomic_write_text

MANIFEST = "manifest.json"
FORMAT = "heartlm.checkpoint-manifest"
VERSION = 1
_CHUNK = 1 << 22


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(folder: str | Path) -> None:
    folder = Path(folder)
    files = {
        p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in _files(folder)
    }
    info = {"format": FORMAT, "version": VERSION, "files": files}
    atomic_write_text(folder / MANIFEST, json.dumps(info, indent=1) + "\n")


def damage(folder: str | Path) -> str | None:
    """Why `folder` does not match its manifest, or None when every file does."""
    folder = Path(folder)
    try:
        info: Any = json.loads((folder / MANIFEST).read_bytes())
    except FileNotFoundError:
        return f"no {MANIFEST}: written before heartlm checked digests, or cut off"
    except (OSError, ValueError) as exc:
        return f"unreadable {MANIFEST} ({exc})"
    files = info.get("files") if isinstance(info, dict) else None
    if not isinstance(files, dict) or info.get("format") != FORMAT:
        return f"{MANIFEST} is not a heartlm checkpoint manifest"
    present = {p.relative_to(folder).as_posix() for p in _files(folder)}
    extra = sorted(present - files.keys())
    if extra:
        return f"{extra[0]} is not in {MANIFEST}"
    for name, want in files.items():
        path = folder / name
        if name not in present:
            return f"{name} is missing"
        if path.stat().st_size != want.get("size") or _sha256(path) != want.get("sha256"):
            return f"{name} does not match its digest"
    return None
