"""The event stream: the one contract between the engine and everything that shows its output.

The decoder yields a `Token` per emitted token and a `Step` per target verification pass, then one
`Summary`. The TUI, the pipe mode and the bench consume the same stream, so what a user sees and what
the bench measures cannot drift apart.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from enum import Enum
from typing import ClassVar

from edgespec.decoding.tree import ROOT, chain, leaves, path_to


class Source(str, Enum):
    """Where an emitted token came from."""

    DRAFT = "draft"  # a drafted token the target accepted
    CORRECTION = "correction"  # the target's token at the first rejected draft position
    BONUS = "bonus"  # the target's extra token after every drafted token was accepted
    TARGET = "target"  # plain decoding (K=0)
    REPEATED = "repeated"  # the same request's earlier reply, served again from the history: no pass ran


@dataclass(frozen=True, slots=True)
class Token:
    """One emitted token. `text` is the newly decodable text (may be "" mid UTF-8 character)."""

    id: int
    text: str
    source: Source


@dataclass(frozen=True, slots=True)
class ControllerState:
    """What the K controller believed when it chose this round's plan (for the UI and the bench)."""

    policy: str  # "fixed", "heuristic", "auto"
    draft_len: int  # the plan's draft length (`Plan.draft_len`; 0 = plain decoding)
    drafter: str | None  # "model", "ngram" or None when draft_len == 0
    acceptance: float  # estimated per-token acceptance of that drafter
    predicted_speedup: float  # cost model's tokens/s for this plan over plain decoding
    measured_speedup: float  # live tokens/s over the measured plain-decoding rate

    # Fields saved under another name than the code's: files written before the rename say "k".
    SAVED_NAMES: ClassVar[dict[str, str]] = {"draft_len": "k"}


@dataclass(frozen=True, slots=True)
class Step:
    """One target pass: what was drafted, how much survived, what it cost (seconds). `read_s` is
    the part of `draft_s` the draft model spent reading committed text it had not seen (after plain
    or n-gram rounds, or the prompt itself when it reads it at its first use): reading, not drafting.

    The draft is a tree (`decoding/tree.py`): `drafted_ids[i]` hangs under `parents[i]`, and `path`
    lists the accepted nodes from the root down. A chain (parents None) accepted its first
    `accepted` tokens."""

    drafted: int  # tokens drafted this round, forced ones included: the tree's nodes (0 = plain decoding)
    accepted: int  # drafted tokens the target accepted: the path's length (0..drafted)
    drafted_ids: tuple[int, ...]
    rejected_ids: tuple[int, ...]  # drafted tokens thrown away (every node off the path, in order)
    draft_s: float
    verify_s: float
    drafter: str | None = None
    controller: ControllerState | None = None
    parents: tuple[int, ...] | None = None  # None: a chain
    path: tuple[int, ...] | None = None  # None: the chain's first `accepted` nodes
    read_s: float = 0.0
    forced: int = 0  # leading drafted tokens a constraint forced: no drafter proposed them
    threads: int = 0  # CPU threads the pass ran on, when the engine chooses them (0: it does not)

    def drafted_part(self) -> Step:
        """The round as its drafter (or plain decoding) did it: without the forced tokens before its
        draft, all of them accepted (a chain: drafts under a constraint are), for a policy to learn
        from. The timings stay the whole pass's."""
        if not self.forced:
            return self
        drafted, accepted = self.drafted - self.forced, self.accepted - self.forced
        return replace(
            self,
            drafted=drafted,
            accepted=accepted,
            drafted_ids=self.drafted_ids[self.forced :],
            parents=tuple(chain(drafted)),
            path=tuple(range(accepted)),
            forced=0,
        )

    def tree(self) -> tuple[list[int], list[int]]:
        """(parents, path), a chain's spelled out."""
        parents = chain(self.drafted) if self.parents is None else list(self.parents)
        return parents, list(range(self.accepted)) if self.path is None else list(self.path)

    def rejected_branches(self) -> list[tuple[int, ...]]:
        """The drafted tokens thrown away, one tuple per branch the target left (from where it
        leaves the accepted path down to its leaf, in node order); a chain's is its rejected tail."""
        parents, path = self.tree()
        accepted = set(path)
        out = []
        for leaf in leaves(parents):
            branch = [n for n in path_to(parents, leaf) if n not in accepted]
            if branch:
                out.append(tuple(self.drafted_ids[n] for n in branch))
        return out

    def sources(self) -> list[Source]:
        """The source of each token this pass emitted: the accepted drafts, then the target's token,
        a bonus after a leaf (nothing was left to try), else a correction."""
        parents, path = self.tree()
        last = path[-1] if path else ROOT
        if self.drafted == 0:
            end = Source.TARGET
        else:
            end = Source.CORRECTION if last in parents else Source.BONUS
        return [Source.DRAFT] * self.accepted + [end]


@dataclass(slots=True)
class Tally:
    """The event stream folded into the figures every front end shows: the one place where Token
    and Step events are counted (the decoder's Summary, the chat app's live stats bar, `run`'s
    stats line and the bench all read a Tally). Times are seconds."""

    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    target_passes: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    draft_read_s: float = 0.0  # the draft model reading text it had not seen (part of draft_s)
    plain_passes: int = 0  # passes with K = 0: the reference cost of one plain token
    plain_s: float = 0.0
    k_histogram: dict[int, int] = field(default_factory=dict)  # target passes per draft length
    sources: dict[str, int] = field(default_factory=dict)  # emitted tokens per Source value
    k_series: list[int] = field(default_factory=list)  # K of each pass, in order
    acceptance_series: list[float] = field(default_factory=list)  # accepted / K of each pass with K > 0
    threads: dict[int, int] = field(default_factory=dict)  # target passes per CPU thread count, where chosen
    accepted_by: dict[str, int] = field(default_factory=dict)  # accepted drafted tokens per drafter kind
    controller: ControllerState | None = None  # the controller's state at the latest pass

    def add(self, event: Token | Step) -> None:
        if isinstance(event, Token):
            self.tokens += 1
            self.sources[event.source.value] = self.sources.get(event.source.value, 0) + 1
            return
        self.target_passes += 1
        self.drafted += event.drafted
        self.accepted += event.accepted
        self.draft_s += event.draft_s
        self.verify_s += event.verify_s
        self.draft_read_s += event.read_s
        self.k_histogram[event.drafted] = self.k_histogram.get(event.drafted, 0) + 1
        self.k_series.append(event.drafted)
        if event.threads:
            self.threads[event.threads] = self.threads.get(event.threads, 0) + 1
        if event.drafter:
            taken = event.drafted_part().accepted
            self.accepted_by[event.drafter] = self.accepted_by.get(event.drafter, 0) + taken
        if event.drafted:
            self.acceptance_series.append(event.accepted / event.drafted)
        else:
            self.plain_passes += 1
            self.plain_s += event.draft_s + event.verify_s
        if event.controller is not None:
            self.controller = event.controller

    @property
    def acceptance(self) -> float:
        """Accepted / drafted (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_pass(self) -> float:
        """Tokens per decoding pass of the target (1.0 for plain decoding); the first token comes
        from prefill, not from a decoding pass."""
        return (self.tokens - 1) / self.target_passes if self.target_passes else 0.0


class WholeReply:
    """The whole reply, what the user waits for, from its parts: `ttft_s` (the first token) and
    `decode_s` (the rest) of `tokens`. Shared by the decoder's Summary and the bench's rows, which
    also carry figures of peers that have no Summary."""

    __slots__ = ()
    # the parts, held by the subclass (declared here for the type checker only: no class attributes)
    ttft_s: float
    decode_s: float
    tokens: int

    @property
    def total_s(self) -> float:
        """The whole reply: the first token, then decoding."""
        return self.ttft_s + self.decode_s

    @property
    def total_tokens_per_s(self) -> float:
        """Tokens per second of the whole reply, the prompt's reading included (0: nothing timed)."""
        return self.tokens / self.total_s if self.total_s > 0 else 0.0


@dataclass(slots=True)
class Summary(Tally, WholeReply):
    """Totals for one generation: its Tally plus the timings only the decoder knows (seconds).

    The whole reply, what the user waits for, is `total_s` = `ttft_s` + `decode_s`:
    - `ttft_s`, from the call to the first token: the target reading the prompt (`target_read_s`,
      which yields the first token; `target_read_tokens` of the prompt were evaluated, the rest
      was already in its cache); no drafter reads before the first token;
    - `decode_s`, from the first token to the last; the draft model's reading of the prompt and
      of text it had not seen is `draft_read_s` (inside `draft_s`)."""

    prompt_tokens: int = 0
    # prompt tokens the target did not read: already in its cache (an earlier reply in this
    # process, or a state loaded from the prompt cache); it read the rest (`target_read_tokens`)
    prompt_cached: int = 0
    # of those, tokens a read ahead (`Engine.read_ahead`) read before the prompt was asked: the chat
    # app reads while the message is written, so they cost the user no wait after enter
    prompt_read_ahead: int = 0
    ttft_s: float = 0.0
    target_read_s: float = 0.0
    decode_s: float = 0.0
    constraint_s: float = 0.0  # spent in a constraint's matcher (masks, following drafts), all of it in the reply
    # copying from other text than the call's own (`copying/corpus.py`), per source: lookups made and
    # their seconds (part of draft_s), and the reply's append to the history after it
    lookups: dict[str, int] = field(default_factory=dict)
    lookup_s: dict[str, float] = field(default_factory=dict)
    history_append_s: float = 0.0
    # sampled (temperature > 0) rather than greedy: every draft, whatever its source, was verified by
    # speculative sampling, so the reply follows the target's distribution exactly
    sampled: bool = False
    # the earlier reply to the same greedy request, served again from the history (`engine/same_reply.py`):
    # no target pass ran, so there are no decode figures; its tokens count
    served_again: bool = False
    stop_reason: str = ""  # "eos", "length", "context", "cancelled" ("error" for a failed reply)

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens after the first (which the prompt's reading produced) per second of decoding; 0 for
        a reply served again (`served_again`): nothing was decoded."""
        if self.served_again:
            return 0.0
        return (self.tokens - 1) / self.decode_s if self.decode_s > 0 and self.tokens > 1 else 0.0

    @property
    def target_read_tokens(self) -> int:
        """Prompt tokens the target read: those not already in its cache."""
        return self.prompt_tokens - self.prompt_cached

    def to_dict(self) -> dict:
        """JSON-ready: the fields, plus the derived rates for readers of the file."""
        d = asdict(self)
        if self.controller is not None:
            d["controller"] = {ControllerState.SAVED_NAMES.get(k, k): v for k, v in d["controller"].items()}
        d["k_histogram"] = {str(k): v for k, v in sorted(self.k_histogram.items())}
        d["threads"] = {str(n): v for n, v in sorted(self.threads.items())}
        d["decode_tokens_per_s"] = self.decode_tokens_per_s
        d["target_read_tokens"] = self.target_read_tokens
        d["total_s"] = self.total_s
        d["total_tokens_per_s"] = self.total_tokens_per_s
        d["acceptance"] = self.acceptance
        d["tokens_per_pass"] = self.tokens_per_pass
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Summary:
        """The inverse of `to_dict` (derived rates are recomputed, unknown keys ignored, missing ones
        take their defaults). Raises TypeError naming the first field that does not fit its type:
        counts, times and rates must be finite and not negative, whatever wrote the file."""
        values = _typed_fields(cls, d)
        if isinstance(values.get("controller"), dict):
            state = _typed_fields(ControllerState, values["controller"], ControllerState.SAVED_NAMES)
            missing = [f.name for f in fields(ControllerState) if f.name not in state]
            if missing:
                raise TypeError(
                    f"controller has no {', '.join(ControllerState.SAVED_NAMES.get(n, n) for n in missing)}"
                )
            values["controller"] = ControllerState(**state)
        for histogram in ("k_histogram", "threads"):
            if histogram in values:
                values[histogram] = {int(k): v for k, v in values[histogram].items()}
        return cls(**values)


def _typed_fields(cls, d: dict, saved_names: dict[str, str] | None = None) -> dict:
    """The entries of `d` that name fields of the dataclass `cls` (by their `saved_names`, where a
    field is saved under another name), each checked against the field's annotation (a string, as
    annotations are postponed here), keyed by the field's name."""
    if not isinstance(d, dict):
        raise TypeError(f"{cls.__name__} is not an object")
    saved = saved_names or {}
    kinds = {saved.get(f.name, f.name): (f.name, f.type) for f in fields(cls)}
    out = {}
    for name, value in d.items():
        if name not in kinds:
            continue
        field_name, kind = kinds[name]
        if not (value is None and kind.endswith("| None")) and not _fits(value, kind.removesuffix(" | None"), name):
            raise TypeError(f"{name} is not {_KIND_NAMES.get(kind.removesuffix(' | None'), kind)}")
        out[field_name] = value
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _count(v) -> bool:
    return _number(v) and isinstance(v, int)


def _fits(value, kind: str, name: str) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return _count(value)
    if kind == "float":
        return _number(value)
    if kind == "dict[int, int]":  # JSON keys are strings: "4" for K = 4
        return isinstance(value, dict) and all(k.isascii() and k.isdigit() and _count(v) for k, v in value.items())
    if kind == "dict[str, int]":
        return isinstance(value, dict) and all(_count(v) for v in value.values())
    if kind == "dict[str, float]":
        return isinstance(value, dict) and all(_number(v) for v in value.values())
    if kind in ("list[int]", "list[float]"):
        return isinstance(value, list) and all((_count if kind == "list[int]" else _number)(v) for v in value)
    return kind == "ControllerState" and isinstance(value, dict)


_KIND_NAMES = {
    "str": "a string",
    "bool": "true or false",
    "int": "a whole number >= 0",
    "float": "a finite number >= 0",
    "dict[int, int]": 'a map of "K": passes',
    "dict[str, int]": "a map of counts",
    "dict[str, float]": "a map of seconds",
    "list[int]": "a list of whole numbers >= 0",
    "list[float]": "a list of finite numbers >= 0",
    "ControllerState": "an object",
}


Event = Token | Step | Summary
