"""The --k flag (`PolicyChoice`) and the baseline policies (`decoding/policy/simple_policies.py`)."""

from __future__ import annotations

import pytest

from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.drafters import LOOKUPS, Draft
from edgespec.decoding.events import ControllerState, Step
from edgespec.decoding.policy.controller import AutoK, make_policy
from edgespec.decoding.policy.plan import PolicyChoice, RoundContext
from edgespec.decoding.policy.simple_policies import FixedK, HeuristicK
from edgespec.util.errors import SettingError


def test_k_setting_parses_the_k_flag_and_names_its_policy():
    costs = CostModel()
    assert PolicyChoice.parse("auto") == PolicyChoice("auto") and str(PolicyChoice.parse(" 4 ")) == "4"
    assert isinstance(make_policy(PolicyChoice.parse("auto"), "auto", costs), AutoK)
    assert make_policy(PolicyChoice.parse("auto"), "ngram", costs).costs is costs
    assert isinstance(make_policy(PolicyChoice.parse("heuristic"), "model", costs), HeuristicK)
    fixed = make_policy(PolicyChoice.parse("4"), "ngram", costs)
    assert isinstance(fixed, FixedK) and fixed.draft_len == 4 and fixed.longest_draft == 4 and fixed.allowed == LOOKUPS
    assert make_policy(PolicyChoice.parse("0"), "none", costs).draft_len == 0
    assert PolicyChoice.parse("64").fixed_len == PolicyChoice.LONGEST_FIXED


@pytest.mark.parametrize("flag", ["x", "-1", "65", "", "2.5", "Auto"])
def test_k_setting_refuses_bad_values_with_a_one_line_setting_error(flag):
    with pytest.raises(SettingError) as e:
        PolicyChoice.parse(flag)
    assert "\n" not in str(e.value) and "--k" not in str(e.value)  # the core does not know the flag


def ngram_ctx(n: int, match_len: int = 3, has_model: bool = False, draft_room: int = 100) -> RoundContext:
    return RoundContext(Draft(list(range(n)), [None] * n, [1.0] * n, match_len), has_model, draft_room)


def test_fixed_k_caps_by_budget_and_ngram_length():
    assert FixedK(8, "model").plan(RoundContext(None, True, 3)).draft_len == 3  # max_tokens left
    plan = FixedK(8, "ngram").plan(ngram_ctx(2))
    assert (plan.drafter, plan.draft_len) == ("ngram", 2)  # the copy found is shorter
    assert FixedK(8, "ngram").plan(ngram_ctx(20, draft_room=5)).draft_len == 5
    plan = FixedK(4, "ngram").plan(RoundContext(Draft(), False, 100))  # no match: a plain step
    assert (plan.drafter, plan.draft_len) == (None, 0)
    plan = FixedK(4, "model").plan(RoundContext(None, False, 100))  # no draft model loaded
    assert (plan.drafter, plan.draft_len) == (None, 0)
    # "auto" takes the draft model when there is one, else the n-gram copy
    assert FixedK(4, "auto").plan(ngram_ctx(9, has_model=True)).drafter == "model"
    assert FixedK(4, "auto").plan(ngram_ctx(9)).drafter == "ngram"
    plan = FixedK(0, "auto").plan(ngram_ctx(9, has_model=True))
    assert (plan.drafter, plan.draft_len) == (None, 0)
    assert plan.state == ControllerState("fixed", 0, None, 0.0, 0.0, 0.0)
    assert FixedK(3, "model").plan(RoundContext(None, True, 100)).state.draft_len == 3


def _step(k: int, accepted: int, drafter: str | None = "model") -> Step:
    ids = tuple(range(k))
    return Step(k, accepted, ids, ids[accepted:], 0.0, 0.0, drafter if k else None)


def test_heuristic_k_adds_two_after_a_full_round_and_drops_one_otherwise():
    h = HeuristicK("model")
    ctx = RoundContext(None, True, 100)
    trace = []
    for accepted_all in (True, True, False, False, True):
        k = h.plan(ctx).draft_len
        trace.append(k)
        h.observe(_step(k, k if accepted_all else 0), Draft())
    assert trace == [5, 7, 9, 8, 7]
    for _ in range(10):
        h.observe(_step(h.draft_len, h.draft_len), Draft())
    assert h.draft_len == 16  # capped
    for _ in range(30):
        h.observe(_step(h.draft_len, 0), Draft())
    assert h.draft_len == 1  # never below one
    h.observe(_step(0, 0), Draft())  # a plain step (nothing drafted) changes nothing
    assert h.draft_len == 1
    # the plan is capped by the budget and the n-gram copy, the schedule is not
    h.draft_len = 9
    assert HeuristicK.plan(h, RoundContext(None, True, 4)).draft_len == 4
    g = HeuristicK("ngram")
    assert g.plan(ngram_ctx(3)).draft_len == 3
    g.observe(_step(3, 3, "ngram"), Draft())
    assert g.draft_len == 7 and g.plan(ngram_ctx(3)).state.policy == "heuristic"
