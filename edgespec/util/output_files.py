"""Files a command writes after its work is done (`--stats-json`, `bench --json`, `bench --plot`).

A path that cannot be written is refused before any model loads (`check_writable`), so a user never
waits for a whole bench to learn that a folder is missing. The write itself is atomic (a temporary
file in the same folder, then `os.replace`), and if it still fails (the disk filled up meanwhile,
the folder went away) the results are not lost: they go to a file in the cache dir, and the one-line
error says where (`write_or_rescue`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from edgespec.util.atomic_file import write_atomic
from edgespec.util.errors import EdgespecError, UsageError
from edgespec.util.paths import home, private_folder


class OutputLost(EdgespecError):
    """The output could not be written where asked; the message says where it went instead."""


def check_writable(path: Path, flag: str) -> None:
    """Refuse (UsageError naming the flag) a path that cannot take a new file: a folder, a missing
    or unwritable parent, or something that is not a regular file. Probes the folder by creating
    and deleting a temporary file in it, which is what the final write does."""
    where = f"{flag} {path}"
    if path.is_dir():
        raise UsageError(f"{where}: is a folder; give a file name")
    if path.exists() and not path.is_file():
        raise UsageError(f"{where}: is not a regular file")
    parent = Path(os.path.realpath(path)).parent  # a link's target is what gets written (`write_atomic`)
    if not parent.is_dir():
        raise UsageError(f"{where}: the folder {parent} does not exist")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as e:
        raise UsageError(f"{where}: cannot write in {parent} ({e.strerror or e})") from None


def write_or_rescue(path: Path, write: Callable[[Path], object], what: str) -> None:
    """Write with `write(tmp_path)` into a temporary file next to `path`, then move it into place.

    If that fails, write it to `home()/rescued/` instead and raise OutputLost naming both places;
    if even that fails, the error says so (the caller has printed the figures already)."""
    try:
        write_atomic(path, write, keep_suffix=True, users=True)
        return
    except OSError as e:
        why = e.strerror or str(e)
    rescue = home() / "rescued" / path.name
    try:
        private_folder(rescue.parent)
        write_atomic(rescue, write, keep_suffix=True)
    except OSError as e:
        raise OutputLost(f"could not write the {what} to {path} ({why}), nor to {rescue} ({e.strerror or e})") from None
    raise OutputLost(f"could not write the {what} to {path} ({why}); it was saved to {rescue}")
