"""Where edgespec keeps its files: the home folder every command reads (models, converted weights,
prompt caches, chats, rescued output)."""

from __future__ import annotations

import os
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
