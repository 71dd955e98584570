"""The reply history's folders as files: the lock, counting what a history holds without writing
anything, clearing it, and the temporary files killed writers leave.

`edgespec history` shows and clears through here. Showing writes nothing: no lock is made or taken,
no mode changed, no log set aside; the log is read as it is (a record being appended meanwhile is
not counted yet), so a history on a read-only mount is counted like any other. Clearing removes
every entry but the lock (a running process may hold it: a new lock file would let two processes
hold "the" lock at once), names each it could not, and never follows a link: a link where a folder
or a file should be is itself removed, its target left alone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from edgespec.engine.history_log import ANY_TOKEN, parse_log
from edgespec.util.home_files import Untrusted, discard, kind_of, read_home_file
from edgespec.util.paths import display_path

LOCK = "lock"
SHOW_LIMIT = 1 << 30  # the largest log `edgespec history` reads to count (4M tokens: about 16 MB)
_STALE_PARTIAL_S = 3600  # a temporary file this old was left by a killed writer


@contextlib.contextmanager
def folder_lock(folder: Path, say: Callable[[str], None]) -> Iterator[None]:
    """Hold `folder`'s lock (made if missing). Anything else under its name (a link, a FIFO) is
    removed, said in one line, and a lock made in its place; only a file of its own is made 0600."""
    fd = _open_lock(folder / LOCK, say)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _open_lock(path: Path, say: Callable[[str], None]) -> int:
    for _ in range(2):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENXIO):  # a link; a socket
                raise
            discard(path, "a link or a socket, not a file", say, "history")
            continue
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            if st.st_nlink == 1 and stat.S_IMODE(st.st_mode) != 0o600:  # a hard link's mode is another's
                os.fchmod(fd, 0o600)
            return fd
        os.close(fd)
        discard(path, kind_of(st.st_mode), say, "history")
    raise Untrusted(f"{display_path(path)} cannot be made a lock file")


@dataclass(frozen=True)
class Counts:
    """What one tokenizer's history holds, as `edgespec history` shows it."""

    calls: int
    tokens: int
    bytes: int  # the folder's regular files
    repository_bytes: int  # the repository token cache (`files/`)
    note: str = ""  # what is wrong with the log, if anything (the next run sets it aside)


def counts(folder: Path) -> Counts:
    """The records and tokens of `folder`'s log and the bytes kept, read without the lock and
    without writing anything. A log that is not one is counted as none, with a note saying why."""
    note, calls, tokens = "", 0, 0
    try:
        data = read_home_file(folder / "log", SHOW_LIMIT)
    except FileNotFoundError:
        data = b""
    except Untrusted as e:
        data, note = b"", f"its log is {e}"
    if data:
        log, damage = parse_log(data, ANY_TOKEN)
        calls, tokens = len(log.records), sum(r.tokens for r in log.records)
        if damage and damage != "truncated":  # a record being appended as it was read: not damage
            note = f"its log is damaged after {calls} calls ({damage})"
    return Counts(calls, tokens, folder_bytes(folder), folder_bytes(folder / "files"), note)


def folder_bytes(folder: Path) -> int:
    """The bytes of the regular files in `folder` (links not followed, names gone meanwhile skipped)."""
    try:
        names = list(folder.iterdir())
    except OSError:
        return 0
    total = 0
    for path in names:
        with contextlib.suppress(OSError):
            st = os.lstat(path)
            total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total


def clear_folder(folder: Path) -> list[str]:
    """Remove every entry of `folder` but its lock: files, links (not what they point to), FIFOs,
    folders (their links not followed). What could not be removed, one line each."""
    try:
        names = sorted(folder.iterdir())
    except FileNotFoundError:
        return []
    except OSError as e:
        return [f"cannot list {display_path(folder)} ({e.strerror or e})"]
    return [problem for path in names if path.name != LOCK and (problem := remove_entry(path))]


def remove_entry(path: Path) -> str | None:
    """Remove `path`, a link itself rather than its target; None when it is gone, else why not."""
    problems: list[str] = []
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, onerror=lambda _f, p, e: problems.append(f"{display_path(Path(p))} ({_why(e)})"))
        else:
            path.unlink()
    except FileNotFoundError:
        return None
    except OSError as e:
        problems.append(f"{display_path(path)} ({e.strerror or e})")
    return f"could not remove {', '.join(problems)}" if problems else None


def remove_stale_partials(folder: Path) -> None:
    """Temporary files that killed writers left (`write_atomic`'s, named `.<name>.<random>.partial`)."""
    now = time.time()
    for path in folder.glob(".*.partial"):
        try:
            if now - os.lstat(path).st_mtime > _STALE_PARTIAL_S:
                path.unlink()
        except OSError:
            pass  # removed by another process meanwhile


def _why(exc_info: object) -> str:
    error = exc_info[1] if isinstance(exc_info, tuple) else exc_info
    return (error.strerror or str(error)) if isinstance(error, OSError) else str(error)
