"""The event stream: the one contract between the engine and everything that shows its output.

The decoder yields a `Token` per emitted token and a `Step` per target verification pass, then one
`Summary`. The TUI, the pipe mode and the bench consume the same stream, so what a user sees and what
the bench measures cannot drift apart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum


class Source(str, Enum):
    """Where an emitted token came from."""

    DRAFT = "draft"  # a drafted token the target accepted
    CORRECTION = "correction"  # the target's token at the first rejected draft position
    BONUS = "bonus"  # the target's extra token after every drafted token was accepted
    TARGET = "target"  # plain decoding (K=0)


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
    k: int  # draft length chosen for the round (0 = plain decoding)
    drafter: str | None  # "model", "ngram" or None when k == 0
    acceptance: float  # estimated per-token acceptance of that drafter
    predicted_speedup: float  # cost model's tokens/s for this plan over plain decoding
    measured_speedup: float  # live tokens/s over the measured plain-decoding rate


@dataclass(frozen=True, slots=True)
class Step:
    """One target pass: what was drafted, how much survived, what it cost (seconds)."""

    k: int  # tokens drafted this round (0 = plain decoding)
    accepted: int  # drafted tokens the target accepted (0..k)
    drafted_ids: tuple[int, ...]
    rejected_ids: tuple[int, ...]  # drafted tokens thrown away (drafted_ids[accepted:])
    draft_s: float
    verify_s: float
    drafter: str | None = None
    controller: ControllerState | None = None


@dataclass(slots=True)
class Summary:
    """Totals for one generation. Prefill (both models reading the prompt) produces the first
    token and counts in ttft_s; decode_s runs from the first token to the last."""

    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    target_passes: int = 0
    prompt_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    ttft_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    stop_reason: str = ""  # "eos", "length", "context", "cancelled"
    k_histogram: dict[int, int] = field(default_factory=dict)

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens after the first (which prefill produced) per second of decoding."""
        return (self.tokens - 1) / self.decode_s if self.decode_s > 0 and self.tokens > 1 else 0.0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_pass(self) -> float:
        """Tokens per decoding pass of the target (1.0 for plain decoding)."""
        return (self.tokens - 1) / self.target_passes if self.target_passes else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["k_histogram"] = {str(k): v for k, v in sorted(self.k_histogram.items())}
        d["decode_tokens_per_s"] = self.decode_tokens_per_s
        d["acceptance"] = self.acceptance
        d["tokens_per_pass"] = self.tokens_per_pass
        return d


Event = Token | Step | Summary
