"""The suffix index against a brute-force reading of the same documents: the longest match, the
occurrences it found, the frequency-scored trie of what followed them; and a segmented index is
the single index of the same documents.

Small corpora over a 3-token alphabet match often and deeply. Their `sa` ranges are short, so the
tests also lower `_NARROW` (an instance attribute shadows the class's) to take the binary-search
path a large corpus takes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgespec.decoding.copying.suffix_index import SEP, SegmentedIndex, SuffixIndex
from edgespec.decoding.tree import ROOT, children, first_branch, path_to

tokens = st.integers(0, 2)
corpora = st.lists(st.lists(tokens, max_size=12), max_size=8)
contexts = st.lists(tokens, max_size=10)
narrows = st.sampled_from([0, 1, 3, 256])


def reference(docs: list[list[int]], context: list[int], max_match: int = 32) -> tuple[int, list[int], list[list[int]]]:
    """(longest match, its occurrences' T end positions most recent first, the whole rest of each
    occurrence's document), read off the documents one position at a time."""
    starts, at = [], 1
    for doc in docs:
        starts.append(at)
        at += len(doc) + 1 if doc else 0
    best: tuple[int, list[tuple[int, int]]] = (0, [])
    for m in range(1, min(max_match, len(context)) + 1):
        found = [
            (d, i + m - 1)
            for d, doc in enumerate(docs)
            for i in range(len(doc) - m)  # a token after the match
            if doc[i : i + m] == context[-m:]
        ]
        if found:
            best = (m, found)
    m, found = best
    found.sort(reverse=True)
    return m, [starts[d] + e for d, e in found], [docs[d][e + 1 :] for d, e in found]


def index(docs: list[list[int]], narrow: int) -> SuffixIndex:
    built = SuffixIndex.build(docs)
    built._NARROW = narrow
    return built


def paths(draft) -> list[tuple[int, ...]]:
    return [tuple(draft.ids[n] for n in path_to(draft.parents, node)) for node in range(len(draft.ids))]


@settings(max_examples=300, deadline=None)
@given(docs=corpora, context=contexts, narrow=narrows, max_match=st.integers(1, 6))
def test_the_longest_match_and_its_occurrences_are_the_reference(docs, context, narrow, max_match):
    m, ends, _ = reference(docs, context, max_match)
    got_m, got_ends = index(docs, narrow).longest_match(context, max_match)
    assert got_m == m
    assert got_ends.tolist() == ends


@settings(max_examples=300, deadline=None)
@given(docs=corpora, context=contexts, narrow=narrows, k=st.integers(1, 5))
def test_the_trie_counts_what_followed(docs, context, narrow, k):
    m, _, rests = reference(docs, context)
    draft = index(docs, narrow).propose(context, k, max_nodes=10_000)
    assert draft.match_len == m
    if not m:
        assert draft.ids == []
        return
    copies = [tuple(rest[:k]) for rest in rests]
    through = Counter(copy[:depth] for copy in copies for depth in range(len(copy) + 1))
    # every distinct prefix of a copy is one node, with its share of its parent's occurrences
    assert sorted(paths(draft)) == sorted(p for p in through if p)
    for path, confidence in zip(paths(draft), draft.confidence, strict=True):
        assert confidence == pytest.approx(through[path] / through[path[:-1]])
    # the root's children: the first tokens of the continuations, with their counts
    first = Counter(copy[0] for copy in copies)
    kids = children(draft.parents)[0]
    assert {draft.ids[n]: draft.confidence[n] * len(copies) for n in kids} == pytest.approx(first)

    # siblings most frequent first; among equals the one the most recent occurrence took
    def rank(node: int) -> tuple[int, int]:
        path = paths(draft)[node]
        return -through[path], next(i for i, copy in enumerate(copies) if copy[: len(path)] == path)

    for below in children(draft.parents):
        assert [rank(n) for n in below] == sorted(rank(n) for n in below)


@settings(max_examples=200, deadline=None)
@given(docs=corpora, context=contexts, narrow=narrows, k=st.integers(1, 5))
def test_the_first_branch_is_the_most_frequent_path(docs, context, narrow, k):
    m, _, rests = reference(docs, context)
    draft = index(docs, narrow).propose(context, k, max_nodes=10_000)
    path: list[int] = []
    copies = [rest[:k] for rest in rests]
    while True:
        going = [c for c in copies if c[: len(path)] == path and len(c) > len(path)]
        if not going:
            break
        counts = Counter(c[len(path)] for c in going)
        # the most frequent next token; on a tie, the one the most recent occurrence took
        path.append(min(counts, key=lambda t: (-counts[t], next(i for i, c in enumerate(going) if c[len(path)] == t))))
    assert [draft.ids[n] for n in first_branch(draft.parents or [])] == path


@settings(max_examples=200, deadline=None)
@given(docs=corpora, context=contexts, narrow=narrows, k=st.integers(1, 5), max_nodes=st.integers(0, 12))
def test_max_nodes_keeps_the_best_nodes_of_the_whole_trie(docs, context, narrow, k, max_nodes):
    built = index(docs, narrow)
    whole = built.propose(context, k, max_nodes=10_000)
    cut = built.propose(context, k, max_nodes=max_nodes)
    assert len(cut.ids) == min(max_nodes, len(whole.ids))
    assert all(p == ROOT or p < i for i, p in enumerate(cut.parents or []))
    head = whole.head(max_nodes)
    assert (cut.ids, cut.parent_list(), cut.confidence) == (head.ids, head.parent_list(), head.confidence)


def test_no_match_crosses_a_document():
    built = SuffixIndex.build([[1, 2], [3, 4]])
    assert built.longest_match([2, 3])[0] == 1  # [3] then 4, never [2, SEP, 3]
    assert built.longest_match([1, 2])[0] == 0  # 2 ends its document: nothing followed it
    assert built.longest_match([7, 1])[0] == 1
    assert built.propose([3], 4).ids == [4]


def test_an_empty_corpus_and_an_empty_context_match_nothing():
    empty = SuffixIndex.build([[], []])
    assert empty.tokens.tolist() == [SEP]
    assert empty.longest_match([1, 2])[0] == 0
    assert empty.propose([1, 2], 4).ids == []
    assert SuffixIndex.build([[1, 2, 3]]).propose([], 4).ids == []


def test_a_context_shorter_than_the_matches():
    built = SuffixIndex.build([[5, 1, 2, 3, 4], [6, 1, 2, 3, 9]])
    draft = built.propose([2], 3)
    assert draft.match_len == 1
    assert sorted(paths(draft)) == [(3,), (3, 4), (3, 9)]
    assert draft.confidence[0] == 1.0


def test_unknown_and_negative_tokens_match_nothing():
    built = SuffixIndex.build([[1, 2]])
    assert built.longest_match([10**6])[0] == 0
    assert built.longest_match([-1])[0] == 0
    with pytest.raises(ValueError):
        SuffixIndex.build([[1, -3]])


def test_the_most_recent_occurrences_are_kept():
    docs = [[7, i] for i in range(10)]
    m, ends = SuffixIndex.build(docs).longest_match([7], max_matches=3)
    assert m == 1 and ends.tolist() == [28, 25, 22]  # the last three documents' 7s
    assert SuffixIndex.build(docs).propose([7], 1, max_matches=3).ids == [9, 8, 7]


def test_a_sampled_range_still_finds_real_occurrences():
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 3, 30).tolist() for _ in range(20)]
    built = SuffixIndex.build(docs)
    built._NARROW, built._SCAN = 0, 4
    m, ends = built.longest_match([0])
    assert m == 1 and len(ends) == 4
    assert all(built.tokens[e] == 0 and built.tokens[e + 1] != SEP for e in ends)


def test_a_saved_index_loads_memory_mapped(tmp_path):
    docs = [[1, 2, 3, 4], [1, 2, 3, 5], [2, 3, 4]]
    built = SuffixIndex.build(docs)
    np.save(tmp_path / "index.npy", np.stack([built.tokens, built.sa]))
    both = np.load(tmp_path / "index.npy", mmap_mode="r")
    loaded = SuffixIndex(both[0], both[1])
    assert loaded.propose([2, 3], 2) == built.propose([2, 3], 2)
    with pytest.raises(ValueError):
        SuffixIndex(both[0], both[1][::-1] + 1)
    with pytest.raises(ValueError):
        SuffixIndex(both[0][1:], both[1][1:])


@settings(max_examples=150, deadline=None)
@given(
    docs=corpora,
    split=st.integers(0, 8),
    tail_tokens=st.integers(1, 40),
    context=contexts,
    k=st.integers(1, 4),
    max_matches=st.integers(1, 6),
)
def test_a_segmented_index_is_the_single_index_of_its_documents(docs, split, tail_tokens, context, k, max_matches):
    segmented = SegmentedIndex(SuffixIndex.build(docs[:split]), docs[split : split + 1])
    segmented.TAIL_TOKENS = tail_tokens
    for doc in docs[split + 1 :]:
        segmented.add(doc)
    single = SuffixIndex.build(docs)
    assert segmented.size == single.size
    m, ends = single.longest_match(context, max_matches=max_matches)
    got_m, got_ends = segmented.longest_match(context, max_matches=max_matches)
    assert (got_m, got_ends.tolist()) == (m, ends.tolist())
    assert segmented.propose(context, k, max_matches=max_matches) == single.propose(context, k, max_matches=max_matches)


def test_adds_keep_few_parts():
    segmented = SegmentedIndex()
    segmented.TAIL_TOKENS = 64
    for i in range(200):
        segmented.add([i % 5, 1, 2, 3, 4, 5, 6, 7])
    assert len(segmented.parts) <= 2 + 8  # the base, then parts halving in size
    sizes = [p.size for p in segmented.parts[1:]]
    assert sizes == sorted(sizes, reverse=True)
    assert segmented.propose([4, 1, 2], 1).ids[0] == 3
