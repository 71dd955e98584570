"""Reading a file the user names or keeps (a JSON schema, a bench suite, models.toml, a saved chat, a
`--context` file): bounded, in chunks, with signals honoured. Every such file is read here.

A plain `read_text()` reads until the end: `--json-schema /dev/zero` grew without bound, and as the
whole read is one C call, no SIGINT or SIGTERM handler ran until memory ran out. Here each kind of
file has a limit, a regular file larger than it is refused from its size, unread, and anything else
is read in chunks from Python, so a handler runs between two chunks and a read that passes the limit
stops there. A read that blocks (a pipe whose writer is slow) is a system call a signal interrupts.

What may be read: regular files, and pipes where the user named the file (`<(cat schema.json)`, a
`mkfifo`): opening one waits for its writer, which a signal also ends. Files found by listing a
folder (saved chats, a `--context` folder's files) must be regular files, opened without waiting: a
pipe left there would stop the command for good. Devices (`/dev/zero`, a terminal, a disk) and
folders are refused before they are opened.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from edgespec.util.errors import EdgespecError, UsageError

# Bytes read at a time: each read returns to Python, where a pending signal's handler runs.
CHUNK = 1 << 16


def read_user_file(
    path: Path, limit: int, name: str, *, pipes: bool = True, error: type[EdgespecError] = UsageError
) -> bytes:
    """The bytes of `path`, at most `limit` of them, or `error` (one line, starting with `name`, how
    the message names the file: "suite file x.jsonl"). `pipes`: the user named this file, so a pipe
    is read too (waiting for its writer); otherwise only a regular file, opened without waiting."""
    try:
        before = os.stat(path)
    except OSError as e:
        raise error(_unreadable(name, e)) from None
    problem = _kind_problem(before.st_mode, pipes)
    if problem:
        raise error(f"{name} {problem}")
    if stat.S_ISREG(before.st_mode) and before.st_size > limit:
        raise error(f"{name} is larger than {size_text(limit)}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (0 if pipes else os.O_NONBLOCK))
    except OSError as e:
        raise error(_unreadable(name, e)) from None
    try:
        problem = _kind_problem(os.fstat(fd).st_mode, pipes)  # what was opened: it may have been swapped
        if problem:
            raise error(f"{name} {problem}")
        data = read_at_most(lambda n: os.read(fd, n), limit)
        if data is None:
            raise error(f"{name} is larger than {size_text(limit)}")
        return data
    except OSError as e:
        raise error(_unreadable(name, e)) from None
    finally:
        os.close(fd)


def read_at_most(read: Callable[[int], bytes], limit: int) -> bytes | None:
    """All that `read(n)` gives until it gives nothing, in chunks of CHUNK (a pending signal's handler
    runs between two); None as soon as that passes `limit` bytes."""
    chunks, size = [], 0
    while chunk := read(CHUNK):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def size_text(n: int) -> str:
    """A limit as the docs write it: "4 MiB", "256 KiB", "1,000 bytes"."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,} bytes"


def _kind_problem(mode: int, pipes: bool) -> str | None:
    if stat.S_ISREG(mode) or (pipes and stat.S_ISFIFO(mode)):
        return None
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    return "is not a regular file or a pipe" if pipes else "is not a regular file"


def _unreadable(name: str, e: OSError) -> str:
    why = "it does not exist" if isinstance(e, FileNotFoundError) else e.strerror or str(e)
    return f"{name}: cannot read: {why}"
