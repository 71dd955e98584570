"""`python -m edgespec` in a subprocess of its own, for tests that send it signals or break its stdout:
its environment, and a tiny pair whose reply never ends by itself."""

from __future__ import annotations

import os
from pathlib import Path

from edgespec.testing.tiny_gguf import DRAFT, TinyShape, write_tiny_gguf

REPO = Path(__file__).resolve().parents[1]


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
    return edgespec_env(EDGESPEC_CONFIG=str(config), EDGESPEC_HOME=str(folder / "home"),
                        XDG_CONFIG_HOME=str(folder / "xdg"))
