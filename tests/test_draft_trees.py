"""Which draft trees the auto policy verifies: the n-gram trie cut to its best nodes, the draft
model's alternatives, and trees that did not pay turning to chains (`policy/exploration.py`)."""

from __future__ import annotations

from edgespec.decoding.copying.ngram import NgramDrafter
from edgespec.decoding.drafters import Draft
from edgespec.decoding.events import Step
from edgespec.decoding.policy.controller import AutoK
from edgespec.decoding.policy.exploration import TreeGate
from edgespec.decoding.policy.plan import Plan, RoundContext
from edgespec.decoding.tree import children, first_branch, is_chain
from tests.policy_simulation import CPU, GPU, Hardware, calibrated, curve


def _trie_text() -> list[int]:
    """A text whose last four tokens were followed three times before, each time differently."""
    return [
        5,
        6,
        1,
        2,
        10,
        11,
        12,
        13,
        14,
        9,
        5,
        6,
        1,
        2,
        20,
        21,
        22,
        23,
        9,
        5,
        6,
        1,
        2,
        30,
        31,
        32,
        33,
        9,
        7,
        5,
        6,
        1,
        2,
    ]


def _trie_round(hw: Hardware) -> tuple[Draft, Plan]:
    """The n-gram drafter's trie after `_trie_text` and the controller's plan for it."""
    text = _trie_text()
    proposal = NgramDrafter().propose(text, 8)
    plan = AutoK("ngram", calibrated(hw, with_draft=False)).plan(RoundContext(proposal, False, 64, text))
    return proposal, plan


def test_the_ngram_trie_holds_every_earlier_match_with_the_latest_first():
    proposal, _ = _trie_round(GPU)
    parents = proposal.parent_list()
    assert [proposal.ids[n] for n in first_branch(parents)] == [30, 31, 32, 33, 9, 7, 5, 6]
    assert [proposal.ids[n] for n in children(parents)[0]] == [30, 20, 10]  # siblings at the root


def test_the_controller_verifies_a_chain_on_a_steep_curve_and_a_tree_on_a_flat_one():
    proposal, steep = _trie_round(CPU)
    assert steep.drafter == "ngram" and steep.draft_len >= 1
    assert set(steep.nodes) <= set(first_branch(proposal.parent_list()))  # a chain: the latest copy
    proposal, flat = _trie_round(GPU)
    kept = proposal.subtree(flat.nodes).parent_list()
    assert not is_chain(kept) and len(children(kept)[0]) == 3  # every copy is tried at the root
    assert flat.draft_len == len(flat.nodes) > steep.draft_len


def test_model_alternatives_are_added_where_verifying_is_flat_only():
    """The draft model's branch rule for a 0.3-likely alternative beside a first token drafted at 0.6."""
    gpu = AutoK("model", calibrated(GPU)).plan(RoundContext(None, True, 64))
    assert gpu.drafter == "model" and gpu.stop(0, 0.6) is False and gpu.branch(0.3, 0, 1) is True
    cheap_draft = Hardware("cpu, a draft step 14 times cheaper", CPU.verify, 0.002)  # drafting pays here
    plan = AutoK("model", calibrated(cheap_draft)).plan(RoundContext(None, True, 64))
    assert plan.drafter == "model" and plan.draft_len >= 1
    assert plan.stop(0, 0.6) is False and plan.branch(0.3, 0, 1) is False
    chains = AutoK("model", calibrated(GPU), trees=False).plan(RoundContext(None, True, 64))
    assert chains.drafter == "model" and chains.branch is None


def test_trees_that_did_not_pay_turn_to_chains_and_are_tried_again_until_they_do():
    """Verifying is flat up to 4 tokens and dearer after, so a three-token chain with one
    alternative costs more than the chain alone. While the chain is accepted whole, the alternative
    only costs: the controller drafts chains, and a tree every EXPLORE-th round to keep measuring.
    Once the text changes so that the chain's second token is wrong and the alternative beside it
    right, trees pay, and the controller drafts them every round again."""
    hw = Hardware("flat to 4 tokens, then dearer", curve({1: 0.010, 4: 0.010, 5: 0.016, 17: 0.030}), 0.002)
    ctl = AutoK("model", calibrated(hw))
    tree_parents = [-1, 0, 1, 0]  # the chain 0-1-2 and node 3 beside node 1

    def rounds_to_a_tree(chain_accepts: int) -> list[bool]:
        """Whether each plan drafts a tree, until one does. A chain accepts its first
        `chain_accepts` tokens; a tree the same, or where the chain fails at node 1 the
        alternative there."""
        drafted = []
        while True:
            plan = ctl.plan(RoundContext(None, True, 64))
            assert plan.drafter == "model"
            drafted.append(plan.branch is not None)
            if plan.branch is not None:
                break
            chain = Step(3, chain_accepts, (0, 1, 2), (), 3 * hw.draft, hw.verify(4), "model")
            ctl.observe(chain, Draft([0, 1, 2], [None] * 3, [0.9] * 3))
        path = (0, 1, 2) if chain_accepts == 3 else (0, 3)
        tree = Step(
            4, len(path), (0, 1, 2, 3), (), 3 * hw.draft, hw.verify(5), "model", parents=tuple(tree_parents), path=path
        )
        ctl.observe(tree, Draft([0, 1, 2, 3], [None] * 4, [0.9, 0.9, 0.9, 0.3], parents=tree_parents))
        return drafted

    assert rounds_to_a_tree(chain_accepts=3) == [True]  # trees are tried first
    held = [rounds_to_a_tree(chain_accepts=3) for _ in range(4)]
    assert all(len(rounds) == TreeGate.EXPLORE and rounds[-1] for rounds in held)
    changed = [rounds_to_a_tree(chain_accepts=1) for _ in range(20)]
    assert changed[0] == held[-1]  # still held at first
    assert changed[-3:] == [[True]] * 3  # then a tree every round


def test_ngram_tries_whose_other_copies_are_never_right_turn_to_chains():
    """The trie of three earlier copies on a nearly flat curve: every copy is tried at first. When
    the latest copy is always the right one, the others only add verification time, and the
    controller verifies the latest copy alone (a tree every EXPLORE-th round)."""
    hw = Hardware("nearly flat", curve({1: 0.010, 17: 0.014}), 0.002)
    text = _trie_text()
    proposal = NgramDrafter().propose(text, 8)
    ctl = AutoK("ngram", calibrated(hw, with_draft=False))
    trees = []
    for _ in range(60):
        plan = ctl.plan(RoundContext(proposal, False, 64, text))
        assert plan.drafter == "ngram"
        keep = plan.nodes if plan.nodes is not None else first_branch(proposal.parent_list())[: plan.draft_len]
        draft = proposal.subtree(keep)  # as the decoder cuts it
        parents = draft.parent_list()
        trees.append(not is_chain(parents))
        path = first_branch(parents)
        ctl.observe(
            Step(
                len(parents),
                len(path),
                tuple(draft.ids),
                (),
                0.0,
                hw.verify(len(parents) + 1),
                "ngram",
                parents=tuple(parents),
                path=tuple(path),
            ),
            draft,
        )
    assert trees[0]
    assert sum(trees[-2 * TreeGate.EXPLORE :]) == 2
