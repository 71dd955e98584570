"""Stop strings cut a streamed reply as OpenAI's API does (edgespec.server.stop_strings): text that may
begin a stop string is held back until the next text shows whether it does."""

from __future__ import annotations

from edgespec.decoding.events import Source, Token
from edgespec.server.stop_strings import StopCut


def _tokens(*texts: str) -> list[Token]:
    return [Token(i, text, Source.DRAFT if i % 2 else Source.TARGET) for i, text in enumerate(texts)]


def _fed(cut: StopCut, texts: list[str]) -> list[list[str]]:
    return [[t.text for t in cut.feed(token)] for token in _tokens(*texts)]


def test_a_stop_string_across_tokens_is_held_back_then_dropped():
    cut = StopCut(("END",))
    assert _fed(cut, ["abc", " E", "N", "Dmore", "later"]) == [["abc"], [], [], [" "], []]
    assert cut.met and cut.flush() == []


def test_text_that_only_began_like_a_stop_string_is_released():
    cut = StopCut(("END",))
    assert _fed(cut, ["abc E", "Nx"]) == [[], ["abc E", "Nx"]]
    assert not cut.met


def test_the_token_a_stop_string_starts_in_is_cut_there():
    cut = StopCut(("\n\n", "zz"))
    [released] = cut.feed(Token(7, "hello\n\nworld", Source.BONUS))
    assert released == Token(7, "hello", Source.BONUS) and cut.met


def test_the_earliest_stop_string_wins_and_held_text_is_flushed_at_the_end():
    assert _fed(StopCut(("b", "a")), ["xxab"]) == [["xx"]]
    cut = StopCut(("END",))
    assert _fed(cut, ["ab", "E"]) == [["ab"], []]
    assert [t.text for t in cut.flush()] == ["E"]
    assert _fed(StopCut(()), ["any", "thing"]) == [["any"], ["thing"]]
