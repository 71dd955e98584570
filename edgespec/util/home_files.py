"""Opening what edgespec keeps under its home, trusting none of it: every store reads here (the
prompt cache, the reply history's log, lock and index, the repository token cache, saved chats, the
calibration, the machine layout and hash records).

edgespec wrote these files, but anything may stand under their names: a link planted to /dev/zero
or to another file, a FIFO (opening one for reading waits for a writer for ever), a file cut short
by a crash, a flipped bit, a number a hand edit made huge. So:
- only a regular file is opened, and never through a link: O_NOFOLLOW refuses a link, O_NONBLOCK
  makes a FIFO return at once, and `fstat` of what was opened decides (`open_home_file`);
- its size is checked against the caller's limit before anything is read, and the read stops at the
  limit if the file grows meanwhile (`read_home_file`);
- numbers read back are checked against their range before they size anything (`check_ids`: token
  ids against the vocabulary, before `np.bincount` allocates one counter per id);
- a folder reached through a link is refused (`check_no_links`), so no write lands outside the home;
- a JSON record (`read_home_json`) is an object, nested within bounds, or it is not one.
A refused or damaged entry raises `Untrusted`, whose message says what it is; the store sets it aside
(`discard`: removed, with one line on stderr) and goes on without it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from edgespec.util import json_depth
from edgespec.util.user_files import read_at_most, size_text

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Untrusted(Exception):
    """An entry under the home that is not what its store wrote: a link, a FIFO or a device, too
    large, or damaged. The message says which, without the path (the store names it)."""


def kind_of(mode: int) -> str:
    """What a file that is not a regular one is, for a message."""
    for test, kind in ((stat.S_ISLNK, "a link"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO")):
        if test(mode):
            return f"{kind}, not a regular file"
    return "a device or socket, not a regular file"


@contextlib.contextmanager
def open_home_file(path: Path, limit: int) -> Iterator[io.FileIO]:
    """`path` opened for reading, when it is a regular file of at most `limit` bytes reached without a
    link; Untrusted otherwise. FileNotFoundError (and other OSErrors) as `os.open` raises them."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Untrusted(kind_of(stat.S_IFLNK)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(kind_of(st.st_mode))
        if st.st_size > limit:
            raise Untrusted(f"larger than {size_text(limit)}")
    except BaseException:
        os.close(fd)
        raise
    with io.FileIO(fd, "rb") as f:  # unbuffered: reads go straight to the file
        yield f


def read_home_file(path: Path, limit: int) -> bytes:
    """The bytes of `path` under `open_home_file`'s rules, at most `limit` of them, read in chunks (a
    pending signal's handler runs between two)."""
    with open_home_file(path, limit) as f:
        data = read_at_most(f.read, limit)
    if data is None:
        raise Untrusted(f"larger than {size_text(limit)}")
    return data


def read_home_json(path: Path, limit: int, what: str, say: Callable[[str], None] | None = None) -> dict:
    """The JSON object a store keeps in `path` (a record edgespec can make again: a measurement, a
    hash memo), or {}: when there is none or it cannot be read, and when it is not one (anything but
    a regular file, past `limit`, not JSON, not an object), which is then removed in one line
    naming `what` ("speed calibration")."""
    try:
        value = json_depth.loads(read_home_file(path, limit))
        if not isinstance(value, dict):
            raise Untrusted("not a JSON object")
    except (Untrusted, ValueError) as e:
        why = str(e) if isinstance(e, Untrusted) else f"not JSON ({e})"
        discard(path, why, say, what)
        return {}
    except OSError:
        return {}  # none yet, or unreadable: measured again (a write then says why it failed)
    return value


def check_ids(ids: np.ndarray, vocab: int) -> None:
    """Untrusted unless every id is in 0..vocab-1 (read from a file, an id may be anything; one of
    2**31 makes `np.bincount` allocate 16 GiB)."""
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise Untrusted(f"token ids outside the vocabulary of {vocab:,}")


def check_no_links(folder: Path, top: Path) -> None:
    """Untrusted if `folder`, or a folder between `top` (trusted: the home, which the user may keep
    behind a link) and it, is a link or not a folder (for a folder outside `top`, itself only).
    Missing ones are fine: they are made later, as folders."""
    try:
        parts = folder.relative_to(top).parts
        at = top
    except ValueError:
        parts, at = (folder.name,), folder.parent
    for part in parts:
        at = at / part
        try:
            mode = os.lstat(at).st_mode
        except (FileNotFoundError, NotADirectoryError):  # made later (or refused then, in its own words)
            return
        if not stat.S_ISDIR(mode):
            raise Untrusted(
                f"{at} is {'a link, which edgespec does not follow' if stat.S_ISLNK(mode) else 'not a folder'}"
            )


def discard(path: Path, why: str, say: Callable[[str], None] | None = None, what: str = "") -> None:
    """Remove the entry `path` (the name itself: a link goes, its target stays) that was refused for
    `why`, and say so in one line; a folder that keeps it says that instead. `what` names the store."""
    say = say if say is not None else warn
    try:
        path.unlink(missing_ok=True)
    except OSError as e:
        say(f"{what or 'ignored'}: {path} is {why}; left in place ({e.strerror or e}), ignored")
        return
    say(f"{what or 'removed'}: {path} was {why}; removed, going on without it")


def warn(line: str) -> None:
    """One line on stderr, as edgespec says everything that is not the reply."""
    print(f"edgespec: {line}", file=sys.stderr, flush=True)
