"""Token shards: the contract between `tokenize` (writer) and training (reader).

A token folder (format version 2) holds:

- `tokens.json`: format, version, `vocab_size` (morphology, specials included),
  `rhythm_vocab_size`, `special` token ids, `fs` and `window_samples` of the beats,
  `n_beats`, and `records` (name, db, start, n_beats) in stream order.
- one shard file per stream, all of `n_beats` items and aligned beat by beat:
  `morph.bin` (uint16 morphology tokens), `rhythm.bin` (uint16 rhythm tokens),
  `aami.bin` (int8 AAMI class code, -1 unlabelled), `rhythm_label.bin` (int8 rhythm code),
  `features.bin` (float16, one row of `tokens.json` `features` per beat: what a bare
  morphology id loses, see `heartlm.tokens.features`);
  plus `boundaries.bin` (int64, n_records + 1 offsets: record r is [b[r], b[r+1])).
- `codebook.safetensors` + `codebook.json` (written by the tokenizer).

Every shard file is a 32-byte header then the items, little-endian:

    offset  size  field
    0       8     magic b"HLMSHARD"
    8       4     uint32 format version (2)
    12      4     uint32 dtype code (see DTYPE_CODES)
    16      8     uint64 item count (rows)
    24      8     uint64 row width (1 for a stream of scalars)

`read_shard` checks all of it against the file size and rejects anything else. Version 1
(no features, a zero where the width now is) is refused: its folders must be tokenized again.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from heartlm.errors import HeartlmError

MAGIC = b"HLMSHARD"
VERSION = 2
HEADER = struct.Struct("<8sIIQQ")
DTYPE_CODES: dict[int, np.dtype] = {
    1: np.dtype("<u2"),
    2: np.dtype("i1"),
    3: np.dtype("<i8"),
    4: np.dtype("<i4"),
    5: np.dtype("<f4"),
    6: np.dtype("<f2"),
}
_CODE_OF = {dt: code for code, dt in DTYPE_CODES.items()}

# Special tokens, shared by the morphology and rhythm vocabularies.
PAD, MASK, CLS, SEP, UNK = 0, 1, 2, 3, 4
NUM_SPECIAL = 5
SPECIAL_TOKENS = {"pad": PAD, "mask": MASK, "cls": CLS, "sep": SEP, "unk": UNK}

STREAMS = {
    "morph": "morph.bin",
    "rhythm": "rhythm.bin",
    "aami": "aami.bin",
    "rhythm_label": "rhythm_label.bin",
    "features": "features.bin",
    "boundaries": "boundaries.bin",
}


def write_shard(path: str | Path, array: np.ndarray) -> None:
    """Write one shard atomically (temporary name, fsync, rename): a 1-D array is a stream of
    scalars, a 2-D array a stream of rows."""
    path = Path(path)
    dtype = np.dtype(array.dtype).newbyteorder("<") if array.dtype.itemsize > 1 else array.dtype
    if dtype not in _CODE_OF:
        raise ValueError(f"unsupported shard dtype {array.dtype}")
    if array.ndim not in (1, 2):
        raise ValueError(f"a shard holds a 1-D or 2-D array, not {array.ndim}-D")
    rows, width = (array.shape[0], array.shape[1]) if array.ndim == 2 else (array.size, 1)
    data = np.ascontiguousarray(array.reshape(-1), dtype=dtype)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(HEADER.pack(MAGIC, VERSION, _CODE_OF[dtype], rows, width))
        f.write(data.tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_shard(
    path: str | Path, dtype: np.dtype | str | None = None, mmap: bool = True
) -> np.ndarray:
    """Validate a shard's header and length; return its items (memory-mapped by default),
    as (rows,) for a stream of scalars or (rows, width) for a stream of rows."""
    path = Path(path)
    if not path.is_file():
        raise HeartlmError("token shard is missing", path)
    size = path.stat().st_size
    if size < HEADER.size:
        raise HeartlmError(
            f"token shard is {size} bytes, shorter than its {HEADER.size}-byte header", path
        )
    with open(path, "rb") as f:
        magic, version, code, count, width = HEADER.unpack(f.read(HEADER.size))
    if magic != MAGIC:
        raise HeartlmError(f"not a heartlm token shard (magic {magic!r})", path)
    if version != VERSION:
        raise HeartlmError(
            f"token shard version {version}, this heartlm reads {VERSION}: run heartlm tokenize"
            " again on the beat store",
            path,
        )
    if code not in DTYPE_CODES:
        raise HeartlmError(f"unknown dtype code {code} in token shard header", path)
    found = DTYPE_CODES[code]
    if dtype is not None and np.dtype(dtype) != found:
        raise HeartlmError(f"token shard holds {found}, expected {np.dtype(dtype)}", path)
    if not 1 <= width <= 4096:
        raise HeartlmError(f"token shard row width {width} is outside 1 .. 4096", path)
    expected = HEADER.size + count * width * found.itemsize
    if size != expected:
        raise HeartlmError(
            f"token shard is {size} bytes, its header implies {expected}: truncated or corrupt",
            path,
        )
    shape = (count,) if width == 1 else (count, width)
    if count == 0:
        return np.zeros(shape, dtype=found)
    if mmap:
        return np.memmap(path, dtype=found, mode="r", offset=HEADER.size, shape=shape)
    return np.fromfile(path, dtype=found, offset=HEADER.size, count=count * width).reshape(shape)
