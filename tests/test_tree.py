"""Draft trees (edgespec.decoding.tree) and their verification (edgespec.decoding.sampling).

The claim under test is the one chains already meet: whatever tree the drafter proposes, greedy
verification emits the target's argmax, and sampled verification emits tokens that follow the
target's warped distribution exactly, with one sampled sibling, several (drawn i.i.d. or without
replacement), point-mass siblings (n-gram copies, a draft model's top-k alternatives), and down a
two-level tree. Numpy distributions stand in for models; every test is seeded. With at most 8
outcomes and 40k samples the expected total variation of pure sampling noise is about 0.005.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.decoding.events import Source, Step
from edgespec.decoding.sampling import Dist, SamplingParams, verify_greedy, verify_sampled, warp
from edgespec.decoding.tree import (
    ROOT,
    ancestry,
    branches_through,
    chain,
    children,
    depths,
    is_chain,
    leaves,
    path_to,
    subtree,
)

# root -> 0 -> 2 -> 4
#      -> 1 -> 3
#           -> 5
TREE = [ROOT, ROOT, 0, 1, 2, 1]


def test_tree_structure():
    assert children(TREE) == [[0, 1], [2], [3, 5], [4], [], [], []]
    assert depths(TREE) == [1, 1, 2, 2, 3, 2]
    assert path_to(TREE, 4) == [0, 2, 4] and path_to(TREE, 5) == [1, 5] and path_to(TREE, ROOT) == []
    assert leaves(TREE) == [3, 4, 5]
    # branch 0 ends at node 3 (root-1-3), branch 1 at 4 (root-0-2-4), branch 2 at 5 (root-1-5)
    assert branches_through(TREE) == [[1], [0, 2], [1], [0], [1], [2]]
    seen = ancestry(TREE)
    assert seen[0].tolist() == [True] + [False] * 6
    assert np.flatnonzero(seen[5]).tolist() == [0, 1, 3, 5]  # node 4 sees pending, 0, 2 and itself
    assert np.flatnonzero(seen[6]).tolist() == [0, 2, 6]  # node 5 sees pending, 1 and itself
    assert subtree(TREE, [0, 1, 3, 5]) == [ROOT, ROOT, 1, 1]
    assert is_chain(chain(4)) and chain(3) == [ROOT, 0, 1] and not is_chain(TREE)
    assert np.array_equal(ancestry(chain(3)), np.tril(np.ones((4, 4), dtype=bool)))


def _rows(argmaxes: list[int], v: int = 10) -> np.ndarray:
    rows = np.random.default_rng(11).normal(size=(len(argmaxes), v))
    for i, t in enumerate(argmaxes):
        rows[i, t] = 10.0
    return rows


def test_greedy_follows_the_targets_argmax_into_any_branch():
    ids = [7, 3, 5, 1, 2, 4]  # TREE's tokens; row 0 is the root's, row i + 1 node i's
    # root: 3 (node 1); under node 1: 4 (node 5, its second child); after that leaf: a bonus 6
    assert verify_greedy(_rows([3, 0, 4, 0, 0, 0, 6]), ids, TREE) == ([1, 5], 6)
    # under node 1 the target prefers 1 (node 3, its first child); its row then gives 0
    assert verify_greedy(_rows([3, 0, 1, 0, 0, 0, 6]), ids, TREE) == ([1, 3], 0)
    # no child of node 0 matches the target's 8: a correction after one accepted node
    assert verify_greedy(_rows([7, 8, 0, 0, 0, 0, 0]), ids, TREE) == ([0], 8)
    assert verify_greedy(_rows([9, 0, 0, 0, 0, 0, 0]), ids, TREE) == ([], 9)


# -- sampled verification ------------------------------------------------------------------------

V = 8
PARAMS = SamplingParams(temperature=1.0)
N = 40_000


def _without(q: Dist, tokens: list[int]) -> Dist:
    keep = ~np.isin(q.ids, tokens)
    return Dist(q.ids[keep], q.probs[keep] / q.probs[keep].sum())


def _dense(d: Dist) -> np.ndarray:
    out = np.zeros(V)
    out[d.ids] = d.probs
    return out


def _tvd(samples: list[int] | np.ndarray, p: np.ndarray) -> float:
    return 0.5 * float(np.abs(np.bincount(samples, minlength=len(p)) / len(samples) - p).sum())


def _siblings(kind: str, q: Dist, rng: np.random.Generator) -> tuple[list[int], list[Dist | None]]:
    """The root's children as a drafter of `kind` would propose them, with the q each was drawn from."""
    if kind.startswith("iid"):
        n = int(kind[-1])
        return [q.sample(rng) for _ in range(n)], [q] * n
    if kind.startswith("without"):
        ids, dists = [], []
        for _ in range(int(kind[-1])):
            d = _without(q, ids)
            ids.append(d.sample(rng))
            dists.append(d)
        return ids, dists
    if kind == "point_masses":  # n-gram copies: fixed tokens, one the target never emits (top-k)
        return [int(np.argsort(-q.probs)[0]), int(q.ids[-1]), 0], [None, None, None]
    raise ValueError(kind)


@pytest.mark.heavy
@pytest.mark.parametrize("kind", ["iid1", "iid2", "iid3", "without2", "without3", "point_masses"])
def test_sampled_siblings_reproduce_the_target(kind):
    rng = np.random.default_rng(sum(map(ord, kind)))
    params = SamplingParams(temperature=1.0, top_k=6)  # token 0 is outside p's support: always rejected
    target = np.r_[-20.0, rng.normal(size=V - 1) * 1.5]
    p = warp(target, params)
    q = warp(target + rng.normal(size=V) * 1.2, SamplingParams(temperature=1.0))
    rows = np.tile(target, (4, 1))  # the root's row; the siblings' rows are never read here
    samples = np.empty(N, dtype=np.int64)
    accepted_branch = 0
    for i in range(N):
        ids, dists = _siblings(kind, q, rng)
        path, next_id = verify_sampled(rows[: len(ids) + 1], ids, [ROOT] * len(ids), dists, params, rng)
        samples[i] = ids[path[0]] if path else next_id
        accepted_branch += bool(path) and path[0] > 0
    assert _tvd(samples, _dense(p)) < 0.01
    if kind != "iid1":
        assert accepted_branch > N // 50  # later siblings do win: the test covers their acceptance


@pytest.mark.heavy
def test_a_two_level_tree_reproduces_the_targets_joint_distribution():
    """Rows depend on the token they follow, so emitting a token from the wrong row (a path or row
    bookkeeping error) shows in the joint distribution of the first two tokens."""
    rng = np.random.default_rng(5)
    target = rng.normal(size=(V + 1, V)) * 1.5  # row V: after the pending token; row t: after token t
    draft = target + rng.normal(size=target.shape)
    p0 = _dense(warp(target[V], PARAMS))
    want = p0[:, None] * np.stack([_dense(warp(target[t], PARAMS)) for t in range(V)])
    q = [warp(row, PARAMS) for row in draft]
    counts = np.zeros((V, V))
    for _ in range(N):
        # x1 ~ q, x2 ~ q without x1; under x1: y1 ~ q[x1] and y2 its best alternative; under x2: z ~ q[x2]
        x1 = q[V].sample(rng)
        rest = _without(q[V], [x1])
        x2 = rest.sample(rng)
        y1 = q[x1].sample(rng)
        y2 = next(int(t) for t in q[x1].ids[np.argsort(-q[x1].probs)] if t != y1)
        z = q[x2].sample(rng)
        ids = [x1, x2, y1, y2, z]
        parents = [ROOT, ROOT, 0, 0, 1]
        rows = np.stack([target[V], target[x1], target[x2], target[y1], target[y2], target[z]])
        path, next_id = verify_sampled(rows, ids, parents, [q[V], rest, q[x1], None, q[x2]], PARAMS, rng)
        emitted = [ids[n] for n in path] + [next_id]
        if len(emitted) == 1:  # the next round would sample the second token from the target
            emitted.append(warp(target[emitted[0]], PARAMS).sample(rng))
        counts[emitted[0], emitted[1]] += 1
    assert 0.5 * np.abs(counts / N - want).sum() < 0.015  # 64 outcomes: noise about 0.011 here


def test_greedy_params_make_sampled_tree_verification_greedy():
    rng = np.random.default_rng(3)
    ids = [7, 3, 5, 1, 2, 4]
    for _ in range(200):
        rows = rng.normal(size=(len(TREE) + 1, V))
        for row, node in ((0, 1), (2, 5)):  # often steer the argmax into a later sibling
            if rng.random() < 0.6:
                rows[row, ids[node]] = 5.0
        assert verify_sampled(rows, ids, TREE, [None] * len(ids), SamplingParams(), rng) == verify_greedy(
            rows, ids, TREE
        )


def test_a_step_names_its_rejected_branches_and_the_source_of_each_token():
    ids = (7, 3, 5, 1, 2, 4)  # TREE's tokens
    # accepted: node 1 then node 5 (a leaf): a bonus; branches 0-2-4 and 1-3 were left
    step = Step(6, 2, ids, (7, 5, 1, 2), 0.0, 0.0, "ngram", parents=tuple(TREE), path=(1, 5))
    assert step.rejected_branches() == [(1,), (7, 5, 2)]
    assert step.sources() == [Source.DRAFT, Source.DRAFT, Source.BONUS]
    # accepted: node 0 only (node 2 under it was wrong): a correction
    step = Step(6, 1, ids, (3, 5, 1, 2, 4), 0.0, 0.0, "ngram", parents=tuple(TREE), path=(0,))
    assert step.rejected_branches() == [(3, 1), (5, 2), (3, 4)]
    assert step.sources() == [Source.DRAFT, Source.CORRECTION]
    chain_step = Step(3, 1, (7, 8, 9), (8, 9), 0.0, 0.0, "model")  # a chain, as older code builds it
    assert chain_step.rejected_branches() == [(8, 9)] and chain_step.sources() == [Source.DRAFT, Source.CORRECTION]
    assert Step(0, 0, (), (), 0.0, 0.0).sources() == [Source.TARGET]
