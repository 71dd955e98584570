"""The prompt cache's files: one saved state per file, and reading one without trusting it.

A file is named `<identity hash>-<tokens hash>.kv` (`entry_path`) and holds MAGIC, the header's
length (4 bytes), the header (JSON: the backend's `cache_identity`, the token count, the state's
size, CRC-32s of the token ids and of the state), the token ids (int32, little endian), then the
state. Nothing is trusted from a name or a header: only regular files are opened (no link is
followed, and a FIFO never blocks the open: `util/home_files.py`, which every store under the home
reads through), sizes are checked against the file before anything is read, a lookup reads
headers only (a few KB, no states) and checks identity and token ids; a load checks the state's CRC.
What to keep, load and evict is the cache's policy (`prompt_cache.py`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import sys
import time
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from edgespec.util.home_files import Untrusted, open_home_file

MAGIC = b"edgespec prompt cache 1\n"  # a new format changes the number; older entries are then removed
_LENGTH = struct.Struct("<I")
_MAX_HEADER = 1 << 16


@dataclass(eq=False)  # entries are compared by identity: a state is megabytes
class Entry:
    """One saved state: on disk (`path`, the state read when it loads) or in memory (`state`)."""

    identity: str
    tokens: list[int]
    path: Path | None = None
    state: bytearray | None = None


class Damaged(Exception):
    """An entry file that is not a whole entry of this format; the message says how."""


def entry_path(folder: Path, identity: str, tokens: Sequence[int]) -> Path:
    """Where the state of `tokens` read by a backend of `identity` is saved in `folder`."""
    return folder / f"{digest(identity.encode())}-{digest(token_bytes(tokens))}.kv"


def identity_pattern(identity: str) -> str:
    """The glob pattern of every entry file of `identity`."""
    return f"{digest(identity.encode())}-*.kv"


def entry_header(entry: Entry, state: bytearray) -> bytes:
    """The JSON header of a file holding `state` as `entry`."""
    return json.dumps(
        {
            "identity": entry.identity,
            "n_tokens": len(entry.tokens),
            "state_size": len(state),
            "tokens_crc32": zlib.crc32(token_bytes(entry.tokens)),
            "state_crc32": zlib.crc32(state),
        }
    ).encode()


def entry_size(header: bytes, entry: Entry, state: bytearray) -> int:
    """The bytes of the file holding `state` as `entry` under `header`."""
    return len(MAGIC) + _LENGTH.size + len(header) + 4 * len(entry.tokens) + len(state)


def read_entry(path: Path, with_state: bool, limit: int) -> Entry:
    """The entry in `path`: its header and token ids, and its state too if asked (CRC-checked).

    The folder may hold anything under an entry's name: only a regular file of at most `limit` bytes
    (the cache's budget) is read (`open_home_file`), and every size the header claims is checked
    against the file's before anything is read or allocated, so a header claiming 2**62 tokens is
    Damaged at once."""
    try:
        with open_home_file(path, limit) as f:
            return _read_entry(f, path, with_state)
    except Untrusted as e:
        raise Damaged(str(e)) from None


def _read_entry(f: io.FileIO, path: Path, with_state: bool) -> Entry:
    file_size = os.fstat(f.fileno()).st_size
    head = f.read(len(MAGIC) + _LENGTH.size)
    if len(head) < len(MAGIC) + _LENGTH.size or not head.startswith(MAGIC):
        raise Damaged("not an entry of this version")
    (length,) = _LENGTH.unpack(head[len(MAGIC) :])
    if length > _MAX_HEADER:
        raise Damaged("bad header")
    try:
        meta = json.loads(f.read(length))
        identity, n_tokens, size = meta["identity"], meta["n_tokens"], meta["state_size"]
        tokens_crc, state_crc = meta["tokens_crc32"], meta["state_crc32"]
    except (ValueError, TypeError, KeyError, RecursionError):
        raise Damaged("bad header") from None
    if not (
        isinstance(identity, str)
        and all(isinstance(v, int) and v >= 0 for v in (n_tokens, size, tokens_crc, state_crc))
    ):
        raise Damaged("bad header")
    claimed = f.tell() + 4 * n_tokens + size
    if file_size != claimed:
        raise Damaged("truncated" if file_size < claimed else "trailing bytes")
    raw = f.read(4 * n_tokens)
    if len(raw) != 4 * n_tokens or zlib.crc32(raw) != tokens_crc:
        raise Damaged("token ids do not match their checksum")
    entry = Entry(identity, token_list(raw), path)
    if with_state:
        state = bytearray(size)
        if f.readinto(state) != size or zlib.crc32(state) != state_crc:
            raise Damaged("the state does not match its checksum")
        entry.state = state
    return entry


def write_entry_file(tmp: Path, header: bytes, tokens: list[int], state: bytearray) -> None:
    with open(tmp, "wb") as f:
        f.write(MAGIC + _LENGTH.pack(len(header)) + header + token_bytes(tokens))
        f.write(state)


def token_bytes(tokens: Sequence[int]) -> bytes:
    ids = array("i", tokens)
    if sys.byteorder == "big":
        ids.byteswap()
    return ids.tobytes()


def token_list(raw: bytes) -> list[int]:
    ids = array("i")
    ids.frombytes(raw)
    if sys.byteorder == "big":
        ids.byteswap()
    return ids.tolist()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def stamp(path: Path) -> None:
    """Mark an entry as used now. The time is set explicitly, from the same clock for every
    entry: a file's own write time comes from a coarser kernel clock, which could rank a state
    written just now before one touched a moment earlier."""
    now = time.time_ns()
    try:
        os.utime(path, ns=(now, now))
    except OSError:
        pass  # a read-only cache still serves what it holds


def remove(path: Path) -> str | None:
    """Remove `path` (a file, link or FIFO; a folder named like an entry is left); None when it is
    gone, else why not (a read-only folder: the entry stays, and is found and ignored next time)."""
    try:
        path.unlink(missing_ok=True)
    except OSError as e:
        return e.strerror or str(e)
    return None
