"""The reply history's log file: its format, parsing it, reading a record back, appending one.

`log` (in the history's folder, `reply_history.py`) holds LOG_MAGIC, a random GENERATION-byte
generation (new whenever the log is rewritten), then records: a header (`RECORD`: magic, version,
prompt length, reply length, CRC-32 of what follows it), then, from version 2 on, the REQUEST-byte
digest of the request the reply answers (`engine/same_reply.py`; zeros for a reply never served
again: sampled, or cut short), then the prompt's and the reply's token ids (int32, little endian).
A version-1 record (no digest; its CRC covers the ids) is read as before and never served again.
An append is one `write` to the log opened with O_APPEND (`append_record`); the history holds the
folder's lock around every read and write, so a reader never sees half a record.

Nothing read back is trusted (`util/home_files.py`): the log is opened only as a regular file,
never through a link, its size bounded (`log_limit`) before it is read, and a record whose ids lie
outside the vocabulary is damage, like one whose checksum fails: ids size the index's counters.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgespec.util.home_files import Untrusted, check_ids, kind_of, open_home_file

LOG_MAGIC = b"edgespec reply history 1\n"  # a new format changes the number
GENERATION = 16
LOG_HEADER = len(LOG_MAGIC) + GENERATION
RECORD = struct.Struct("<4sHHIII")  # magic, version, reserved (0), prompt tokens, reply tokens, CRC-32
RECORD_MAGIC = b"EShr"
RECORD_VERSION = 2  # what appends write; version 1 (no request digest) is still read
REQUEST = 16  # bytes of a version-2 record's request digest, between its header and its ids
NO_REQUEST = bytes(REQUEST)  # the digest of a reply that is never served again
_DIGEST_BYTES = {1: 0, 2: REQUEST}  # the versions read, and the digest bytes each has
TOKEN = np.dtype("<i4")
ANY_TOKEN = 2**31  # the vocabulary bound where none is known (`edgespec history`): any int32 id >= 0
# A log holds at most a budget's tokens, plus one record and what processes append at once before
# one of them trims: far below this many bytes per budget token (a record's header and digest are 9 ids' worth).
_LOG_BYTES_PER_BUDGET_TOKEN = 96


@dataclass(frozen=True, slots=True)
class Record:
    """Where one record is in the log, and what `earlier_replies` compares before reading it."""

    offset: int  # of its header
    prompt_len: int
    reply_len: int
    crc: int
    prompt_hash: bytes
    request: bytes = b""  # the request digest as stored: empty in a version-1 record

    @property
    def tokens(self) -> int:
        return self.prompt_len + self.reply_len

    @property
    def ids_at(self) -> int:
        """Where its token ids start."""
        return self.offset + RECORD.size + len(self.request)

    @property
    def end(self) -> int:
        return self.ids_at + 4 * self.tokens

    @property
    def served_again(self) -> bool:
        """Whether its reply may answer the same request again: it names the request."""
        return len(self.request) == REQUEST and self.request != NO_REQUEST


@dataclass(frozen=True, slots=True)
class Log:
    """A log as read (under the lock), whole. No log on disk: an empty generation."""

    generation: bytes = b""
    records: tuple[Record, ...] = ()
    data: bytes = b""


def log_limit(budget_tokens: int) -> int:
    """The most bytes a log of a history of `budget_tokens` is read from; a larger one is damage."""
    return LOG_HEADER + _LOG_BYTES_PER_BUDGET_TOKEN * budget_tokens


def parse_log(data: bytes, vocab: int) -> tuple[Log, str | None]:
    """The records of a log's bytes, and what is wrong from the first bad one on (None: nothing).
    Every id must be below `vocab`."""
    if len(data) < LOG_HEADER or not data.startswith(LOG_MAGIC):
        return Log(), "not a history log of this version"
    records: list[Record] = []
    view, at, damage = memoryview(data), LOG_HEADER, None
    while at < len(data) and damage is None:
        magic, version, prompt_len, reply_len, crc = b"", 0, 0, 0, 0
        if len(data) - at >= RECORD.size:
            magic, version, _, prompt_len, reply_len, crc = RECORD.unpack_from(data, at)
        digest = _DIGEST_BYTES.get(version, 0) if magic == RECORD_MAGIC else 0
        ids_at = at + RECORD.size + digest
        end = ids_at + 4 * (prompt_len + reply_len)
        if len(data) - at < RECORD.size or end > len(data):
            damage = "truncated"
        elif magic != RECORD_MAGIC or version not in _DIGEST_BYTES:
            damage = "not a record where one should start"
        elif zlib.crc32(view[at + RECORD.size : end]) != crc:
            damage = "a record does not match its checksum"
        elif not _in_vocab(np.frombuffer(data, TOKEN, prompt_len + reply_len, ids_at), vocab):
            damage = f"a record holds token ids outside the vocabulary of {vocab:,}"
        else:
            prompt = view[ids_at : ids_at + 4 * prompt_len]
            request = bytes(view[at + RECORD.size : ids_at])
            records.append(Record(at, prompt_len, reply_len, crc, prompt_digest(prompt), request))
            at = end
    return Log(data[len(LOG_MAGIC) : LOG_HEADER], tuple(records), data), damage


def documents(data: bytes, records: Sequence[Record]) -> list[np.ndarray]:
    """Each record's prompt and reply, one document, read in place."""
    return [np.frombuffer(data, TOKEN, r.tokens, r.ids_at) for r in records]


def read_record(fd: int, record: Record, vocab: int) -> np.ndarray | None:
    """A record's tokens read back from the log, None if the log no longer holds it there (or holds
    ids of `vocab` or more there: rewritten since by something else)."""
    raw = os.pread(fd, record.end - record.offset, record.offset)
    if len(raw) != record.end - record.offset:
        return None
    magic, _, _, prompt_len, reply_len, crc = RECORD.unpack_from(raw)
    ids_at = RECORD.size + len(record.request)
    if (
        (magic, prompt_len, reply_len, crc) != (RECORD_MAGIC, record.prompt_len, record.reply_len, record.crc)
        or raw[RECORD.size : ids_at] != record.request
        or zlib.crc32(memoryview(raw)[RECORD.size :]) != crc
    ):
        return None
    tokens = np.frombuffer(raw, TOKEN, record.tokens, ids_at)
    return tokens if _in_vocab(tokens, vocab) else None


def encode_record(prompt: Sequence[int], reply: Sequence[int], request: bytes = NO_REQUEST) -> bytes:
    """A record as `append_record` writes it: the header, the request digest, the ids (in int32)."""
    if len(request) != REQUEST:
        raise ValueError(f"a request digest is {REQUEST} bytes")
    body = request + np.asarray([*prompt, *reply], dtype=TOKEN).tobytes()
    return RECORD.pack(RECORD_MAGIC, RECORD_VERSION, 0, len(prompt), len(reply), zlib.crc32(body)) + body


def appended(offset: int, encoded: bytes) -> Record:
    """The Record of `encoded` (from `encode_record`), appended at `offset`."""
    _, _, _, prompt_len, reply_len, crc = RECORD.unpack_from(encoded)
    ids_at = RECORD.size + REQUEST
    request, prompt = encoded[RECORD.size : ids_at], encoded[ids_at : ids_at + 4 * prompt_len]
    return Record(offset, prompt_len, reply_len, crc, prompt_digest(prompt), request)


def append_record(path: Path, record: bytes) -> int:
    """Write `record` at the end of the log in one write (under the lock); its offset. A short
    write (a full disk) is undone, so the log never ends in half a record. Only into a regular file
    reached without a link (Untrusted otherwise: a FIFO would block, a link write elsewhere)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO):  # a link; a FIFO no one reads
            raise Untrusted("a link, not a file" if e.errno == errno.ELOOP else "a FIFO, not a file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(kind_of(st.st_mode))
        offset = st.st_size
        if os.write(fd, record) != len(record):
            os.ftruncate(fd, offset)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return offset
    finally:
        os.close(fd)


def generation_of(path: Path) -> bytes:
    """The generation in a log's header; empty for no log (or not one: a link, a FIFO, ...)."""
    try:
        with open_home_file(path, 1 << 62) as f:
            head = f.read(LOG_HEADER)
    except (FileNotFoundError, Untrusted):
        return b""
    return head[len(LOG_MAGIC) :] if len(head) == LOG_HEADER and head.startswith(LOG_MAGIC) else b""


def prompt_digest(data: bytes | memoryview) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _in_vocab(ids: np.ndarray, vocab: int) -> bool:
    try:
        check_ids(ids, vocab)
    except Untrusted:
        return False
    return True


def write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    os.chmod(path, 0o600)  # whatever the umask: it holds the user's code
