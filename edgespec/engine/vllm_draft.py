"""What vLLM is to draft for a pair (`edgespec export vllm`): vLLM drafts the same K every step, so
K is what this machine's calibrated controller would choose for a long run (`AutoK.fixed_k`), and
for n-gram lookup the match lengths it looks up. Here, in the engine layer, so the CLI needs of
decoding nothing but its flags' types."""

from __future__ import annotations

from dataclasses import dataclass

from edgespec.decoding.copying.ngram import NgramDrafter
from edgespec.decoding.drafters import DraftChoice, DrafterKind
from edgespec.decoding.policy.controller import AutoK
from edgespec.engine.options import CheckedOptions


@dataclass(frozen=True)
class DraftPlan:
    """What vLLM is to draft: K tokens, and for n-gram lookup the match lengths it looks up."""

    k: int  # 0: the controller would not draft here
    lookup_min: int = 0
    lookup_max: int = 0


def given_plan(k: int) -> DraftPlan:
    """K as the user gave it, with the match lengths of edgespec's own n-gram lookup."""
    lookup = NgramDrafter()
    return DraftPlan(k, lookup.min_n, lookup.max_n)


def calibrated_plan(controller: AutoK, drafter: str) -> DraftPlan:
    """The controller's fixed K for the pair's drafter; for n-gram lookup, at a match of the lookup's
    longest key, and the shortest match at which it would draft at all."""
    if drafter == "model":
        return DraftPlan(controller.fixed_k(DrafterKind.MODEL))
    longest = NgramDrafter().max_n
    shortest = next((m for m in range(1, longest + 1) if controller.fixed_k(DrafterKind.NGRAM, m)), longest)
    return DraftPlan(controller.fixed_k(DrafterKind.NGRAM, longest), shortest, longest)


def measured_plan(checked: CheckedOptions) -> DraftPlan:
    """Open the pair `checked` names (closed again before this returns) for its calibrated cost
    curve (read, or measured once), and the plan its controller would choose."""
    engine, _ = checked.open()
    try:
        controller = AutoK(DraftChoice.AUTO, engine.cost_model())
    finally:
        engine.close()
    return calibrated_plan(controller, checked.pair.drafter)
