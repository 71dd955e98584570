"""Where a measurement came from: the command, the code and the machine, kept beside the figures.

A benchmark's JSON is the record a README table is rendered from, so it says what made it: the
command line, the commit (and whether the tree had uncommitted changes) of the edgespec that ran,
and the machine (its platform, processor and cores).
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

from edgespec import __version__

_SOURCE = Path(__file__).resolve().parent.parent  # a checkout's root, when edgespec runs from one


def provenance(argv: list[str] | None = None) -> dict:
    """The command (`argv`, default this process's), commit, machine and time of a measurement."""
    return {"command": shlex.join(sys.argv if argv is None else argv), **_code(),
            "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                        "cpus": os.cpu_count(), "python": platform.python_version()},
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}


def _code() -> dict:
    """The commit of the checkout edgespec runs from, or its version when it is not one."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(_SOURCE), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"version": __version__}
    return {"version": __version__, "commit": commit,
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
