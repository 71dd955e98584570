"""A greedy request asked again gets the same reply: the earlier one, served from the history.

Greedy decoding repeats itself only for the same passes: llama.cpp's CPU kernels give a token's
logits up to ~1 apart between a pass alone and a row of a longer pass, and the passes follow the
drafts, so a near-tie can part two calls of one request whose drafts differ (a retry drafts from
the earlier reply) or, with `live_timings`, whose timings do (docs/run.md). What makes "temperature 0" mean "the same
answer" is to answer a request asked before with the reply it got: when the history holds a whole
reply to exactly these prompt ids under the same request, its tokens are emitted again
(`Source.REPEATED`) and the Summary says `served_again`; no pass runs and nothing is recorded again.

A request is named by a digest (`request_digest`) of what decides a greedy reply besides the prompt:
the target (`model_identity`: the file's content where the store verified it, the runtime's build,
the context's settings), the context length, max_tokens and the constraint (a response format, a
tool call's schema). Stop strings and line rules are not in it: the server applies them to the
tokens after the engine, and a reply they ended was cancelled. Never served again (its record
holds NO_REQUEST): a sampled reply, one cut short (cancelled, a full context, an error), a
regenerate (the user asks for another reply). With `decode_again` a greedy request decodes again
(drafting from the earlier reply) and its whole reply is then the one served after.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from edgespec.constraints.guidance import ConstraintSpec
from edgespec.decoding.backend import Backend, Placement
from edgespec.decoding.decoder import IncrementalText
from edgespec.decoding.events import Event, Source, Summary, Token
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.history_log import NO_REQUEST, REQUEST
from edgespec.engine.kept_measurements import runtime_key
from edgespec.models.registry import PairConfig

DIGEST_VERSION = 1  # a change of what the digest covers changes the number: older digests then never match
SERVED_STOPS = frozenset({"eos", "length"})  # the whole replies: each stop is the same for the same request


class Asked(Protocol):
    """What a request's digest reads of its settings (`engine.GenerateSettings`)."""

    @property
    def max_tokens(self) -> int: ...
    @property
    def sampling(self) -> SamplingParams: ...
    @property
    def constraint(self) -> ConstraintSpec | None: ...
    @property
    def earlier_reply(self) -> str | None: ...
    @property
    def decode_again(self) -> bool: ...


def model_identity(pair: PairConfig, placements: Mapping[str, Placement], target: Backend) -> str:
    """What names the target in a request's digest: the identity its prompt-cache states are kept
    under, where it has one (llama.cpp: the verified sha256, the build, the context's settings),
    else what its calibration is kept under (the runtime, where it runs, the file's path and size)."""
    identity = getattr(target, "cache_identity", None)
    if identity is not None:
        return identity()
    return "|".join(runtime_key(pair, {"target": placements["target"]}, (target,)))


def request_digest(model: str, n_ctx: int, settings: Asked) -> bytes | None:
    """The digest of a request whose whole reply may be served again, None for one never served:
    sampled, asked with `decode_again`, or a regenerate."""
    if not settings.sampling.greedy or settings.decode_again or settings.earlier_reply is not None:
        return None
    c = settings.constraint
    named = [DIGEST_VERSION, model, n_ctx, settings.max_tokens, None if c is None else [c.kind, c.text]]
    return hashlib.blake2b(json.dumps(named).encode(), digest_size=REQUEST).digest()


def kept_request(request: bytes | None, summary: Summary) -> bytes:
    """What a reply's record says of its request: its digest if the reply is whole, else NO_REQUEST."""
    return request if request is not None and summary.stop_reason in SERVED_STOPS else NO_REQUEST


def served_again(
    target: Backend,
    prompt: Sequence[int],
    reply: Sequence[int],
    max_tokens: int,
    cancel: threading.Event | None,
    since: float,
) -> Iterator[Event]:
    """The earlier `reply` as a call's events: its tokens (REPEATED), then a Summary saying so, with
    no pass and no prompt read; timed from `since` (the call). `cancel` ends it between tokens."""
    text = IncrementalText(target)
    summary = Summary(prompt_tokens=len(prompt), prompt_cached=len(prompt), served_again=True)
    first_at = None
    for token_id in reply:
        if cancel is not None and cancel.is_set():
            summary.stop_reason = "cancelled"
            break
        token = Token(token_id, text.feed(token_id), Source.REPEATED)
        summary.add(token)
        if first_at is None:
            first_at = time.perf_counter()
            summary.ttft_s = first_at - since
        yield token
    else:
        summary.stop_reason = "length" if len(reply) >= max_tokens else "eos"
    if first_at is not None:
        summary.decode_s = time.perf_counter() - first_at
    yield summary
