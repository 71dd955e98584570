"""The auto policy's choices on fixed runs, written as text, so a refactor can show it changed none.

Two kinds of run, each deterministic to the bit: the simulated rounds of `policy_simulation.Sim`
(hardware curves, drafted tokens' fates drawn from a seeded generator), and the real decode loop
(`SpeculativeDecoder.generate`) on the fake models of `fakes.py` with time simulated, greedy and
sampled, with and without a constraint that forces text. Each round's plan (drafter, K, the nodes
of a copy, whether the draft model may stop early or branch, the `ControllerState`) and, in the
decode loop, what the pass verified (drafted ids, tree, path, forced tokens) and the tokens emitted
are one line of text each.

`tests/data/auto_policy_choices.json` holds the recording made before the decoding package was
rearranged (issue 39); `python -m tests.policy_recording` writes it anew, for a change that means
to change the policy's choices.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from edgespec.decoding.copying.ngram import NgramDrafter
from edgespec.decoding.decoder import SpeculativeDecoder
from edgespec.decoding.events import Step, Token
from edgespec.decoding.model_drafter import ModelDrafter
from edgespec.decoding.policy.controller import AutoK
from edgespec.decoding.policy.plan import Plan, RoundContext
from edgespec.decoding.sampling import SamplingParams
from tests.fakes import MarkovBackend, VirtualClock, simulated_time
from tests.policy_simulation import BF16, CPU, GPU, REPACKED, Hardware, Proposal, Sim, calibrated, constant, switch

RECORDING = Path(__file__).parent / "data" / "auto_policy_choices.json"


def describe(plan: Plan) -> str:
    """The plan on one line: drafter, K, the nodes of a copy, whether a stop and a branch rule come
    with it, and what the policy believed (`ControllerState`: its K and drafter, acceptance,
    predicted and measured speedup, floats exact)."""
    s = plan.state
    assert s is not None, "the auto policy explains every plan"
    rules = f"stop={int(plan.stop is not None)} branch={int(plan.branch is not None)}"
    state = f"{s.policy} {s.draft_len} {s.drafter} {s.acceptance!r} {s.predicted_speedup!r} {s.measured_speedup!r}"
    return f"{plan.drafter} k={plan.draft_len} nodes={plan.nodes} {rules} [{state}]"


class Recorded:
    """A policy that writes down every plan it makes and is otherwise the policy it wraps."""

    def __init__(self, policy: AutoK):
        self.policy = policy
        self.lines: list[str] = []

    def plan(self, ctx: RoundContext) -> Plan:
        plan = self.policy.plan(ctx)
        self.lines.append(describe(plan))
        return plan

    def __getattr__(self, name: str):
        return getattr(self.policy, name)


def simulated(hw: Hardware, policy: AutoK, rounds: int, **sim) -> list[str]:
    """Each round's plan and its outcome in `Sim`."""
    recorded = Recorded(policy)
    records = Sim(hw, **sim).run(recorded, rounds).records
    return [f"{line} -> k={r.drafted} accepted={r.accepted}" for line, r in zip(recorded.lines, records, strict=True)]


def simulated_runs() -> dict[str, list[str]]:
    mixed: Callable[[int], Proposal] = lambda r: Proposal(16, 12, 0.95) if r // 5 % 2 == 0 else Proposal(6, 1, 0.1)  # noqa: E731
    rising: Callable[[int], Proposal] = lambda r: Proposal(16, 12, 0.1 if r < 100 else 0.95)  # noqa: E731
    return {
        "sim cpu model 0.7": simulated(CPU, AutoK("model", calibrated(CPU)), 200, model=constant(0.7)),
        "sim gpu model 0.8": simulated(GPU, AutoK("model", calibrated(GPU)), 200, model=constant(0.8), seed=1),
        "sim gpu model 0.8 chains": simulated(
            GPU, AutoK("model", calibrated(GPU), trees=False), 200, model=constant(0.8), seed=1
        ),
        "sim bf16 model 0.7": simulated(BF16, AutoK("model", calibrated(BF16)), 200, model=constant(0.7), seed=2),
        "sim gpu model drop": simulated(GPU, AutoK("model", calibrated(GPU)), 200, model=switch(0.9, 0.1, 100), seed=3),
        "sim cpu auto mixed": simulated(
            CPU, AutoK("auto", calibrated(CPU)), 200, model=constant(0.7), ngram=mixed, seed=4
        ),
        "sim cpu ngram rise": simulated(CPU, AutoK("ngram", calibrated(CPU, with_draft=False)), 200, ngram=rising),
        "sim repacked ngram": simulated(
            REPACKED,
            AutoK("ngram", calibrated(REPACKED, with_draft=False)),
            200,
            ngram=constant(Proposal(4, 32, 0.95)),
        ),
    }


class ForcesText:
    """A constraint over the fake models' vocabulary: tokens that are 1 mod 3 are forbidden, and
    after a multiple of 5 the text FORCED must follow, whose last token the target may also spell
    as ALSO (as a real matcher's forced text may end otherwise)."""

    FORCED = (6, 9)
    ALSO = 12
    busy_s = 0.0

    def __init__(self, n_vocab: int):
        self.n_vocab = n_vocab
        self.consumed: list[int] = []

    def _phase(self) -> int:
        """0: free; 1, 2: at the forced text's first or second token."""
        phase = 0
        for token in self.consumed:
            phase = (1 if token % 5 == 0 else 0) if phase == 0 else (phase + 1) % 3
        return phase

    def _mask(self, phase: int) -> np.ndarray:
        mask = np.zeros(self.n_vocab, dtype=bool)
        if phase == 0:
            mask[[t for t in range(self.n_vocab) if t % 3 != 1]] = True
        else:
            mask[[self.FORCED[phase - 1], *([self.ALSO] if phase == 2 else [])]] = True
        return mask

    def allowed(self) -> np.ndarray:
        return self._mask(self._phase())

    def advance(self, token_id: int) -> bool:
        if not self.allowed()[token_id]:
            return False
        self.consumed.append(token_id)
        return True

    def rollback(self, n: int) -> None:
        del self.consumed[len(self.consumed) - n :]

    def allowed_prefix(self, tokens: Sequence[int]) -> int:
        n = 0
        for token in tokens:
            if not self.advance(token):
                break
            n += 1
        self.rollback(n)
        return n

    def forced(self) -> list[int]:
        return list(self.FORCED[self._phase() - 1 :]) if self._phase() else []

    def done(self) -> bool:
        return False

    def accepting(self) -> bool:
        return True


def decoded(
    hw: Hardware,
    drafter: str,
    prompt: Sequence[int],
    params: SamplingParams,
    trees: bool = True,
    constrained: bool = False,
    seed: int = 11,
    n: int = 120,
) -> list[str]:
    """Each pass of a reply of `n` tokens through the decode loop, fake models costing what `hw`
    says on a virtual clock, the costs calibrated as the engine does it; then the tokens."""
    clock = VirtualClock()
    target = MarkovBackend(seed=seed, cost=hw.verify, clock=clock)
    draft = MarkovBackend(seed=seed, noise=0.5, cost=lambda m: m * hw.draft, clock=clock)
    policy = Recorded(AutoK(drafter, calibrated(hw), trees=trees))
    decoder = SpeculativeDecoder(target, policy, [ModelDrafter(draft), NgramDrafter()])
    constraint = ForcesText(target.n_vocab) if constrained else None
    with simulated_time(clock):
        events = list(decoder.generate(prompt, n, params, constraint=constraint))
    steps = [e for e in events if isinstance(e, Step)]
    lines = [
        f"{line} -> {s.drafter} ids={list(s.drafted_ids)} parents={list(s.parents)} path={list(s.path)} "
        f"forced={s.forced}"
        for line, s in zip(policy.lines, steps, strict=True)
    ]
    return [*lines, f"tokens {[e.id for e in events if isinstance(e, Token)]}"]


PROMPTS = {"short": [1, 2, 3, 4, 5, 1, 2, 3], "repeats": [*range(10, 30), *range(10, 30), 10, 11, 12]}


def decoded_runs() -> dict[str, list[str]]:
    runs = {}
    for hw in (GPU, CPU, REPACKED):
        for name, prompt in PROMPTS.items():
            runs[f"decode {hw.name} auto {name} greedy"] = decoded(hw, "auto", prompt, SamplingParams())
            sampled = SamplingParams(temperature=0.8, top_k=20, seed=len(name))
            runs[f"decode {hw.name} auto {name} sampled"] = decoded(hw, "auto", prompt, sampled)
        greedy = SamplingParams()
        runs[f"decode {hw.name} auto constrained"] = decoded(hw, "auto", PROMPTS["short"], greedy, constrained=True)
    runs["decode gpu model chains"] = decoded(GPU, "model", PROMPTS["short"], SamplingParams(), trees=False, seed=5)
    runs["decode gpu model constrained sampled"] = decoded(
        GPU, "model", PROMPTS["repeats"], SamplingParams(temperature=0.7, seed=3), constrained=True, seed=7
    )
    runs["decode gpu ngram repeats"] = decoded(GPU, "ngram", PROMPTS["repeats"], SamplingParams(), seed=9)
    return runs


def recording() -> dict[str, list[str]]:
    return simulated_runs() | decoded_runs()


if __name__ == "__main__":
    RECORDING.parent.mkdir(exist_ok=True)
    RECORDING.write_text(json.dumps(recording(), indent=0) + "\n")
