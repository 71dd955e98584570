"""An inline completion's line rules (`n_indent`, `t_max_predict_ms`), as llama.cpp's server applies
them, on token streams made here; generated streams check that cutting never reorders or invents
text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edgespec.decoding.events import Source, Token
from edgespec.server.line_limits import LineLimits


def tokens(*texts: str) -> list[Token]:
    return [Token(i, t, Source.TARGET) for i, t in enumerate(texts)]


def sent(limits: LineLimits, stream: list[Token]) -> str:
    out = []
    for token in stream:
        out += limits.feed([token])
    out += limits.flush()
    return "".join(t.text for t in out)


def test_a_line_less_indented_than_the_cursor_ends_the_suggestion_after_its_indentation():
    limits = LineLimits(n_indent=4)
    text = sent(limits, tokens("x = 1", "\n", "    y", " = 2\n", "  ", "z = 3\n", "    w"))
    assert limits.met and text == "x = 1\n    y = 2\n  "


def test_the_first_line_is_never_checked_and_deeper_lines_pass():
    limits = LineLimits(n_indent=8)
    assert sent(limits, tokens("a", "\n        b", "\n            c")) == "a\n        b\n            c"
    assert not limits.met


def test_a_line_of_whitespace_is_held_until_its_indentation_is_known():
    limits = LineLimits(n_indent=4)
    assert limits.feed(tokens("a\n")) == tokens("a\n")
    assert limits.feed(tokens("  ")) == []  # could be 2 spaces of indentation, or more to come
    assert [t.text for t in limits.feed(tokens("  b"))] == ["  ", "  b"]


def test_after_the_time_limit_the_next_new_line_ends_it():
    now = [0.0]
    limits = LineLimits(t_max_s=1.0, clock=lambda: now[0])
    assert sent_part(limits, "def f():\n") == "def f():\n"  # in time
    now[0] = 2.0
    assert sent_part(limits, "    return 1") == "    return 1"  # past it, but mid-line
    assert sent_part(limits, "\n") == "\n" and limits.met
    assert sent_part(limits, "    more") == ""


def sent_part(limits: LineLimits, text: str) -> str:
    return "".join(t.text for t in limits.feed(tokens(text)))


@given(
    st.lists(st.sampled_from(["a", " ", "  ", "\n", "\t", "b c", "\n  ", "\n    x"]), max_size=30), st.integers(0, 6)
)
def test_what_is_sent_is_a_prefix_of_the_text(pieces, n_indent):
    limits = LineLimits(n_indent=n_indent)
    text = sent(limits, tokens(*pieces))
    assert "".join(pieces).startswith(text)
    if not limits.met:
        assert text == "".join(pieces)
