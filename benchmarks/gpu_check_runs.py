"""The GPU check's measurements of one backend (benchmarks/gpu_check.py): milliseconds per target
pass of n tokens, and one greedy generation through edgespec's decoder with the time spent outside
model passes, the K histogram and whether the output follows the target's rule."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise

from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.decoder import SpeculativeDecoder
from edgespec.decoding.events import Summary, Token
from edgespec.decoding.model_drafter import ModelDrafter
from edgespec.decoding.policy.controller import AutoK
from edgespec.decoding.policy.simple_policies import FixedK
from edgespec.decoding.sampling import SamplingParams


def median_ms(fn: Callable[[], None], reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def measure_verify(backend, prompt: list[int], ns, reps: int) -> dict[int, float]:
    """Milliseconds per target pass evaluating n tokens with logits at all n, after `prompt`."""
    backend.truncate(0)
    backend.eval(prompt, 1)
    base = len(prompt)
    out = {}
    for n in ns:
        tokens = [(7 * i + 3) % backend.n_vocab for i in range(n)]

        def one(tokens=tokens, n=n):
            backend.eval(tokens, n)
            backend.truncate(base)

        out[n] = median_ms(one, reps)
    return out


class TimedEval:
    """Wraps a backend's passes (eval, and eval_tree for verification) to add up their seconds."""

    PASSES = ("eval", "eval_tree")

    def __init__(self, backend):
        self.backend, self.seconds = backend, 0.0
        for name in self.PASSES:
            setattr(backend, name, self._timed(getattr(backend, name)))

    def _timed(self, call):
        def timed(*args):
            t0 = time.perf_counter()
            try:
                return call(*args)
            finally:
                self.seconds += time.perf_counter() - t0

        return timed

    def detach(self):
        for name in self.PASSES:
            delattr(self.backend, name)


@dataclass
class DecodeResult:
    mode: str
    tokens: int
    seconds: float
    passes: int
    drafted: int
    accepted: int
    rejecting_passes: int  # passes that ended at a rejected draft token
    host_ms: float  # wall time per target pass outside model passes
    k_hist: dict = field(default_factory=dict)
    follows_rule: float = 1.0  # fraction of emitted tokens equal to the target's rule

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def acceptance(self) -> float:
        """Per-token acceptance: accepted / (accepted + passes that ended in a rejection)."""
        tried = self.accepted + self.rejecting_passes
        return self.accepted / tried if tried else float("nan")

    @property
    def k_used(self) -> int:
        """The K the policy chose most often."""
        return max(self.k_hist, key=self.k_hist.get) if self.k_hist else 0


def run_decode(target, draft, prompt, n_tokens, mode: str, oracle, costs) -> DecodeResult:
    """One greedy generation through edgespec's decoder. mode: "ar", "k=<K>" or "auto"."""
    if mode == "ar":
        policy, drafters = FixedK(0, "model"), []
    else:
        policy = AutoK("model", costs) if mode == "auto" else FixedK(int(mode.split("=")[1]), "model")
        drafters = [ModelDrafter(draft)]
        draft.truncate(0)
    target.truncate(0)
    timed = [TimedEval(b) for b in (target, draft) if b is not None]
    try:
        ids, summary = [], None
        for event in SpeculativeDecoder(target, policy, drafters).generate(prompt, n_tokens, SamplingParams()):
            if isinstance(event, Token):
                ids.append(event.id)
            elif isinstance(event, Summary):
                summary = event
        model_s = sum(t.seconds for t in timed)
    finally:
        for t in timed:
            t.detach()
    # host time: decode wall time outside model passes. The target's prompt pass is not decode time
    # (summary.target_read_s); the draft model's reading during decoding is, as in the user's loop.
    host_s = max(summary.decode_s - (model_s - summary.target_read_s), 0.0)
    seq = list(prompt[-1:]) + ids
    follows = sum(oracle(p) == n for p, n in pairwise(seq)) / max(len(ids), 1)
    return DecodeResult(
        mode=mode,
        tokens=summary.tokens,
        seconds=summary.decode_s,
        passes=summary.target_passes,
        drafted=summary.drafted,
        accepted=summary.accepted,
        rejecting_passes=sum(1 for a in summary.acceptance_series if a < 1),
        host_ms=1000 * host_s / max(summary.target_passes, 1),
        k_hist=dict(summary.k_histogram),
        follows_rule=follows,
    )


def measured_costs(verify_ms: dict[int, float], draft_ms: float) -> CostModel:
    """The controller's cost model holding this check's medians, so that a prediction interpolates
    t_verify(n) the way the controller does when it plans."""
    costs = CostModel()
    for n, ms in verify_ms.items():
        costs.observe_verify(n, ms / 1000)
    costs.observe_draft(1, draft_ms / 1000)
    return costs


def round_seconds(costs: CostModel, host_ms: float) -> Callable[[int], float]:
    """Seconds for a round drafting k tokens: k t_draft + t_verify(k+1) + host."""
    return lambda k: k * costs.draft_step + costs.verify(k + 1) + host_ms / 1000
