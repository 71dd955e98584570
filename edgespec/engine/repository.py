"""The working repository and `--context` paths, as a corpus the repository drafter copies from.

A coding user asks about the files of the repository they work in: a reply quotes them, edits them,
calls their functions. `run` and `chat` started inside a git work tree index its tracked text files
(`git ls-files`), and `--context PATH` adds a file or a folder (`serve` takes only the flag). The
corpus is bounded (files, bytes per file, tokens in all); binary and non-UTF-8 files are skipped.

Tokenizing a repository takes seconds, so each file's tokens are kept on disk, named by its path,
size and modification time: a file that changed is read again, the others are not. A kept file is
read only as a regular file reached without a link, its size bounded, its ids checked against the
vocabulary (`util/home_files.py`); anything else under its name is removed in one line and the
file tokenized again. A cache folder reached through a link is not used. The suffix
index over them is rebuilt when the set changes (divsufsort, linear in the text: `build_s` in
benchmarks/results/suffix_index_costs.json).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from edgespec.decoding.copying.suffix_index import SuffixIndex
from edgespec.util.atomic_file import write_atomic
from edgespec.util.errors import EdgespecError, UsageError
from edgespec.util.home_files import Untrusted, check_ids, check_no_links, discard, read_home_file, warn
from edgespec.util.paths import home, private_folder
from edgespec.util.system_paths import system_path
from edgespec.util.user_files import read_user_file

MAX_FILES = 5000  # files indexed at most
MAX_FILE_BYTES = 256 << 10  # a larger file is data or generated code, seldom what a reply copies
MAX_TOKENS = 2_000_000  # tokens indexed at most (about 8 MB of text)
GIT_TIMEOUT_S = 10
KEPT = 4 * MAX_FILES  # file versions whose tokens are kept on disk, across repositories

Tokenize = Callable[[str], list[int]]


def work_tree_files(cwd: Path) -> list[Path]:
    """The tracked files of the git work tree `cwd` is in, nearest the current folder first (they are
    likelier to be asked about when the bound cuts); none outside a work tree or without git."""
    try:
        top = _git(cwd, "rev-parse", "--show-toplevel").strip()
        listed = _git(cwd, "ls-files", "-z", "--full-name", ":/")
    except (OSError, subprocess.SubprocessError):
        return []
    root = Path(top)
    files = [root / name for name in listed.split("\0") if name]
    here = cwd.resolve()
    return sorted(files, key=lambda p: (not p.is_relative_to(here), len(p.parts)))


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=GIT_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    ).stdout


def context_files(paths: Sequence[Path]) -> list[Path]:
    """The files `--context` names: each file, and each folder's files (hidden ones skipped), in
    order. A path that does not exist, is neither a regular file nor a folder (a pipe, a device),
    or is a system path (/proc, /sys, /dev: `system_path`) is a UsageError; a front end calls this
    before it loads anything (`EngineOptions.check`)."""
    out: list[Path] = []
    for path in paths:
        if system_path(path):
            raise UsageError(f"--context {path}: /proc, /sys and /dev are never read (their files are not text)")
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            for folder, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                out.extend(Path(folder) / n for n in sorted(names) if not n.startswith("."))
                if len(out) >= MAX_FILES:
                    break
        else:
            kind = "not a regular file or a folder" if path.exists() else "does not exist"
            raise UsageError(f"--context {path}: {kind}")
    return out


def read_text(path: Path) -> str | None:
    """A file's text, or None for what is not worth indexing: too big, binary, not UTF-8, unreadable,
    not a regular file (a pipe in a folder is not waited for: `read_user_file` with `pipes` off), or
    a link into /proc, /sys or /dev."""
    if system_path(path):
        return None
    try:
        data = read_user_file(path, MAX_FILE_BYTES, str(path), pipes=False)
    except EdgespecError:
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


class RepositoryCorpus:
    """The files' tokens (ids below `vocab`), kept in `folder` (one `.tokens` file per file version),
    and their suffix index."""

    def __init__(self, folder: Path, tokenize: Tokenize, vocab: int):
        self.folder, self.tokenize, self.vocab = folder, tokenize, vocab
        self._kept = True  # whether tokens are read from and kept in `folder`

    def build(self, files: Iterable[Path]) -> SuffixIndex | None:
        """The index over `files` (up to the bounds; None when none has text)."""
        try:
            check_no_links(self.folder, home())
        except Untrusted as e:
            self._kept = False
            warn(f"repository token cache not used: {e}")
        docs: list[np.ndarray] = []
        total = 0
        for path in list(files)[:MAX_FILES]:
            tokens = self._tokens(path)
            if tokens is None or not len(tokens):
                continue
            docs.append(tokens[: MAX_TOKENS - total])
            total += len(docs[-1])
            if total >= MAX_TOKENS:
                break
        if self._kept:
            self._prune()
        return SuffixIndex.build(docs) if docs else None

    def _prune(self) -> None:
        """Keep the cache of file versions bounded: past KEPT files, the least recently used go (a
        file read from the cache is touched)."""
        try:
            kept = sorted(self.folder.glob("*.tokens"), key=lambda p: os.lstat(p).st_mtime_ns)
            for path in kept[: max(0, len(kept) - KEPT)]:
                path.unlink(missing_ok=True)
        except OSError:
            pass  # another process pruned first

    def _tokens(self, path: Path) -> np.ndarray | None:
        try:
            st = path.stat()
        except OSError:
            return None
        key = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:32]
        kept = self.folder / f"{key}.tokens"  # the ids as little-endian int32, nothing else
        tokens = self._kept_tokens(kept) if self._kept else None
        if tokens is not None:
            return tokens
        text = read_text(path)
        if text is None:
            return None
        tokens = np.asarray(self.tokenize(text), dtype=np.int32)
        if self._kept:
            try:
                private_folder(self.folder)
                write_atomic(kept, lambda tmp: _write_private(tmp, tokens.astype("<i4").tobytes()))
            except OSError:
                pass  # kept for next time only where it can be: the corpus is built either way
        return tokens

    def _kept_tokens(self, kept: Path) -> np.ndarray | None:
        """The tokens kept in `kept`, or None (none kept, or removed in one line: not what was kept)."""
        try:
            # read as bytes, not np.load: numpy's file read fails with a TypeError when a signal
            # (Ctrl-C) interrupts it, where Python's own read retries and the signal is then handled
            data = read_home_file(kept, 4 * MAX_FILE_BYTES)
            if len(data) % 4:
                raise Untrusted("cut short")
            tokens = np.frombuffer(data, dtype="<i4").astype(np.int32)
            check_ids(tokens, self.vocab)
        except OSError:
            return None
        except Untrusted as e:
            discard(kept, str(e), what="repository token cache")
            return None
        with contextlib.suppress(OSError):
            os.utime(kept, follow_symlinks=False)  # recently used: pruned last
        return tokens


def _write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    os.chmod(path, 0o600)
