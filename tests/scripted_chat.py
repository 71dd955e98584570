"""A scripted chat for the TUI tests (tests/test_tui.py, tests/test_history.py): the events a
speculative decoder would yield for a fixed reply, a fake engine that plays them (pausing or failing
where asked), a tick clock, and the helpers that drive `ChatApp` over them with Pilot."""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import replace
from pathlib import Path

from edgespec.decoding.backend import Placement
from edgespec.decoding.events import ControllerState, Source, Step, Summary, Token
from edgespec.engine.engine import GenerateSettings
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.tui.app import ChatApp
from edgespec.tui.chat_store import ChatStore
from edgespec.tui.prompt import PromptBox
from edgespec.tui.transcript import ReplyView
from edgespec.util.errors import EdgespecError
from edgespec.util.hardware import physical_cores

REPLY = '''Here is a small function that ignores case, spaces and punctuation:

```python
def is_palindrome(s: str) -> bool:
    """True if s reads the same backwards, ignoring case and non-alphanumerics."""
    cleaned = [c.lower() for c in s if c.isalnum()]
    return cleaned == cleaned[::-1]
```

How it works:

- `c.isalnum()` keeps letters and digits, so "A man, a plan" is compared as "amanaplan".
- `cleaned[::-1]` is the list reversed; comparing lists avoids building a second string.

For example, `is_palindrome("Never odd or even")` returns `True`, and `is_palindrome("edge")` returns `False`.'''

# (k, accepted) per target pass, cycled: full acceptance (bonus), partial (correction), K=0 (target).
ROUNDS = [(4, 4), (4, 2), (5, 5), (3, 1), (0, 0), (4, 3), (6, 6), (4, 0), (2, 2), (5, 4), (0, 0), (3, 3)]
REJECTS = [" string", " value", "(", " text", " reverse", " s", " return", " letters", ".", " lower"]
SIZE = (110, 34)


def split_tokens(text: str) -> list[str]:
    """A BPE-like split: words carry their leading space; punctuation and newlines stand alone."""
    return re.findall(r" ?\w+| ?[^\w\s]|\n| +", text)


def script(text: str = REPLY, rounds=ROUNDS) -> list:
    """The events a speculative decoder would yield for `text`: per round the tokens, then the Step."""
    pieces = split_tokens(text)
    events: list = []
    i = r = 0
    while i < len(pieces):
        k, acc = rounds[r % len(rounds)]
        if k == 0:
            events.append(Token(i, pieces[i], Source.TARGET))
            i += 1
            events.append(Step(0, 0, (), (), 0.0, 0.024, None, ControllerState("auto", 0, None, 0.6, 1.0, 1.3)))
        else:
            acc = min(acc, len(pieces) - i - 1)
            accepted_ids = tuple(range(i, i + acc))
            for j in accepted_ids:
                events.append(Token(j, pieces[j], Source.DRAFT))
            i += acc
            rejected = tuple(1000 + (r * 3 + j) % len(REJECTS) for j in range(k - acc))
            events.append(Token(i, pieces[i], Source.BONUS if not rejected else Source.CORRECTION))
            i += 1
            events.append(
                Step(
                    k,
                    acc,
                    accepted_ids + rejected,
                    rejected,
                    0.004 * k,
                    0.028,
                    "model",
                    ControllerState("auto", k, "model", 0.72, 1.55, 1.42),
                )
            )
        r += 1
    return events


def summarize(events: list, stop_reason: str, settings: GenerateSettings | None = None) -> Summary:
    """The Summary the decoder would end `events` with (its Tally of them, plus timings) under
    `settings`: whether it sampled, and the lookups in the reply it replaced, if any."""
    s = Summary(prompt_tokens=42, target_read_s=0.12, ttft_s=0.15, stop_reason=stop_reason)
    for e in events:
        s.add(e)
    s.decode_s = (s.draft_s + s.verify_s) * 1.08
    if settings is not None:
        s.sampled = not settings.sampling.greedy
        if settings.earlier_reply:
            s.lookups["replaced"] = sum(type(e) is Step for e in events)
    return s


def from_replaced(events: list) -> list:
    """`events` as a regenerate drafts them: every drafted pass copied from the reply it replaces."""
    return [
        replace(e, drafter="replaced", controller=replace(e.controller, drafter="replaced"))
        if type(e) is Step and e.drafter
        else e
        for e in events
    ]


class FakeEngine:
    """Scripted stand-in for edgespec.engine.Engine (chat, count_tokens, n_ctx, pair, target, placements,
    decoding_threads, token_text). Given the reply a regenerate replaces, it drafts from it, as the
    engine does (`from_replaced`). Its models run on `threads` CPU threads, by default every core,
    as the default pair does."""

    def __init__(
        self,
        events=None,
        *,
        pause_after: int | None = None,
        fail_after: int | None = None,
        n_ctx: int = 4096,
        stop_reason: str = "eos",
        threads: int | None = None,
    ):
        self.events = script() if events is None else events
        self.stop_reason = stop_reason
        self.pause_after = pause_after  # yield this many events, then wait for `resume` or cancel
        self.fail_after = fail_after
        self.n_ctx = n_ctx
        self.pair = PairConfig(
            name="qwen2.5-coder-1.5b",
            backend="llamacpp",
            target=ModelSpec(name="qwen2.5-coder-1.5b-instruct-q4_k_m", format="gguf"),
            draft=ModelSpec(name="qwen2.5-coder-0.5b-instruct-q4_k_m", format="gguf"),
            drafter="model",
            context=n_ctx,
        )
        self.paused = threading.Event()
        self.resume = threading.Event()
        self.calls: list[list[dict]] = []
        self.settings: list[GenerateSettings] = []  # each call's, as the app passed them
        self.closed = False
        self.threads = physical_cores() if threads is None else threads
        self.target = None  # no model: the chat command opens no copying source for it (tests keep them off)

    def placements(self) -> dict[str, Placement]:
        return {role: Placement("cpu", f"{self.threads} threads", self.threads) for role in ("target", "draft")}

    def decoding_threads(self) -> int:
        return self.threads

    def chat(self, messages, settings, cancel=None):
        cancel = cancel or threading.Event()
        self.calls.append([dict(m) for m in messages])
        self.settings.append(settings)
        done: list = []
        for n, event in enumerate(from_replaced(self.events) if settings.earlier_reply else self.events):
            if n == self.fail_after:
                raise EdgespecError("backend failure: llama_decode returned -3")
            if n == self.pause_after:
                self.paused.set()
                while not self.resume.is_set() and not cancel.is_set():
                    cancel.wait(0.005)
            if cancel.is_set():  # checked once per pass, like the real decoder
                yield summarize(done, "cancelled", settings)
                return
            done.append(event)
            yield event
        yield summarize(done, self.stop_reason, settings)

    def count_tokens(self, messages) -> int:
        return sum(len(m["content"]) // 4 + 4 for m in messages)

    def token_text(self, token_id: int) -> str:
        return REJECTS[token_id - 1000] if token_id >= 1000 else split_tokens(REPLY)[token_id]

    def close(self) -> None:
        self.closed = True


class TickClock:
    """Each reading is `step` after the previous one (the second, the first token, `first` after the
    send): live tokens/s and TTFT come out the same on every run."""

    def __init__(self, step: float = 0.025, first: float = 0.21):
        self.t, self.step, self.first, self.n, self.lock = 0.0, step, first, 0, threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            self.n += 1
            self.t += self.first if self.n == 2 else self.step
            return self.t


def make_app(tmp_path: Path, engine: FakeEngine | None = None, **kwargs) -> ChatApp:
    return ChatApp(
        engine or FakeEngine(),
        GenerateSettings(max_tokens=256),
        store=ChatStore(tmp_path / "chats"),
        clock=TickClock(),
        **kwargs,
    )


async def wait_until(pilot, predicate, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.01)


async def wait_for_reply(pilot) -> None:
    """Until a reply is on screen and generation has ended."""
    app = pilot.app
    await wait_until(pilot, lambda: not app.generating and app.transcript.replies())


async def send(pilot, text: str) -> None:
    pilot.app.query_one(PromptBox).text = text
    await pilot.press("enter")


def reply_text(view: ReplyView) -> str:
    return view.tokens.content.plain


def n_tokens_shown(app: ChatApp) -> int:
    return app._gen.stats.tokens if app._gen is not None else -1
