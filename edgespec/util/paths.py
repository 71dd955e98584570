"""Where edgespec keeps its files: the home folder every command reads (models, converted weights,
prompt caches, chats, rescued output)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import platformdirs

from edgespec.util.errors import EdgespecError


class HomeError(EdgespecError):
    """The home is not a folder edgespec can use: a plain file, or one it cannot write to store models in."""


def home() -> Path:
    """The edgespec data dir: $EDGESPEC_HOME, else the platform's user cache dir. A plain file there
    is refused at once, naming it: every command reads the home, and each would fail later in its
    own words (a model "does not exist", a cache that cannot be saved)."""
    path = Path(os.environ.get("EDGESPEC_HOME") or platformdirs.user_cache_dir("edgespec")).expanduser()
    if path.exists() and not path.is_dir():
        where = "EDGESPEC_HOME" if os.environ.get("EDGESPEC_HOME") else "edgespec's cache folder"
        raise HomeError(f"{where} {path} is a file, not a folder; move it away or point EDGESPEC_HOME at a folder")
    return path


def display_path(path: Path) -> str:
    """A path as the user would type it (home shown as ~), for error messages."""
    try:
        return "~/" + str(path.expanduser().absolute().relative_to(Path.home()))
    except ValueError:
        return str(path)


def private_folder(folder: Path, tighten: bool = False) -> None:
    """Make `folder` and every missing parent as folders only their owner may enter (0700),
    whatever the umask: with umask 000 a plain mkdir would let any local user plant files where
    edgespec reads its caches. Folders that exist are left as they are (a home or a config folder
    the user chose), except `folder` itself with `tighten`, for a folder only edgespec writes (one an
    older edgespec made under a loose umask). NotADirectoryError where a file stands in the way."""
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder))
    missing = []
    at = folder
    while not at.exists():
        missing.append(at)
        at = at.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:  # made meanwhile by another process: left as it made it
            continue
        os.chmod(path, 0o700)  # the umask can take bits away from mkdir's mode
    if tighten and stat.S_IMODE(folder.stat().st_mode) != 0o700:
        os.chmod(folder, 0o700)
