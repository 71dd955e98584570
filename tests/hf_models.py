"""How the hf backend's tests (tests/test_hf_backend.py, tests/test_hf_loading.py) load the tiny
transformers models of the `tiny_dirs` fixture (tests/conftest.py): in fp32 on the CPU, fed the
texts below, their logits compared within ATOL."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from edgespec.backends.hf import HFBackend  # noqa: E402
from edgespec.backends.hf_loading import load_hf_backend  # noqa: E402
from edgespec.models.registry import ModelSpec  # noqa: E402

# fp32 on tiny models: a batch of n and n single steps agree to a few ulps of the logits' scale
ATOL = 2e-4
TEXTS = [
    "def fibonacci(n):\n    return n",
    "Café, naïve, über — 日本語 中文 € Ω 🙂🚀 ∑ x ≤ y",
    "  leading spaces\tand\ttabs\r\nand a mix: ünïcödé",
]


def spec(name: str = "tiny", **kw) -> ModelSpec:
    kw.setdefault("dtype", "fp32")
    return ModelSpec(name=name, format="hf", **kw)


def load(path: Path, n_ctx: int = 256, **kw) -> HFBackend:
    return load_hf_backend(spec(**kw), path, n_ctx=n_ctx, device_map="cpu")


def prompt_ids(b: HFBackend) -> list[int]:
    ids = b.tokenize(TEXTS[0] + " " + TEXTS[1])
    assert len(ids) > 20
    return ids
