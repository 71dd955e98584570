"""What the prompt cache's tests read (tests/test_prompt_cache*.py): a file's worth of code, a
longer one, and the tiny GGUFs loaded in read chunks that fit their context."""

from __future__ import annotations

from pathlib import Path

from edgespec.backends.llamacpp import LlamaCppBackend

FILE = "".join(f"def f{i}(a, b):\n    return a * {i} + b\n\n" for i in range(4))  # about 110 tokens
LONGER = FILE + "".join(f"def g{i}(a):\n    return a - {i}\n\n" for i in range(1))  # over 128 tokens


def load(path: Path) -> LlamaCppBackend:
    return LlamaCppBackend(path, 256, threads=2, read_chunk=32)  # whole chunks fit the tiny context
