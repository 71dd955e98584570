"""The session suite's calls as prompts of the drafting ceiling (`drafting_ceiling.py --sessions`).

A session's later calls quote the replies to its earlier ones (`bench.sessions`). Here each call
is one chat prompt whose quoted replies are plain decoding's: the harness runs `ar` first on each
prompt of the first round, and `record` keeps that reply before the next call's prompt is made, so
every mode of a call reads the same text. A session run by `auto` itself would quote its own
replies, which part from `ar`'s only at near-ties; drafting from the earlier calls then works
through the prompt (they are in it), not through the history, which no mode of the harness keeps.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from edgespec.bench.sessions import Session
from edgespec.bench.suites import BenchPrompt


class SessionCalls:
    """The calls of `sessions` in order, built as they are reached: iterate once per round; call
    `record` with each call's `ar` reply (its text) in the first round."""

    def __init__(self, sessions: Sequence[Session]):
        self.sessions = list(sessions)
        self._built: dict[str, BenchPrompt] = {}
        self._replies: dict[str, list[str]] = {s.id: [] for s in self.sessions}
        self._call_of: dict[str, tuple[Session, int]] = {}  # a prompt's id: its session and call

    def __iter__(self) -> Iterator[BenchPrompt]:
        for session in self.sessions:
            for call in range(len(session.calls)):
                yield self._prompt(session, call)

    def _prompt(self, session: Session, call: int) -> BenchPrompt:
        key = f"{session.id}/call-{call}"
        if key not in self._built:
            messages = session.messages(call, self._replies[session.id])  # ValueError: a reply not recorded
            self._built[key] = BenchPrompt(
                key, f"session-{session.part}", "chat", session.max_tokens(call), messages=tuple(messages)
            )
            self._call_of[key] = session, call
        return self._built[key]

    def record(self, prompt: BenchPrompt, reply: str) -> None:
        """`reply`, plain decoding's reply to `prompt`, is what later calls of its session quote
        (only the first one recorded counts: every round reads the same prompts)."""
        session, call = self._call_of[prompt.id]
        replies = self._replies[session.id]
        if call == len(replies):
            replies.append(reply)
