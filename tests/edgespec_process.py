"""`python -m edgespec` in a subprocess of its own, for tests that send it signals, break its stdout or
feed its stdin: its environment, a tiny pair whose reply never ends by itself, and its output read
as it comes."""

from __future__ import annotations

import os
import select
import subprocess
import time
from pathlib import Path

import pytest

from edgespec.testing.tiny_gguf import DRAFT, TinyShape, write_tiny_gguf

REPO = Path(__file__).resolve().parents[1]
# what a process that crashed or leaked an exception on the way out leaves on stderr
CRASH_SIGNS = ("Traceback", "double free", "corruption", "Exception ignored", "Aborted")
# an `edgespec run` on the endless pair that is still writing when the test acts on it
LONG_RUN = ("the river", "--raw", "--temperature", "0", "--k", "3", "--max-tokens", "30000", "--color", "never")


# what the engine says on stderr about the machine's speed (edgespec.engine.engine): a calibration
# that lasts a second or more, which a busy machine makes of even the tiny pair's, and a curve live
# passes contradict
SPEED_LINES = ("edgespec: measuring this machine's speed", "edgespec: speed measure", "edgespec: live passes ran")


def without_speed_lines(stderr: str) -> list[str]:
    """`stderr`'s lines but those SPEED_LINES begin, for a test of the others."""
    return [line for line in stderr.splitlines() if not line.startswith(SPEED_LINES)]


def edgespec_env(**extra: str) -> dict[str, str]:
    """The environment of an `edgespec` subprocess that imports this checkout."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def endless_pair_env(folder: Path) -> dict[str, str]:
    """The environment of a subprocess whose default pair ("endless", written into `folder`) is a
    tiny pair whose greedy reply never ends by itself, with a 32k context: still generating when
    the test acts on it, whatever the machine's speed."""
    shape = TinyShape(n_ctx=32768)
    target = write_tiny_gguf(folder / "target.gguf", shape=shape, endless=True)
    draft = write_tiny_gguf(folder / "draft.gguf", shape=shape, endless=True, **DRAFT)
    config = folder / "models.toml"
    config.write_text(
        f'default = "endless"\n'
        f'[models.t]\nformat = "gguf"\npath = "{target}"\n'
        f'[models.d]\nformat = "gguf"\npath = "{draft}"\n'
        '[pairs.endless]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 32768\n'
    )
    return edgespec_env(
        EDGESPEC_CONFIG=str(config), EDGESPEC_HOME=str(folder / "home"), XDG_CONFIG_HOME=str(folder / "xdg")
    )


def read_until(proc: subprocess.Popen, n_bytes: int, timeout: float) -> bytes:
    """stdout until n_bytes have come: the reply is being generated."""
    got = b""
    deadline = time.monotonic() + timeout
    while len(got) < n_bytes:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(proc.stdout.fileno(), 65536) if ready else b""
        if not chunk:
            proc.kill()
            pytest.fail(f"no reply after {timeout}s (got {got!r}); stderr: {proc.communicate()[1].decode()}")
        got += chunk
    return got
