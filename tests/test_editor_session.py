"""The keystroke replay's model of llama.vim (benchmarks/editor_session.py): where the typist
pauses, the context llama.vim cuts around the cursor (autoload/llama.vim's s:fim_ctx_local), the
bodies it posts (a suggestion, the follow-up, the ring's background read), the requests it does
not send, and the raw prompt the peer is given. No model and no process: the fast loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import editor_session as es  # noqa: E402
import infill_proxy  # noqa: E402

SOURCE = """import math


def area(w, h):
    \"\"\"The area.\"\"\"
    if w < 0 or h < 0:
        raise ValueError(w, h)
    return w * h


def diagonal(w, h):
    return math.hypot(w, h)
"""


@pytest.fixture
def edit(tmp_path) -> es.Edit:
    path = tmp_path / "shapes.py"
    path.write_text(SOURCE)
    return es.function_body(path, "area", max_lines=10)


def test_the_body_is_taken_without_its_docstring(edit):
    assert edit.lines[edit.start : edit.end] == (
        "    if w < 0 or h < 0:",
        "        raise ValueError(w, h)",
        "    return w * h",
    )


def test_the_typist_pauses_after_the_indentation_every_third_word_and_at_the_end():
    assert es.stops("    if w < 0 or h < 0:", every=3) == [(4, "indent"), (11, "word"), (18, "word"), (22, "end")]
    assert es.stops("", 3) == [] and es.stops("x", 3) == [(1, "end")]


def test_each_pause_shows_the_buffer_as_typed_so_far(edit):
    got = list(es.pauses(edit, every=3))
    first = got[0]
    assert (first.y, first.x, first.kind) == (edit.start + 1, 4, "indent")
    assert first.lines[first.y - 1] == "    " and first.typed == "if w < 0 or h < 0:"
    assert first.lines[first.y :] == edit.lines[edit.end :]  # the rest of the body is not typed yet
    last = got[-1]
    assert last.lines == edit.lines and last.kind == "end"


def test_the_context_is_cut_around_the_cursor_as_llama_vim_cuts_it():
    lines = ("a = 1", "def f(x):", "    return x", "b = 2")
    ctx = es.local_context(lines, 3, 8, [], -1)
    assert (ctx.prefix, ctx.middle, ctx.suffix, ctx.indent) == ("a = 1\ndef f(x):\n", "    retu", "rn x\nb = 2\n", 4)
    blank = es.local_context(("a = 1", "   ", "b = 2"), 2, 3, [], -1)
    assert (blank.middle, blank.suffix, blank.indent) == ("", "\nb = 2\n", 0)
    top = es.local_context(("x",), 1, 1, [], -1)
    assert top.prefix == "\n"  # getline(1, 0) is empty; llama.vim still adds the newline


def test_the_follow_up_reads_the_suggestion_as_if_it_were_accepted():
    lines = ("def f(x):", "    ret", "b = 2")
    one = es.local_context(lines, 2, 7, ["urn x"], 4)
    assert (one.prefix, one.middle, one.suffix) == ("def f(x):\n", "    return x", "\nb = 2\n")
    two = es.local_context(lines, 2, 7, ["urn x", "    y = 1", "    z"], 4)
    assert two.prefix == "def f(x):\n    return x\n    y = 1\n" and two.middle == "    z"


def test_a_quick_request_and_its_follow_up_carry_llama_vims_fields(edit):
    vim = es.LlamaVim("shapes.py")
    pause = next(es.pauses(edit, 3))
    quick = vim.fim(pause.lines, pause.y, pause.x, [], greedy=False)
    assert quick is not None and quick["t_max_predict_ms"] == es.QUICK_MS and "temperature" not in quick
    assert quick["model"] == "" and quick["samplers"] == ["top_k", "top_p", "infill"]
    assert quick["response_fields"][:2] == ["content", "timings/prompt_n"]
    follow = vim.fim(pause.lines, pause.y, pause.x, ["if w < 0:"], greedy=True)
    assert follow is not None and follow["t_max_predict_ms"] == es.T_MAX_PREDICT_MS and follow["temperature"] == 0
    assert vim.fim(pause.lines, pause.y, pause.x, [], greedy=True) is None  # asked already: llama.vim sends nothing


def test_the_ring_is_read_in_the_background_with_each_chunks_time(edit):
    vim = es.LlamaVim("shapes.py")
    vim.open(edit.lines, 1)
    body = vim.ring_update()
    assert body is not None and body["n_predict"] == 0 and body["input_prefix"] == body["prompt"] == ""
    (chunk,) = body["input_extra"]
    assert chunk["filename"] == "shapes.py" and chunk["text"].startswith("import math\n")
    assert isinstance(chunk["time"], list) and len(chunk["time"]) == 2
    assert vim.ring_update() is None  # nothing else queued


def test_a_chunk_like_one_in_the_ring_is_not_queued_twice():
    vim = es.LlamaVim("f.py")
    text = [f"value_{i} = {i}" for i in range(10)]
    vim.pick_chunk(text, evict=False)
    vim.pick_chunk(text, evict=False)
    assert len(vim.queued) == 1
    assert es.chunk_similarity(["a b c"], ["a b c"]) == 1.0 and es.chunk_similarity(["a"], ["b"]) == 0.0


def test_what_llama_vim_shows_drops_a_repeat_of_the_next_line():
    lines = ("def f(x):", "    ", "    return x")
    assert es.shown("y = 1\n\n", lines, 2, 4) == ["y = 1"]
    assert es.shown("    return x\n", lines, 2, 4) == [""]  # the next line already says it
    assert es.shown("", lines, 2, 4) == [""]


def test_the_proxy_names_a_request_by_its_shape():
    assert infill_proxy.request_kind({"n_predict": 0}) == "ring"
    assert infill_proxy.request_kind({"n_predict": 128, "t_max_predict_ms": 250}) == "quick"
    assert infill_proxy.request_kind({"n_predict": 128, "t_max_predict_ms": 1000}) == "follow"
    flat = infill_proxy.reply_figures({"content": "ab", "timings/prompt_n": 7, "tokens_cached": 300})
    nested = infill_proxy.reply_figures({"content": "ab", "timings": {"prompt_n": 7}, "tokens_cached": 300})
    assert flat == nested and flat["prompt_n"] == 7 and flat["content_chars"] == 2
