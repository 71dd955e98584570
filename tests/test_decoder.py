"""The decode loop on deterministic fake models: losslessness, cache bookkeeping, events."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from edgespec.decoding.copying.corpus import CorpusDrafter
from edgespec.decoding.copying.ngram import NgramDrafter
from edgespec.decoding.copying.suffix_index import SuffixIndex
from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.decoder import Reply, SpeculativeDecoder
from edgespec.decoding.drafters import DrafterKind
from edgespec.decoding.events import ControllerState, Source, Step, Summary, Token
from edgespec.decoding.model_drafter import ModelDrafter
from edgespec.decoding.policy.controller import AutoK
from edgespec.decoding.policy.simple_policies import FixedK, HeuristicK
from edgespec.decoding.sampling import SamplingParams
from edgespec.decoding.tree import ROOT, first_branch, is_chain
from edgespec.engine.stats_line import stats_line
from tests.fakes import MarkovBackend, VirtualClock, plain_greedy, simulated_time

GREEDY = SamplingParams()
PROMPT = [1, 2, 3, 4, 5, 1, 2, 3]


def run(decoder, prompt=PROMPT, n=40, params=GREEDY, cancel=None):
    events = list(decoder.generate(prompt, n, params, cancel))
    tokens = [e for e in events if isinstance(e, Token)]
    steps = [e for e in events if isinstance(e, Step)]
    summary = events[-1]
    assert isinstance(summary, Summary)
    return tokens, steps, summary


def always_wrong(target: MarkovBackend) -> MarkovBackend:
    """A draft model whose argmax is never the target's (the negated table)."""
    wrong = MarkovBackend(n_vocab=target.n_vocab, n_ctx=target.n_ctx)
    wrong.table = -target.table
    return wrong


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("drafter", ["good", "wrong", "ngram", "history", "history-wrong"])
def test_greedy_speculative_equals_plain_for_any_drafter(k, drafter):
    target = MarkovBackend(seed=1)
    reference = plain_greedy(target, PROMPT, 40)
    if drafter == "ngram":
        decoder = SpeculativeDecoder(target, FixedK(k, "ngram"), [NgramDrafter()])
    elif drafter.startswith("history"):  # an earlier call's reply to this prompt, or a corrupted one
        earlier = reference if drafter == "history" else [(t + 1) % target.n_vocab for t in reference]
        history = CorpusDrafter(DrafterKind.HISTORY, SuffixIndex.build([PROMPT + earlier]))
        decoder = SpeculativeDecoder(target, FixedK(k, "ngram"), [history])
    else:
        draft = MarkovBackend(seed=1, noise=2.0) if drafter == "good" else always_wrong(target)
        decoder = SpeculativeDecoder(target, FixedK(k, "model"), [ModelDrafter(draft)])
    tokens, steps, summary = run(decoder)
    assert [t.id for t in tokens] == reference
    assert summary.tokens == 40 and summary.stop_reason == "length"
    if drafter == "wrong":
        assert summary.accepted == 0 and steps[0].drafted == k and max(s.drafted for s in steps) == k
        assert all(t.source in (Source.TARGET, Source.CORRECTION) for t in tokens)
    if drafter == "good":
        assert summary.accepted > 0  # the noisy copy agrees often: the test exercises acceptance
    if drafter == "history":  # the copy is the reply itself: every draft is taken
        assert summary.accepted == summary.drafted > 0 and {s.drafter for s in steps if s.drafted} == {"history"}
        assert f"accepted from history {summary.accepted}," in stats_line(summary)


def test_verification_keeps_prefix_replaces_first_rejection_and_rolls_back_both_caches():
    target = MarkovBackend(seed=2)
    draft = MarkovBackend(seed=2, noise=2.5)
    decoder = SpeculativeDecoder(target, FixedK(6, "model"), [ModelDrafter(draft)])
    context = list(PROMPT)
    target.eval(context[:-1], 1)  # the invariant: everything but the pending token is cached
    seen_partial = False
    for _ in range(30):
        before = list(context)
        step, new_ids = decoder._round(Reply(context, len(context), GREEDY, np.random.default_rng(0)), 6)
        truth = plain_greedy(target, before, step.accepted + 1)
        assert list(step.drafted_ids[: step.accepted]) == truth[: step.accepted]
        assert new_ids == truth  # accepted prefix + the target's own token
        if step.accepted < step.drafted:
            seen_partial = True
            assert step.drafted_ids[step.accepted] != truth[step.accepted]
            assert step.rejected_ids == step.drafted_ids[step.accepted :]
        assert context == before + new_ids
        assert target.cached == context[:-1]
        # the draft cache never holds a rejected token
        assert draft.cached == context[: len(draft.cached)]
    assert seen_partial


def test_sources_and_summary_counts():
    target = MarkovBackend(seed=3)
    decoder = SpeculativeDecoder(target, FixedK(4, "model"), [ModelDrafter(MarkovBackend(seed=3, noise=1.5))])
    tokens, steps, summary = run(decoder, n=60)
    assert tokens[0].source is Source.TARGET  # the first token comes from the prompt's pass
    by_source = {s: sum(t.source is s for t in tokens) for s in Source}
    assert by_source[Source.DRAFT] == summary.accepted == sum(s.accepted for s in steps) - _overshoot(steps, summary)
    assert by_source[Source.BONUS] + by_source[Source.CORRECTION] >= len(steps) - 1
    assert summary.target_passes == len(steps)
    assert sum(summary.k_histogram.values()) == len(steps)
    assert summary.tokens == len(tokens) == 60


def _overshoot(steps, summary):
    """Accepted drafts cut off by max_tokens in the last round."""
    return sum(s.accepted for s in steps) - summary.accepted


def test_eos_stops_generation_and_is_not_emitted():
    target = MarkovBackend(seed=4)
    reference = plain_greedy(target, PROMPT, 30)
    eos = reference[10]
    target.eos_ids = frozenset({eos})
    decoder = SpeculativeDecoder(target, FixedK(3, "ngram"), [NgramDrafter()])
    tokens, _, summary = run(decoder, n=30)
    assert [t.id for t in tokens] == reference[: reference.index(eos)]
    assert summary.stop_reason == "eos"


def test_cancel_stops_at_the_next_pass():
    target = MarkovBackend(seed=5)
    cancel = threading.Event()
    decoder = SpeculativeDecoder(target, FixedK(0, "none"))
    gen = decoder.generate(PROMPT, 100, GREEDY, cancel)
    got = [next(gen) for _ in range(5)]
    cancel.set()
    rest = list(gen)
    assert rest[-1].stop_reason == "cancelled"
    assert len([e for e in got + rest if isinstance(e, Token)]) < 10


def test_context_full_stops_with_reason():
    target = MarkovBackend(seed=6, n_ctx=20)
    decoder = SpeculativeDecoder(target, FixedK(4, "ngram"), [NgramDrafter()])
    tokens, _, summary = run(decoder, n=100)
    assert summary.stop_reason == "context"
    assert len(PROMPT) + len(tokens) <= 20


def test_prompt_longer_than_context_is_refused():
    from edgespec.decoding.backend import ContextOverflow

    target = MarkovBackend(seed=6, n_ctx=8)
    with pytest.raises(ContextOverflow, match="context holds 8"):
        list(SpeculativeDecoder(target, FixedK(0, "none")).generate(PROMPT, 10, GREEDY))


@pytest.mark.parametrize("policy", ["heuristic", "auto"])
def test_adaptive_policies_stay_lossless(policy):
    target = MarkovBackend(seed=7)
    draft = MarkovBackend(seed=7, noise=1.0)
    pol = HeuristicK("auto") if policy == "heuristic" else AutoK("auto", _costs())
    decoder = SpeculativeDecoder(target, pol, [ModelDrafter(draft), NgramDrafter()])
    tokens, _, _ = run(decoder, n=80)
    assert [t.id for t in tokens] == plain_greedy(target, PROMPT, 80)


def _costs(flat: bool = True) -> CostModel:
    c = CostModel()
    for n in (1, 2, 4, 8, 16):
        c.observe_verify(n, 0.010 if flat else 0.010 * (1 + 0.5 * (n - 1)))
    c.observe_draft(1, 0.002)
    return c


def test_sampled_output_is_reproducible_with_a_seed():
    target = MarkovBackend(seed=8, sharp=1.0)
    params = SamplingParams(temperature=0.8, top_k=20, top_p=0.95, seed=123)

    def once():
        d = SpeculativeDecoder(
            MarkovBackend(seed=8, sharp=1.0),
            FixedK(3, "model"),
            [ModelDrafter(MarkovBackend(seed=8, sharp=1.0, noise=0.5))],
        )
        return [t.id for t in run(d, n=50, params=params)[0]]

    assert once() == once()
    assert target  # same construction each time; only the seed fixes the draws


def test_ngram_drafter_proposes_continuation_of_most_recent_match():
    ng = NgramDrafter(min_n=1, max_n=3)
    #            0  1  2  3  4  5  6  7  8  9
    context = [7, 8, 9, 1, 7, 8, 2, 3, 7, 8]
    d = ng.propose(context, 3)
    # suffix [7, 8] last occurred at 4..5: its continuation 2, 3, 7 is the first branch; the
    # earlier occurrence at 0..1 adds 9, 1, 7 beside it
    assert d.first_branch().ids == [2, 3, 7] and d.match_len == 2
    assert d.ids == [2, 3, 7, 9, 1, 7] and d.parent_list() == [ROOT, 0, 1, ROOT, 3, 4]
    assert all(q is None for q in d.dists)
    assert ng.propose([1, 2, 3, 4], 3).ids == []  # no earlier occurrence of any suffix
    # incremental: appending keeps the index, and a longer suffix match wins (it occurred once)
    context += [2, 3]
    assert ng.propose(context, 2).ids == [7, 8]
    # a different conversation rebuilds the index
    assert ng.propose([5, 6, 5], 2).ids == [6, 5]


def _flat_costs() -> CostModel:
    """Verifying 17 tokens costs what verifying one does (a GPU): every useful node pays."""
    costs = CostModel()
    for n in range(1, 18):
        costs.observe_verify(n, 0.01)
    return costs


@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=0.7, seed=3)])
def test_ngram_trees_go_through_the_same_loop_and_a_later_branch_can_win(params):
    """The prompt holds the start of the target's continuation twice: first followed by the rest of
    it, then (more recently) by other text. The most recent copy is the trie's first branch, and
    the target takes the older one."""
    target = MarkovBackend(seed=1)
    truth = plain_greedy(target, PROMPT, 40)
    prompt = [40, 41, *truth[:12], 42, *truth[:3], 43, 44, 45, 46, *PROMPT]
    decoder = SpeculativeDecoder(target, AutoK("ngram", _flat_costs()), [NgramDrafter()])
    tokens, steps, summary = run(decoder, prompt=prompt, n=40, params=params)
    if params.greedy:
        assert [t.id for t in tokens] == plain_greedy(target, prompt, 40)
    trees = [s for s in steps if s.parents is not None and not is_chain(s.parents)]
    assert trees
    if params.greedy:
        assert any(set(s.path) - set(first_branch(list(s.parents))) for s in trees)
    for s in steps:  # what each Step says is what was emitted, and the cache holds exactly the text
        parents, path = s.tree()
        assert list(s.rejected_ids) == [t for n, t in enumerate(s.drafted_ids) if n not in path]
        assert all(parents[b] == a for a, b in zip([ROOT, *path], path, strict=False))
    assert target.cached == (prompt + [t.id for t in tokens])[:-1]
    sources = [t.source for t in tokens]
    assert Source.DRAFT in sources and sources.count(Source.DRAFT) == summary.accepted


def test_the_draft_model_drafts_its_chain_before_any_alternative():
    """Alternatives are asked for once the chain is drafted, with the node count they would add to,
    and hang beside chain tokens: the first k nodes are the chain (what `head(k)` keeps)."""
    asked = []

    def branch(confidence, position, nodes):
        asked.append((position, nodes))
        return True

    draft = ModelDrafter(MarkovBackend(seed=5, noise=1.0)).propose(
        [1, 2, 3], 4, SamplingParams(), np.random.default_rng(0), lambda j, c: False, branch
    )
    parents = draft.parent_list()
    assert parents[:4] == [ROOT, 0, 1, 2] and len(parents) == 4 + 2 * 4
    assert all(parents[n] in (ROOT, 0, 1, 2) for n in range(4, len(parents)))
    after = asked[4:]  # the first 4 asked whether an alternative could pay, while drafting
    assert [nodes for _, nodes in after] == list(range(4, 12)) and [p for p, _ in after] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_the_first_token_goes_out_before_the_draft_model_reads_anything():
    target, draft = MarkovBackend(seed=1), MarkovBackend(seed=1, noise=2.0)
    events = SpeculativeDecoder(target, FixedK(3, "model"), [ModelDrafter(draft)]).generate(PROMPT, 20, GREEDY)
    first = next(events)
    assert isinstance(first, Token) and first.id == plain_greedy(target, PROMPT, 1)[0]
    assert draft.evals == []  # not a token of the prompt read yet
    rest = list(events)
    assert draft.evals and rest[-1].accepted > 0  # it read once drafting began, and drafted


def test_time_to_first_token_does_not_include_a_slow_draft_models_reading():
    clock = VirtualClock()
    target = MarkovBackend(seed=1, cost=lambda n: 0.01 * n, clock=clock)
    draft = MarkovBackend(seed=1, noise=2.0, cost=lambda n: 1.0 * n, clock=clock)  # 1 s a token: slow
    with simulated_time(clock):
        tokens, steps, summary = run(SpeculativeDecoder(target, FixedK(3, "model"), [ModelDrafter(draft)]), n=10)
    assert summary.ttft_s == pytest.approx(0.01 * len(PROMPT))  # the target's reading alone
    assert summary.decode_s > len(PROMPT)  # the draft model read the prompt after it, while decoding


def long_prompt(n: int = 300, seed: int = 5) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, 48, n)]


@pytest.mark.parametrize("window", [64, 100, None])
def test_the_draft_model_reads_a_window_of_a_long_prompt_and_the_output_stays_the_targets(window):
    prompt = long_prompt()
    target, draft = MarkovBackend(seed=1, n_ctx=1024), MarkovBackend(seed=1, noise=2.0, n_ctx=1024)
    drafter = ModelDrafter(draft, window=window)
    tokens, steps, summary = run(SpeculativeDecoder(target, FixedK(3, "model"), [drafter]), prompt, 40)
    assert [t.id for t in tokens] == plain_greedy(target, prompt, 40)
    read = draft.evals[0]  # its first reading: its view of the prompt and the first token
    assert read == len(prompt) + 1 - drafter.start
    if window is None:
        assert drafter.start == 0
    else:
        assert drafter.start % ModelDrafter.ALIGN == 0 and window < read <= window + ModelDrafter.ALIGN
    assert summary.accepted > 0 and len(draft.cached) <= len(prompt) + 40 - drafter.start


def test_the_next_turn_of_a_chat_keeps_the_draft_models_window_and_reads_only_what_is_new():
    prompt = long_prompt()
    target, draft = MarkovBackend(seed=1, n_ctx=1024), MarkovBackend(seed=1, noise=2.0, n_ctx=1024)
    drafter = ModelDrafter(draft, window=128)
    decoder = SpeculativeDecoder(target, FixedK(3, "model"), [drafter])
    tokens, _, _ = run(decoder, prompt, 30)
    start, read_before = drafter.start, sum(draft.evals)
    turn = prompt + [t.id for t in tokens] + [7, 8, 9]
    tokens2, _, _ = run(decoder, turn, 30)
    assert [t.id for t in tokens2] == plain_greedy(target, turn, 30)
    assert drafter.start == start  # the view grew instead of moving
    assert sum(draft.evals) - read_before < 128  # nothing like a whole window read again


# a 300-token prompt: a 64-token window starts at 192 (300 - 64, aligned down to 64); 0 reads it all
@pytest.mark.parametrize("window, read", [(64, 300 - 192 + 1), (0, 300 + 1)])
def test_an_engine_drafts_with_its_pairs_window(window, read):
    from dataclasses import replace

    from edgespec.decoding.drafters import DraftChoice
    from edgespec.decoding.policy.plan import PolicyChoice
    from edgespec.engine.engine import Engine, GenerateSettings
    from tests.fakes import fake_engine

    fake = fake_engine()
    engine = Engine(replace(fake.pair, draft_window=window), fake.target, fake.draft)
    prompt = long_prompt(300, seed=3)
    list(engine.generate_tokens(prompt, GenerateSettings(8, GREEDY, DraftChoice.MODEL, PolicyChoice("fixed", 2))))
    assert fake.draft.evals[0] == read  # its view of the prompt, and the first token


# -- where the reply's time goes (simulated time: each eval advances a virtual clock) -------------


def timed_pair():
    """A target costing 10 ms a token and a draft model costing 2 ms a token, on one virtual clock."""
    clock = VirtualClock()
    target = MarkovBackend(seed=7, cost=lambda n: 0.010 * n, clock=clock)
    draft = MarkovBackend(seed=7, noise=1.5, cost=lambda n: 0.002 * n, clock=clock)
    return clock, target, draft, SpeculativeDecoder(target, FixedK(3, "model"), [ModelDrafter(draft)])


def test_the_first_token_is_the_targets_reading_and_the_draft_models_is_in_its_first_step():
    clock, target, draft, decoder = timed_pair()
    with simulated_time(clock):
        _, steps, s = run(decoder, n=20)
    assert s.target_read_tokens == s.prompt_tokens == len(PROMPT)
    assert s.target_read_s == pytest.approx(0.010 * len(PROMPT))  # the target reads the prompt in one pass
    assert s.ttft_s == pytest.approx(s.target_read_s)  # and nothing else stands before the first token
    # the first draft reads the prompt and the first token at once: reading, inside that step's draft_s
    assert steps[0].read_s == pytest.approx(0.002 * (len(PROMPT) + 1)) and steps[0].draft_s > steps[0].read_s
    assert all(step.read_s == 0.0 for step in steps[1:])  # drafting every round: nothing to catch up
    assert s.draft_read_s == pytest.approx(steps[0].read_s)
    assert s.decode_s == pytest.approx(s.draft_s + s.verify_s) and s.decode_s > 0
    assert s.total_s == s.ttft_s + s.decode_s
    assert s.total_tokens_per_s == pytest.approx(20 / s.total_s) and s.total_tokens_per_s < s.decode_tokens_per_s


def test_a_second_call_reads_only_what_the_cache_lacks():
    _, target, _, decoder = timed_pair()
    run(decoder, n=20)
    _, _, again = run(decoder, n=20)
    assert again.prompt_tokens == len(PROMPT) and again.target_read_tokens == 1  # its logits are needed again


def test_the_summary_keeps_its_split_through_json_and_reads_older_files():
    _, _, _, decoder = timed_pair()
    _, _, s = run(decoder, n=12)
    d = json.loads(json.dumps(s.to_dict()))
    for key in ("ttft_s", "target_read_s", "target_read_tokens", "draft_read_s", "decode_s"):
        assert d[key] == getattr(s, key)
    assert d["total_s"] == s.total_s
    assert d["total_tokens_per_s"] == s.total_tokens_per_s
    assert Summary.from_dict(d) == s
    old = {"tokens": 12, "prefill_s": 0.3, "ttft_s": 0.4, "decode_s": 1.0, "stop_reason": "eos"}  # before the split
    back = Summary.from_dict(old)
    assert back.total_s == pytest.approx(1.4) and back.target_read_s == back.draft_read_s == 0.0
    with pytest.raises(TypeError, match="target_read_s"):
        Summary.from_dict({**d, "target_read_s": -1.0})


def test_the_controllers_draft_length_is_saved_as_k_as_files_already_hold_it():
    """`ControllerState.draft_len` is "k" in a saved summary (chat files, history records, bench
    results written before it was renamed), in the same place among the keys, and reads back."""
    state = ControllerState("auto", 3, "model", 0.5, 1.25, 1.5)
    saved = json.loads(json.dumps(Summary(tokens=4, controller=state).to_dict()))
    assert list(saved["controller"]) == [
        "policy",
        "k",
        "drafter",
        "acceptance",
        "predicted_speedup",
        "measured_speedup",
    ]
    assert saved["controller"]["k"] == 3
    assert Summary.from_dict(saved).controller == state
    with pytest.raises(TypeError, match="^k is not"):
        Summary.from_dict({**saved, "controller": {**saved["controller"], "k": "3"}})


def test_auto_prices_each_copying_source_apart_and_the_output_stays_the_targets():
    """An earlier reply to this prompt (retry) is right, a history of other text is always wrong:
    the controller drafts from the first, and has learnt from its proposals that the second does not
    pay, whichever it drafted."""
    target = MarkovBackend(seed=1)
    reference = plain_greedy(target, PROMPT, 60)
    wrong = [(t + 1) % target.n_vocab for t in reference]
    retry = CorpusDrafter(DrafterKind.RETRY, SuffixIndex.build([PROMPT + reference]))
    history = CorpusDrafter(DrafterKind.HISTORY, SuffixIndex.build([PROMPT + wrong, PROMPT + wrong]))
    policy = AutoK("auto", _costs(flat=False))
    tokens, steps, summary = run(SpeculativeDecoder(target, policy, [history, retry]), n=60)
    assert [t.id for t in tokens] == reference
    by = {kind: sum(s.accepted for s in steps if s.drafter == kind) for kind in ("retry", "history")}
    assert by["retry"] > 30 and by["history"] == 0
    assert retry.lookups > 0 and history.lookups > 0  # both were asked every round: they are free
