"""The reply history's saved suffix index: its file format, and reading one without trusting it.

`index-<generation>-<records>.idx` (in the history's folder, `reply_history.py`) holds the suffix
index (`decoding/copying/suffix_index.py`) over the first <records> records of that generation's log:
INDEX_MAGIC, then the corpus' length n and CRC-32s of the corpus and of the suffix array
(`_HEAD`), then the corpus and the suffix array (n int32 each, little endian).

A reader memory-maps it, so opening a history costs no sort; before it is used, the file must be a
regular file reached without a link of exactly the size its records imply (`util/home_files.py`),
both checksums must hold (one flipped bit would otherwise size an allocation: the index counts
each token id), and every id must lie below the vocabulary. Files of an older format (`index-*.npy`,
no checksum) are removed unread.
"""

from __future__ import annotations

import mmap
import struct
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from edgespec.decoding.copying.suffix_index import SuffixIndex
from edgespec.engine.history_log import Record
from edgespec.util.home_files import Untrusted, open_home_file

INDEX_MAGIC = b"edgespec history index 2\n"  # a new format changes the number and the suffix
SUFFIX = ".idx"
OLD_FORMATS = ("index-*.npy",)  # no checksum: never read, removed when an index is saved
_HEAD = struct.Struct("<QII")  # corpus length, CRC-32 of the corpus, CRC-32 of the suffix array
_INT32 = np.dtype("<i4")


def index_name(generation: bytes, covered: int) -> str:
    return f"index-{generation.hex()}-{covered}{SUFFIX}"


def corpus_length(records: Sequence[Record]) -> int:
    """The length of the corpus of `records`: each a document between two SEPs."""
    return 1 + sum(r.tokens + 1 for r in records)


def load_index(path: Path, records: Sequence[Record], vocab: int) -> SuffixIndex:
    """The index saved in `path` over `records`, memory-mapped; Untrusted unless it is whole and
    describes them (size, checksums, ids below `vocab`)."""
    n = corpus_length(records)
    size = len(INDEX_MAGIC) + _HEAD.size + 8 * n
    with open_home_file(path, size) as f:
        if f.seek(0, 2) != size:
            raise Untrusted("cut short, or of other records")
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if data[: len(INDEX_MAGIC)] != INDEX_MAGIC:
        raise Untrusted("not an index of this version")
    stored_n, tokens_crc, sa_crc = _HEAD.unpack_from(data, len(INDEX_MAGIC))
    start = len(INDEX_MAGIC) + _HEAD.size
    view = memoryview(data)
    if (
        stored_n != n
        or zlib.crc32(view[start : start + 4 * n]) != tokens_crc
        or zlib.crc32(view[start + 4 * n :]) != sa_crc
    ):
        raise Untrusted("an index that does not match its checksums")
    tokens = np.frombuffer(data, _INT32, n, start)
    if n and int(tokens.max()) >= vocab:
        raise Untrusted(f"an index of token ids outside the vocabulary of {vocab:,}")
    try:
        return SuffixIndex(_native(tokens), _native(np.frombuffer(data, _INT32, n, start + 4 * n)))
    except (ValueError, IndexError):
        raise Untrusted("not a suffix index (its separators or positions are out of place)") from None


def save_index(path: Path, base: SuffixIndex) -> None:
    """Write `base` to `path` (a temporary file `write_atomic` then moves into place)."""
    tokens, sa = (np.ascontiguousarray(a, dtype=_INT32).tobytes() for a in (base.tokens, base.sa))
    with open(path, "wb") as f:
        f.write(INDEX_MAGIC + _HEAD.pack(len(base.tokens), zlib.crc32(tokens), zlib.crc32(sa)))
        f.write(tokens)
        f.write(sa)


def _native(array: np.ndarray) -> np.ndarray:
    """`array` in the machine's int32 (a view on little-endian machines: nothing is copied)."""
    return array if sys.byteorder == "little" else array.astype(np.int32)
