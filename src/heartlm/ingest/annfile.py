"""A fast reader for plain MIT-format annotation files; anything unusual goes to `wfdb.rdann`.

`wfdb.rdann` walks the file in Python with numpy scalars per field and reads the header
for `fs`; on a 30-minute MIT-BIH record that is a quarter of ingest's time. This reader
does the same walk over plain ints and returns None (use wfdb) whenever a file holds
definitions, custom labels or anything it does not expect; a test checks that it agrees
with `wfdb.rdann` on every annotation file in ../shared/ecg.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

from heartlm.ecg.wfdbio import Annotations

_SKIP, _NUM, _SUB, _CHN, _AUX = 59, 60, 61, 62, 63


@cache
def _symbols() -> dict[int, str]:
    from wfdb.io.annotation import ann_label_table

    return dict(zip(ann_label_table["label_store"], ann_label_table["symbol"], strict=True))


def read_mit_annotations(path: Path, extension: str) -> Annotations | None:
    """Annotations of `path.extension`, or None when the fast path does not apply."""
    file = Path(f"{path}.{extension}")
    if not file.is_file() or file.stat().st_size % 2:
        return None
    words = np.fromfile(file, dtype="<u2").tolist()
    try:
        parsed = _walk(words)
    except IndexError:  # truncated mid-annotation: let wfdb produce the error
        return None
    if parsed is None:
        return None
    sample, codes, aux = parsed
    table = _symbols()
    if any(c not in table for c in set(codes)):
        return None
    return Annotations(np.asarray(sample, np.int64), [table[c] for c in codes], aux)


def _walk(words: list[int]) -> tuple[list[int], list[int], list[str]] | None:
    sample: list[int] = []
    codes: list[int] = []
    aux: list[str] = []
    total, i, n = 0, 0, len(words)
    while i < n - 1:
        w = words[i]
        while w >> 10 == _SKIP:
            skip = (words[i + 1] << 16) | words[i + 2]
            total += skip - (1 << 32) if skip >= 1 << 31 else skip
            i += 3
            w = words[i]
        code = w >> 10
        if code == 0 and w == 0:
            break
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
                    return None
                note = raw.decode("latin-1")
                i += n_words
        aux.append(note)
    if aux and aux[0].startswith("## ") and sample[0] == 0:
        return None  # definition block (fs, custom labels): wfdb interprets it
    return sample, codes, aux
