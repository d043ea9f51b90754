"""A fast reader for plain MIT-format annotation files, which also refuses truncated ones.

`wfdb.rdann` walks the file in Python with numpy scalars per field and reads the header
for `fs`; on a 30-minute MIT-BIH record that is a quarter of ingest's time. This reader
does the same walk over plain ints and returns None (use wfdb) whenever a file holds
definitions (a time resolution, custom labels) or codes it does not know; a test checks
that it agrees with `wfdb.rdann` on every annotation file in ../shared/ecg.

The walk also checks what `wfdb.rdann` does not: that the stream ends with the
end-of-file marker (a zero word) and not inside an annotation. A file cut short reads
without complaint in wfdb, holding only the beats before the cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from heartlm.errors import HeartlmError

_SKIP, _NUM, _SUB, _CHN, _AUX = 59, 60, 61, 62, 63


@dataclass
class Annotations:
    sample: np.ndarray  # int64 annotation times, in ticks of `fs`
    symbol: list[str]
    aux_note: list[str]
    fs: float | None = None
    """Ticks per second of `sample` (wfdb.rdann's `fs`: the file's own `## time resolution`,
    else the header's frame rate); None: frames of the record, as in plain MIT files."""


@cache
def _symbols() -> dict[int, str]:
    from wfdb.io.annotation import ann_label_table

    return dict(zip(ann_label_table["label_store"], ann_label_table["symbol"], strict=True))


def read_mit_annotations(path: Path, extension: str) -> Annotations | None:
    """Annotations of `path.extension`, or None when the fast path does not apply.

    Raises HeartlmError for a truncated file, whichever reader would have read it."""
    file = Path(f"{path}.{extension}")
    if not file.is_file():
        return None
    if file.stat().st_size % 2:
        raise HeartlmError("truncated: the file ends inside an annotation (odd size)", file)
    words = np.fromfile(file, dtype="<u2").tolist()
    try:
        parsed = _walk(words)
    except _Truncated as exc:
        raise HeartlmError(f"truncated: {exc}", file) from None
    if parsed is None:
        return None
    sample, codes, aux = parsed
    table = _symbols()
    if any(c not in table for c in set(codes)):
        return None
    return Annotations(np.asarray(sample, np.int64), [table[c] for c in codes], aux)


class _Truncated(Exception):
    pass


def _walk(words: list[int]) -> tuple[list[int], list[int], list[str]] | None:
    sample: list[int] = []
    codes: list[int] = []
    aux: list[str] = []
    total, i, n = 0, 0, len(words)
    ended = False
    try:
        while i < n:
            w = words[i]
            while w >> 10 == _SKIP:
                skip = (words[i + 1] << 16) | words[i + 2]
                total += skip - (1 << 32) if skip >= 1 << 31 else skip
                i += 3
                w = words[i]
            if w == 0:
                ended = True
                break
            code = w >> 10
            if code > _SKIP:
                return None  # an extra field with no annotation before it
            total += w & 1023
            i += 1
            sample.append(total)
            codes.append(code)
            note = ""
            while i < n and words[i] >> 10 > _SKIP:
                field, value = words[i] >> 10, words[i] & 1023
                i += 1
                if field == _AUX:
                    n_words = (value + 1) // 2
                    raw = np.asarray(words[i : i + n_words], "<u2").tobytes()[:value]
                    if len(raw) < value:
                        raise IndexError
                    note = raw.decode("latin-1")
                    i += n_words
            aux.append(note)
    except IndexError:
        raise _Truncated(f"the file ends inside annotation {len(sample) + 1}") from None
    if not ended:
        raise _Truncated(f"no end-of-file marker after {len(sample)} annotations")
    if aux and aux[0].startswith("## ") and sample[0] == 0:
        return None  # definition block (fs, custom labels): wfdb interprets it
    return sample, codes, aux
