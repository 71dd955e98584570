"""Constraints compiled by llguidance over a backend's own vocabulary.

A `ConstraintSpec` is the plain description a front end builds (`run --json-schema`, a request's
`response_format` or a tool's parameters); `check` compiles it whole before a model is loaded or a
request queued, so what the engine cannot enforce or build is refused in a sentence naming it
(llguidance's own panics and limits included) and a constraint that no text can begin to match is
refused too; `GuidanceMatcher` is the decoding layer's `Constraint` over one backend's tokens.

llguidance (a maintained grammar engine with rollback, also llama.cpp's) does the matching; no
grammar logic lives here. Its masks are cached per matcher state for a few states: the draft model
asks for the mask at each position it drafts, and verification asks again at the same positions.
"""

from __future__ import annotations

import functools
import json
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import llguidance
import numpy as np

from edgespec.constraints.json_schemas import SchemaError, check_depth, finite_problem, parse_schema
from edgespec.decoding.backend import Backend
from edgespec.util.errors import UsageError

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

Tokenizer = llguidance.LLTokenizer
Kind = Literal["json_object", "json_schema", "regex", "lark", "gbnf"]
KINDS: tuple[str, ...] = ("json_object", "json_schema", "regex", "lark", "gbnf")
_WHAT = {
    "json_object": "JSON object",
    "json_schema": "JSON schema",
    "regex": "regular expression",
    "lark": "grammar",
    "gbnf": "grammar",
}


# JSON on one line, spaced as json.dumps spaces it. llguidance's default lets whitespace run between
# any two tokens, where a model may loop on newlines until the reply is cut.
JSON_LAYOUT: JsonCompileOptions = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class ConstraintError(UsageError):
    """A constraint the engine cannot enforce (a feature llguidance does not support, a syntax
    error, a grammar past what it can build, a schema no finite document satisfies): a usage
    error, never a constraint silently dropped."""


@dataclass(frozen=True)
class ConstraintSpec:
    """What the reply must match: `kind` and its `text` (a JSON schema as JSON text, a regular
    expression, a Lark or GBNF grammar; nothing for "json_object", any JSON object).

    Its llguidance grammar (`grammar`) is built once, at the check where the constraint is taken
    (`check`: before a model loads, or a request is queued), and kept: every reply decoded under
    it compiles its matcher from that grammar, never reading the schema again. A schema given
    parsed (a request's) is kept as given (`parsed`), so its text is never parsed back."""

    kind: Kind
    text: str = ""
    parsed: dict | bool | None = field(default=None, compare=False, repr=False)  # `text`, parsed

    @classmethod
    def json_schema(cls, schema: dict | bool | str) -> ConstraintSpec:
        """The spec of a schema given as text or parsed (a request's): ConstraintError when a parsed
        one nests too deep to be written out (`json_schemas.check_depth`)."""
        if isinstance(schema, str):
            return cls("json_schema", schema)
        try:
            check_depth(schema)
        except SchemaError as e:
            raise ConstraintError(f"the JSON schema cannot be read: {e}") from None
        return cls("json_schema", json.dumps(schema), schema)

    @functools.cached_property
    def grammar(self) -> str:
        """The llguidance grammar of this spec (`grammar_of`), built at its first use and kept (a
        ConstraintError is not kept: it is raised again at the next use)."""
        return grammar_of(self)


def grammar_of(spec: ConstraintSpec) -> str:
    """The llguidance grammar of `spec`, before the grammar engine builds it: ConstraintError for a
    schema that is too deep, not JSON, or satisfied by no finite document (`json_schemas`), or
    that llguidance cannot read. `spec.grammar` keeps it."""
    if spec.kind not in KINDS:
        raise ConstraintError(f"unknown constraint kind {spec.kind!r} (one of {', '.join(KINDS)})")
    what = _WHAT[spec.kind]
    try:
        if spec.kind == "json_schema":
            schema = parse_schema(spec.text) if spec.parsed is None else spec.parsed
            problem = finite_problem(schema)
            if problem:
                raise ConstraintError(f"no finite document satisfies the JSON schema: {problem}")
            # llguidance applies its layout options to an object: `true` is the schema `{}`
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                "{}" if schema is True else spec.text, defaults=JSON_LAYOUT
            )
        elif spec.kind == "json_object":
            grammar = llguidance.LLMatcher.grammar_from_json_schema('{"type": "object"}', defaults=JSON_LAYOUT)
        else:
            grammar = llguidance.grammar_from(spec.kind, spec.text)
    except (ValueError, SchemaError) as e:
        raise ConstraintError(f"the {what} cannot be read: {_first_line(str(e))}") from None
    return grammar


def check(spec: ConstraintSpec) -> None:
    """Compile `spec` whole, as the engine will once a model is loaded (the grammar, its lexer and
    matcher: whatever llguidance refuses or cannot build, its limits included), over a vocabulary
    of bytes since the model's is not known yet, and take its first step: ConstraintError naming
    what cannot be enforced, or saying that no text can begin a match. A schema of 12,000
    properties takes seconds here, and is refused here rather than after loading. The text the
    constraint forces at the start (an object's `{"key": `) is followed too, as far as
    `FORCED_STEPS`: a recursion that leads nowhere often shows only after it."""
    matcher = GuidanceMatcher(_byte_tokenizer(), spec.grammar, _WHAT[spec.kind])
    matcher.allowed()
    for _ in range(FORCED_STEPS):
        forced = [] if matcher.done() else matcher.forced()
        if not forced:
            break
        for token_id in forced:
            matcher.advance(token_id)
        matcher.allowed()
    if matcher.done() and not matcher.accepting():
        raise ConstraintError(f"the {_WHAT[spec.kind]} leads nowhere: no text can complete a match")


FORCED_STEPS = 16  # runs of forced text `check` follows (each up to the next choice or token split)


@functools.cache
def _byte_tokenizer() -> Tokenizer:
    """A vocabulary of the 256 bytes and an end token: what `check` compiles over. The grammar, its
    lexer and their limits do not depend on the vocabulary; the masks' cost over 150k tokens does,
    and is met while decoding (a matcher failing there ends the reply as a dead end)."""

    class Bytes:  # what llguidance.TokenizerWrapper reads
        eos_token_id = 256
        bos_token_id = None
        special_token_ids: list[int] = []
        tokens = [bytes([b]) for b in range(256)] + [b"\xff<end>"]

        def __call__(self, text: bytes | str) -> list[int]:
            return list(text.encode() if isinstance(text, str) else text)

    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(Bytes()), n_vocab=257, eos_token=256)


def _first_line(message: str) -> str:
    """llguidance's messages span lines (a regex error quotes the pattern and draws carets under it,
    a panic prints its backtrace): its first line, and the line saying what is wrong where there is
    one. A panic is llguidance failing to build what it was given (an assertion on a grammar's size)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    said = [line for line in lines[1:] if line.startswith("error:")]
    first = " ".join(lines[:1] + said[:1])
    if first.startswith("panic: "):
        return f"it is beyond what the grammar engine can build ({first.removeprefix('panic: ')})"
    return first


def guidance_tokenizer(backend: Backend) -> Tokenizer:
    """llguidance's view of `backend`'s vocabulary: each id's bytes, with the special tokens (empty
    as text, or an end-of-generation id) marked as llguidance expects (0xff before their name), so
    a grammar never spells one as text. Building it reads every token (about a second for 150k
    tokens): the engine keeps it."""
    vocab = backend.vocabulary()
    tokens = []
    for token_id in range(backend.n_vocab):
        piece = backend.token_bytes(token_id)
        name = vocab.tokens[token_id] if token_id < len(vocab.tokens) else b""
        if (not piece or token_id in vocab.eos_ids) and name:
            piece = b"\xff" + name
        tokens.append(piece)

    class Tokens:  # what llguidance.TokenizerWrapper reads
        eos_token_id = min(vocab.eos_ids)
        bos_token_id = vocab.bos_id
        special_token_ids: list[int] = []

        def __init__(self) -> None:
            self.tokens = tokens

        def __call__(self, text: bytes | str) -> list[int]:
            return backend.tokenize(text.decode("utf-8", "replace") if isinstance(text, bytes) else text, special=False)

    return llguidance.LLTokenizer(
        llguidance.TokenizerWrapper(Tokens()), n_vocab=backend.n_vocab, eos_token=sorted(vocab.eos_ids)
    )


class GuidanceMatcher:
    """The decoding layer's `Constraint`, matched by llguidance over one tokenizer."""

    MASKS_KEPT = 32  # masks of recent states; each is one bool per token (150 kB for 150k tokens)

    def __init__(self, tokenizer: Tokenizer, grammar: str, what: str = "constraint"):
        """ConstraintError when llguidance cannot build `grammar` (`what` names it in the message)."""
        self._matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        self._tokenizer = tokenizer
        if self._matcher.is_error():
            raise ConstraintError(f"the {what} cannot be enforced: {_first_line(self._matcher.get_error())}")
        self._n = tokenizer.vocab_size
        self._eos = np.array(sorted(tokenizer.eos_tokens), dtype=np.int64)
        self._eos_ids = frozenset(tokenizer.eos_tokens)
        self._ends = 0  # ends consumed after llguidance stopped (`advance`)
        # matcher states as nodes of a trie of consumed tokens: the same state reached again along
        # the same tokens (a draft, then its verification) finds its mask cached
        self._states = [0]
        self._children: dict[tuple[int, int], int] = {}
        self._masks: OrderedDict[int, np.ndarray] = OrderedDict()
        self.busy_s = 0.0

    def allowed(self) -> np.ndarray:
        state = self._states[-1]
        mask = self._masks.get(state)
        if mask is not None:
            self._masks.move_to_end(state)
            return mask
        start = time.perf_counter()
        bits = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
        mask = np.unpackbits(bits, bitorder="little")[: self._n].astype(bool)
        if not mask.any():  # a matcher in an error state allows nothing: end the reply there
            mask[self._eos] = True
        self._masks[state] = mask
        if len(self._masks) > self.MASKS_KEPT:
            self._masks.popitem(last=False)
        self.busy_s += time.perf_counter() - start
        return mask

    def advance(self, token_id: int) -> bool:
        """Once llguidance has stopped (the match is complete and nothing may follow), it consumes
        nothing, not even the end it allows there: that end is counted here as consumed, so that
        `rollback` of a chain holding it (a draft after forced text that ends the match) rolls
        back exactly the tokens llguidance took."""
        start = time.perf_counter()
        if self._matcher.is_stopped():
            consumed = token_id in self._eos_ids and self._matcher.is_accepting()
            self._ends += consumed
        else:
            consumed = self._matcher.try_consume_tokens([token_id]) == 1
        if consumed:
            key = (self._states[-1], token_id)
            self._states.append(self._children.setdefault(key, len(self._children) + 1))
        self.busy_s += time.perf_counter() - start
        return consumed

    def rollback(self, n: int) -> None:
        if n > 0:
            ends = min(n, self._ends)  # the ends counted after llguidance stopped come last
            self._ends -= ends
            if n > ends:
                self._matcher.rollback(n - ends)
            del self._states[-n:]

    def allowed_prefix(self, tokens: Sequence[int]) -> int:
        start = time.perf_counter()
        n = self._matcher.validate_tokens(list(tokens)) if tokens else 0
        self.busy_s += time.perf_counter() - start
        return n

    def forced(self) -> list[int]:
        """The forced text spelled whole. llguidance's own forced tokens stop short of the last token
        the text's end could still merge into (`": "` stops at `":`, the ` "` may become ` "$`):
        certain tokens, where a draft needs likely ones. Spelled whole, the text's last token is a
        guess the target checks, and a value's first token comes out of the same pass."""
        start = time.perf_counter()
        certain = self._matcher.compute_ff_tokens()
        text = self._matcher.compute_ff_bytes()
        spelled = self._tokenizer.tokenize_bytes(text) if text else []
        tokens = spelled if spelled[: len(certain)] == certain else certain
        tokens = tokens[: self._matcher.validate_tokens(tokens)] if tokens else []
        self.busy_s += time.perf_counter() - start
        return tokens

    def done(self) -> bool:
        return self._matcher.is_stopped()

    def accepting(self) -> bool:
        """The reply so far is a complete match (an end-of-generation token may follow)."""
        return self._matcher.is_accepting()
