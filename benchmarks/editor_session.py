"""A keystroke replay for inline completion: an edit typed into a held-out file, and the requests
llama.vim sends while it is typed.

The edit: a function's body is taken out of a file nobody here tuned on (Python's standard library)
and typed in again, line by line, as a user writes it. The typist pauses after a line's
indentation, after every `every`-th word of a line and at its end; at each pause the editor asks
for a suggestion.

The requests are those of llama.vim (ggml-org/llama.vim, `autoload/llama.vim`, read for their
shapes; none of its code is here), with its defaults: 256 lines of prefix, 64 of suffix,
`n_predict` 128, a ring of up to 16 chunks of 32 lines sent as `input_extra`. At a pause it sends a
quick request (`t_max_predict_ms` 250); once that suggestion is shown, a speculative follow-up as if
the user accepted it (1,000 ms), whose answer is cached; a request whose context it already asked
about is not sent. Chunks are picked when the file is opened and when the cursor moves more than 32
lines, and read in the background (`n_predict` 0) once the user is idle (at a line's end here: in
insert mode llama.vim waits for 3 s without a keystroke).
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

N_PREFIX = 256
N_SUFFIX = 64
N_PREDICT = 128
T_MAX_PROMPT_MS = 500
T_MAX_PREDICT_MS = 1000
QUICK_MS = 250  # llama.vim's first request at a position: the follow-up comes once it is shown
RING_N_CHUNKS = 16
RING_CHUNK_SIZE = 64
RING_SCOPE = 1024
RING_QUEUE = 16
# what llama.vim asks back of a suggestion; llama.cpp flattens "timings/prompt_n" into a top-level key
RESPONSE_FIELDS = [
    "content",
    "timings/prompt_n",
    "timings/prompt_ms",
    "timings/prompt_per_token_ms",
    "timings/prompt_per_second",
    "timings/predicted_n",
    "timings/predicted_ms",
    "timings/predicted_per_token_ms",
    "timings/predicted_per_second",
    "truncated",
    "tokens_cached",
]
BREAKS = " ([.,="  # a word ends after one of these


@dataclass(frozen=True)
class Pause:
    """The buffer when the typist stops: `y` the cursor's line (1-based), `x` its column (0-based,
    at the end of what is typed); `kind` is "indent", "word" or "end" (of the line); `typed` the rest
    of the line the user goes on to type."""

    lines: tuple[str, ...]
    y: int
    x: int
    kind: str
    typed: str


@dataclass(frozen=True)
class Edit:
    """A function's body in a file: `lines` the file, the body `lines[start:end]` (0-based)."""

    name: str
    lines: tuple[str, ...]
    start: int
    end: int


def function_body(path: Path, qualname: str, max_lines: int) -> Edit:
    """The body of `qualname` (`Class.method` or `function`) in `path`, its docstring left in place,
    at most its first `max_lines` lines."""
    text = path.read_text()
    node: ast.AST = ast.parse(text)
    for part in qualname.split("."):
        found = [
            n
            for n in ast.iter_child_nodes(node)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == part
        ]
        if not found:
            raise ValueError(f"{path.name} has no {qualname}")
        node = found[0]
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    body = node.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # the docstring stays
    start = body[0].lineno - 1
    end = min(node.end_lineno or start + 1, start + max_lines)
    return Edit(f"{path.name}:{qualname}", tuple(text.splitlines()), start, end)


def pauses(edit: Edit, every: int) -> Iterator[Pause]:
    """The pauses while `edit`'s body is typed again into the file without it."""
    before, body, after = edit.lines[: edit.start], edit.lines[edit.start : edit.end], edit.lines[edit.end :]
    for n, line in enumerate(body):
        y = len(before) + n + 1
        for x, kind in stops(line, every):
            yield Pause((*before, *body[:n], line[:x], *after), y, x, kind, line[x:])


def stops(line: str, every: int) -> list[tuple[int, str]]:
    """Where the typist stops in `line`: after its indentation, after every `every`-th word, at its end."""
    indent = len(line) - len(line.lstrip())
    if not line.strip():
        return []
    found = [(indent, "indent")] if indent else []
    words = [i + 1 for i in range(indent, len(line) - 1) if line[i] in BREAKS and line[i + 1] != " "]
    found += [(x, "word") for x in words[every - 1 :: every]]
    if not found or found[-1][0] != len(line):
        found.append((len(line), "end"))
    return found


def _getline(lines: tuple[str, ...], first: int, last: int) -> list[str]:
    """Vim's getline(first, last): 1-based and inclusive, empty when first > last."""
    return list(lines[max(first, 1) - 1 : max(last, 0)])


@dataclass(frozen=True)
class Context:
    prefix: str
    middle: str
    suffix: str
    indent: int
    line_cur_suffix: str

    def key(self) -> str:
        return self.prefix + self.middle + "Î" + self.suffix


def local_context(lines: tuple[str, ...], y: int, x: int, prev: list[str], indent_last: int) -> Context:
    """llama.vim's s:fim_ctx_local: the text around the cursor, or with `prev` (a suggestion's lines)
    as if it had been accepted."""
    if not prev:
        line = lines[y - 1]
        cur_prefix, cur_suffix = line[:x], line[x:]
        prefix_lines = _getline(lines, y - N_PREFIX, y - 1)
        if re.match(r"^\s*$", line):
            indent, cur_prefix, cur_suffix = 0, "", ""
        else:
            indent = len(line) - len(line.lstrip())
    else:
        line = lines[y - 1] + prev[0] if len(prev) == 1 else prev[-1]
        cur_prefix, cur_suffix = line, ""
        prefix_lines = _getline(lines, y - N_PREFIX + len(prev) - 1, y - 1)
        if len(prev) > 1:
            prefix_lines += [lines[y - 1] + prev[0], *prev[1:-1]]
        indent = indent_last
    suffix_lines = _getline(lines, y + 1, min(len(lines), y + N_SUFFIX))
    return Context(
        "\n".join(prefix_lines) + "\n",
        cur_prefix,
        cur_suffix + "\n" + "\n".join(suffix_lines) + "\n",
        indent,
        cur_suffix,
    )


def _words(lines: list[str]) -> list[str]:
    return [w for w in re.split(r"\W+", "\n".join(lines)) if w]


def chunk_similarity(a: list[str], b: list[str]) -> float:
    """llama.vim's s:chunk_sim: the share of words two chunks have in common (1: alike)."""
    words_a, words_b = _words(a), _words(b)
    if not words_a and not words_b:
        return 1.0
    seen = set(words_a)
    return 2.0 * sum(w in seen for w in words_b) / (len(words_a) + len(words_b))


@dataclass
class LlamaVim:
    """llama.vim's state while one file is edited: the ring of chunks, the queue of chunks picked
    and not yet sent, and the contexts it has already asked about. Random picks are seeded."""

    filename: str
    seed: int = 0
    ring: list[dict] = field(default_factory=list)
    queued: list[dict] = field(default_factory=list)
    asked: set[str] = field(default_factory=set)
    pos_y_pick: int = -9999
    indent_last: int = -1
    clock: float = 0.0  # seconds since the file was opened, for a chunk's `time`

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def _rand(self, lo: int, hi: int) -> int:
        return lo + self.rng.randrange(0, 2**31) % (hi - lo + 1)

    def _half(self, text: list[str]) -> list[str]:
        start = self._rand(0, max(0, len(text) - RING_CHUNK_SIZE // 2))
        return text[start : min(start + RING_CHUNK_SIZE // 2, len(text)) + 1]

    def pick_chunk(self, text: list[str], evict: bool) -> None:
        """s:pick_chunk: queue a random half-chunk of `text`, unless it (or a chunk like it) is there."""
        if len(text) < 3:
            return
        chunk = text if len(text) + 1 < RING_CHUNK_SIZE else self._half(text)
        if any(c["data"] == chunk for c in self.ring + self.queued):
            return
        for chunks in (self.queued, self.ring):
            for i in range(len(chunks) - 1, -1, -1):
                if chunk_similarity(chunks[i]["data"], chunk) > 0.9:
                    if not evict:
                        return
                    del chunks[i]
        if len(self.queued) == RING_QUEUE:
            del self.queued[0]
        seconds = int(self.clock)
        stamp = [seconds, int((self.clock - seconds) * 1e6)]  # Vim's reltime()
        self.queued.append({"data": chunk, "str": "\n".join(chunk) + "\n", "time": stamp, "filename": self.filename})

    def open(self, lines: tuple[str, ...], y: int) -> None:
        """BufEnter: a chunk around the cursor of the file as saved."""
        half = RING_CHUNK_SIZE // 2
        self.pick_chunk(_getline(lines, y - half, min(y + half, len(lines))), evict=True)

    def extra(self) -> list[dict]:
        return [{"text": c["str"], "time": c["time"], "filename": c["filename"]} for c in self.ring]

    def ring_update(self) -> dict | None:
        """s:ring_update: the next queued chunk joins the ring, and the ring is sent to be read."""
        if not self.queued:
            return None
        if len(self.ring) == RING_N_CHUNKS:
            del self.ring[0]
        self.ring.append(self.queued.pop(0))
        return ring_request(self.extra())

    def fim(self, lines: tuple[str, ...], y: int, x: int, prev: list[str], greedy: bool) -> dict | None:
        """llama#fim at (y, x), `prev` a suggestion taken as accepted: the request, or None where
        llama.vim asks nothing (the context was asked about already)."""
        ctx = local_context(lines, y, x, prev, self.indent_last)
        keys = [ctx.key()]
        trimmed = ctx.prefix
        for _ in range(3):
            trimmed = re.sub(r"^[^\n]*\n", "", trimmed, count=1)
            if not trimmed:
                break
            keys.append(trimmed + ctx.middle + "Î" + ctx.suffix)
        if any(k in self.asked for k in keys):
            return None
        self.asked.update(keys)
        self.indent_last = ctx.indent
        half = RING_CHUNK_SIZE // 2
        near = self._half(_getline(lines, y - half, min(y + half, len(lines))))
        self.ring = [c for c in self.ring if chunk_similarity(c["data"], near) <= 0.5]
        body = fim_request(ctx, self.extra(), T_MAX_PREDICT_MS if prev else QUICK_MS, greedy)
        if abs(y - self.pos_y_pick) > 32:
            end = len(lines)
            self.pick_chunk(_getline(lines, y - RING_SCOPE, max(1, y - N_PREFIX)), evict=False)
            self.pick_chunk(_getline(lines, min(end, y + N_SUFFIX), min(end, y + N_SUFFIX + RING_CHUNK_SIZE)), False)
            self.pos_y_pick = y
        return body


def fim_request(ctx: Context, extra: list[dict], t_max_predict_ms: int, greedy: bool) -> dict:
    """The body llama.vim posts to /infill for a suggestion. With `greedy`, temperature 0 is added
    (llama.vim leaves it to the server's default, which samples)."""
    body = {
        "id_slot": 0,
        "input_prefix": ctx.prefix,
        "input_suffix": ctx.suffix,
        "input_extra": extra,
        "prompt": ctx.middle,
        "n_predict": N_PREDICT,
        "stop": [],
        "n_indent": ctx.indent,
        "top_k": 40,
        "top_p": 0.90,
        "samplers": ["top_k", "top_p", "infill"],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": T_MAX_PROMPT_MS,
        "t_max_predict_ms": t_max_predict_ms,
        "response_fields": RESPONSE_FIELDS,
        "model": "",  # llama.vim sends its model_fim setting, empty by default
    }
    return body | ({"temperature": 0.0} if greedy else {})


def ring_request(extra: list[dict]) -> dict:
    """The body llama.vim posts to /infill to have the ring's chunks read: nothing is predicted."""
    return {
        "id_slot": 0,
        "input_prefix": "",
        "input_suffix": "",
        "input_extra": extra,
        "prompt": "",
        "n_predict": 0,
        "temperature": 0.0,
        "samplers": [],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": 1,
        "t_max_predict_ms": 1,
        "response_fields": [""],
        "model": "",
    }


def shown(content: str, lines: tuple[str, ...], y: int, x: int) -> list[str]:
    """The lines llama.vim shows for a suggestion `content` at (y, x) (s:fim_render, its main rules),
    which its follow-up takes as accepted; [""] where nothing is shown."""
    parts = content.split("\n")
    while parts and parts[-1] == "":
        parts.pop()
    parts = parts or [""]
    line = lines[y - 1]
    if re.match(r"^\s*$", line):
        lead = min(len(parts[0]) - len(parts[0].lstrip()), len(line))
        line, parts[0] = parts[0][:lead], parts[0][lead:]
    cur_prefix, cur_suffix = line[:x], line[x:]
    after = next((n for n in range(y + 1, len(lines) + 1) if lines[n - 1].strip()), len(lines))
    repeats_next = len(parts) == 1 and after <= len(lines) and cur_prefix + parts[0] == lines[after - 1]
    if parts == [""] or (len(parts) == 1 and parts[0] == cur_suffix) or repeats_next:
        parts = [""]
    parts[-1] += cur_suffix
    return parts
