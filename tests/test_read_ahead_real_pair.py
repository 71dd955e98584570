"""Reading ahead and filling in the middle on the built-in pair: a prompt read ahead while it was
still being written, edited behind the read point, or read ahead whole gives the cold read's logits
bit for bit; the fill-in-the-middle prompt is the one Qwen2.5-Coder documents, and the target
completes code with it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgespec.decoding.backend import sync_cache
from edgespec.decoding.events import Token
from edgespec.engine.engine import GenerateSettings
from edgespec.engine.infill import ExtraFile, Infill, fim_marks, infill_prompt

pytestmark = pytest.mark.slow

SOURCE = (Path(__file__).resolve().parents[1] / "edgespec" / "decoding" / "tree.py").read_text()[:2400]
QUESTION = "What does subtree return, and when is it empty?"


def test_a_prompt_read_ahead_as_it_was_written_gives_the_cold_reads_logits(real_engine):
    target = real_engine.target

    def prompt(message: str) -> list[int]:
        return real_engine.chat_tokens([{"role": "user", "content": message}])

    whole = prompt(f"{SOURCE}\n\n{QUESTION}")
    target.truncate(0)
    cold = sync_cache(target, whole, 1).copy()
    typing = [SOURCE[:900], SOURCE[:1700] + "\n# a line the user deleted again\n", f"{SOURCE}\n\n{QUESTION[:20]}"]
    target.truncate(0)
    for draft in typing:  # each read rolls back to what the next one shares, then reads on
        reading = real_engine.read_ahead(prompt(draft), save=False)
        assert reading.ready % target.read_chunk == 0 and target.exact == reading.ready
    assert real_engine.read_ahead(whole, save=False).ready > len(whole) - target.read_chunk
    assert np.array_equal(sync_cache(target, whole, 1), cold)


def test_the_infill_prompt_is_qwens_documented_text(real_engine):
    target = real_engine.target
    infill = Infill("def add(a, b):\n    return ", "\n\n\nprint(add(1, 2))\n", extra=(ExtraFile("m.py", "X = 1\n"),))
    made = infill_prompt(target, fim_marks(target), infill, room=256, order="psm")
    text = (
        "<|repo_name|>myproject\n<|file_sep|>m.py\nX = 1\n<|file_sep|>filename\n"
        "<|fim_prefix|>def add(a, b):\n    return <|fim_suffix|>\n\n\nprint(add(1, 2))\n<|fim_middle|>"
    )
    assert made.tokens == target.tokenize(text, special=True) and not made.truncated
    events = list(real_engine.generate_tokens(made.tokens, GenerateSettings(max_tokens=12)))
    middle = "".join(e.text for e in events if isinstance(e, Token))
    assert middle.strip().startswith("a + b"), middle
