"""Reading the next prompt while its message is written: the chat's read ahead.

The prompt that enter sends is the chat so far (trimmed to the context as `fit_context` trims it)
and the message box's text, in the chat template. Most of it is known long before enter: all of it
but the end of the message. So while the user types or pastes, the app has the target read the
part that can no longer change (`Engine.read_ahead`: whole read chunks, 128 tokens, at the
positions a cold read uses), and at enter the reply reads only the rest. The reply is bit for bit
the one a cold read gives: the reply keeps only the chunks of its own prompt (`sync_cache`), which
were read as a cold read reads them.

What can no longer change (`settled_prompt`): the prompt's tokens up to where appending to the
message could tokenize them otherwise. The tokenizer splits text into words and whitespace runs
before it merges bytes, so text appended can change only the last few tokens; how many depends on
the text (a long identifier, a run of indentation or of punctuation spans several). Rather than
guess a count, the prompt is tokenized again with each of `PROBES` appended to the message (a
letter, a digit, a space, a new line, punctuation: what a user types next) and the tokens all of
them agree on are kept, less `MARGIN` for any other continuation. A wrong guess costs time, never
a reply: a chunk read for text the user then changed is read again at enter.

When: keystrokes are handled on the UI thread, which only notes the change and sets a timer (it
never waits for the engine). A read starts `SETTLE_S` after the typing pauses, at most
`LONGEST_WAIT_S` after the first change not yet read for (typing at 6 characters a second never
pauses that long), and at once after a paste (a change that adds `PASTE_CHARS` or more). The read
runs on the engine thread (`EngineThread`, where every engine call runs), which renders and
tokenizes the prompt there too; one read at a time, and changes made meanwhile start the next when
it ends. An edit behind what the running read was asked to read cancels it (it stops after its
current chunk), and the next read rolls the target back to where the prompt still agrees.

At enter (and before anything else generates: regenerate), the read is cancelled and the reply
queues behind it on the engine thread: it waits for the chunk in hand (its tokens are the prompt's,
so the reply keeps them) and reads the rest. No read starts while a reply runs; when it ends, a
message already in the box is read.

Reads are not saved in the prompt cache (`save=False`): the reply saves its state after it. An
engine without `read_ahead` (the tests' scripted one) is not read ahead for. The UI thread still
counts the prompt's tokens at enter (`fit_context`), as it did before: tokenizing reads only the
vocabulary, which a read on the engine thread does not touch.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from textual.timer import Timer

from edgespec.engine.engine import Engine
from edgespec.engine.engine_thread import EngineThread
from edgespec.engine.read_ahead import Reading
from edgespec.tui.generation import fit_context
from edgespec.util.errors import EdgespecError

SETTLE_S = 0.3  # a pause in typing this long starts a read
LONGEST_WAIT_S = 1.0  # typing without such a pause starts one at least this often
PASTE_CHARS = 32  # a change that adds this many characters at once is a paste: read at once
PROBES = ("a", "0", " ", "\n", ".", "(")  # what may follow the message's text
MARGIN = 2  # tokens left out besides, for a continuation no probe foresaw
BEHIND_CHARS = 16  # an edit this far or further from the end of the text being read cancels the read

# (messages of the chat so far, the message being written), or None when nothing is to be read now
NextPrompt = Callable[[], "tuple[list[dict], str] | None"]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def settled_prompt(engine: Engine, history: list[dict], draft: str, max_tokens: int) -> list[int]:
    """The leading tokens of the prompt that sending `draft` after `history` would read, up to where
    more text typed after `draft` could change them (see the module's docstring); [] when the
    message does not fit the context (enter says so)."""
    try:
        messages, _, _ = fit_context(engine, [*history, {"role": "user", "content": draft}], max_tokens)
    except EdgespecError:
        return []
    head = messages[:-1]

    def prompt(text: str) -> list[int]:
        return engine.chat_tokens([*head, {"role": "user", "content": text}])

    tokens = prompt(draft)
    settled = min([len(tokens)] + [_common_prefix(tokens, prompt(draft + probe)) for probe in PROBES])
    return tokens[: max(0, settled - MARGIN)]


class ReadAhead:
    """The chat's reads ahead. `changed`, `stop`, `resume` and the timers run on the UI thread and
    never wait for the engine; `_read` runs on the engine thread.

    `next_prompt()`: what enter would send now, or None (a reply runs, the box is empty);
    `set_timer(delay, callback)`: the app's timer; `say(message)`: a notification, for a read that
    failed (reading ahead then stops for the session); `on`: False reads nothing (`--no-read-ahead`)."""

    def __init__(
        self,
        engine: Engine,
        engine_thread: EngineThread,
        max_tokens: int,
        next_prompt: NextPrompt,
        set_timer: Callable[[float, Callable[[], None]], Timer],
        say: Callable[[str], None],
        on: bool = True,
    ):
        self.engine, self.engine_thread, self.max_tokens = engine, engine_thread, max_tokens
        self.next_prompt, self.set_timer, self.say = next_prompt, set_timer, say
        self.enabled = on and callable(getattr(engine, "read_ahead", None))
        self._timer: Timer | None = None
        self._since: float | None = None  # when the earliest change not yet read for was made
        self._length = 0  # of the message box's text, to tell a paste from a keystroke
        self._job: Future | None = None  # the read on the engine thread, until it has ended
        self._cancel = threading.Event()
        self._reading = ""  # the text the running read was asked for
        self._again = False  # changes came while it ran: read again when it ends
        self.last: Reading | None = None  # what the latest read that read anything did
        self.read_for: str | None = None  # the text the latest read that ended was for

    @property
    def idle(self) -> bool:
        """No read is running or about to start."""
        return self._job is None and self._timer is None

    @property
    def queued(self) -> bool:
        """A read is on the engine thread, running or waiting for it."""
        return self._job is not None

    def changed(self, text: str) -> None:
        """The message box's text changed (a keystroke, a paste, an edit anywhere)."""
        added, self._length = len(text) - self._length, len(text)
        if not self.enabled:
            return
        if self._job is not None and not text.startswith(self._reading[: max(0, len(self._reading) - BEHIND_CHARS)]):
            self._cancel.set()  # edited behind what it reads: its next chunks would be thrown away
        self._schedule(0.0 if added >= PASTE_CHARS else SETTLE_S)

    def resume(self) -> None:
        """A reply ended: read for the text already in the box."""
        if self.enabled:
            self._schedule(0.0)

    def restart(self) -> None:
        """Another chat is on screen: what is read for is another prompt."""
        self.stop()
        self.resume()

    def stop(self) -> None:
        """Before a reply (enter, regenerate), another chat, or quitting: cancel the read in hand
        (it stops after its current chunk) and any about to start."""
        if self._timer is not None:
            self._timer.stop()
        self._timer, self._since, self._again = None, None, False
        self._cancel.set()

    def close(self) -> None:
        """The app is quitting: cancel, and start nothing more."""
        self.stop()
        self.enabled = False

    def _schedule(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._since is None:
            self._since = now
        # at once is the next 10 ms: Textual's timers cannot stop one of no delay
        delay = max(0.01, min(delay, self._since + LONGEST_WAIT_S - now))
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(delay, self._start)

    def _start(self) -> None:
        """Timer: start a read for what enter would send now (or note that one is due when the
        running one ends)."""
        self._timer, self._since = None, None
        if self._job is not None:
            self._again = True
            return
        wanted = self.next_prompt()
        if wanted is None:
            return
        history, draft = wanted
        loop = asyncio.get_running_loop()
        self._cancel = cancel = threading.Event()
        self._reading = draft
        job = self._job = self.engine_thread.submit(self._read, history, draft, cancel)
        job.add_done_callback(lambda done: self._on_engine_thread_done(loop, done))

    def _read(self, history: list[dict], draft: str, cancel: threading.Event) -> Reading | str | None:
        """Engine thread: tokenize what enter would send, read its settled whole chunks. -> what it
        did, None when there was nothing to read, or why it failed."""
        if cancel.is_set():
            return None
        try:
            tokens = settled_prompt(self.engine, history, draft, self.max_tokens)
            return self.engine.read_ahead(tokens, cancel, save=False) if tokens else None
        except Exception as e:  # a failed read must leave the app usable; the reply reports its own failures
            return str(e) if isinstance(e, EdgespecError) else f"{type(e).__name__}: {e}"

    def _on_engine_thread_done(self, loop: asyncio.AbstractEventLoop, job: Future) -> None:
        try:
            loop.call_soon_threadsafe(self._ended, job)
        except RuntimeError:
            pass  # the app has gone: nothing is left to read for

    def _ended(self, job: Future) -> None:
        """UI thread: the read `job` ended; start the next if changes came meanwhile."""
        if job is not self._job:
            return
        self._job = None
        self.read_for = self._reading
        result = job.result()
        if isinstance(result, str):
            self.enabled = False
            self.say(f"reading ahead stopped: {result}")
            return
        if result is not None:
            self.last = result
        if self._again:
            self._again = False
            self._start()
