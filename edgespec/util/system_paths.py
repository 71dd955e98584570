"""The kernel's own files, which no text a user means is ever read from: /proc, /sys and /dev.

`--context /proc` once took in every process's environment, secrets included, and kept it as
tokens in the history; a link to /dev/zero or a file of /proc is as easy to reach from a repository
or a folder given as context. Such a path is known by its name (as given, and once every link is
followed) or by its file system: a file on the same file system as /proc, /sys or /dev (a bind
mount of one elsewhere) is one too.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))


def system_path(path: Path) -> bool:
    """Whether `path` names, or leads by links to, a file of /proc, /sys or /dev."""
    for name in (Path(os.path.abspath(path)), Path(os.path.realpath(path))):
        if any(name == root or root in name.parents for root in ROOTS):
            return True
    try:
        return os.stat(path).st_dev in _system_devices()
    except OSError:
        return False


@functools.cache
def _system_devices() -> frozenset[int]:
    """The file systems of ROOTS, but the root's (a /dev that is a plain folder of it)."""
    devices = set()
    for root in ROOTS:
        try:
            devices.add(os.stat(root).st_dev)
        except OSError:
            pass
    return frozenset(devices - {os.stat("/").st_dev})
