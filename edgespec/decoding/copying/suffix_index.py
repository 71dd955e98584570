"""Suffix lookup over everything said before: where the text's last tokens occurred in earlier
prompts and replies, and what followed them (SuffixDecoding, Oliaro et al. 2024, arXiv 2411.04975).

The n-gram drafter (`ngram.py`) copies from the current generation's own text. This index
asks the same question of a corpus of millions of tokens (every prompt and reply kept on disk,
`engine/reply_history.py`), where a regenerated answer, an agent's retry or a request the user
makes every day finds what was written the last times.

Layout. The corpus `tokens` (T) is one int32 array of documents, each between two SEPs (-1):
T = SEP d0 SEP d1 SEP ... SEP. A context token is never SEP, so no match crosses a document. The
suffix array `sa` is that of the REVERSED corpus R = T[::-1]: the context's suffix read backwards
(ctx[-1], ctx[-2], ...) is a pattern that grows at its end, so each further matched token narrows
the previous range of `sa` by binary search instead of searching again, and a table of where each
token's range starts makes the first step one read. A pattern found at R position r ends (its
token ctx[-1]) at T position e = n - 1 - r, and what followed it there is T[e + 1:] up to the next
SEP. Documents are numbered by position: a larger e is a more recent occurrence.

A proposal is a trie of the continuations after the occurrences of the longest match, scored by
frequency: a node's confidence is the share of its parent's occurrences that go through it, the
nodes are taken best first (the most occurrences; on a tie, the most recent), so siblings come most
frequent first and the first branch is the most frequent path.

`SegmentedIndex` is one large index (built once, kept on disk and memory-mapped) plus small ones
sorted again as documents arrive: lookups ask every part and keep the longest match.
"""

from __future__ import annotations

import ctypes
import functools
import heapq
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pydivsufsort

from edgespec.decoding.drafters import Draft
from edgespec.decoding.tree import ROOT

SEP = -1
_SEP = np.array([SEP], dtype=np.int32)
_NONE = np.zeros(0, dtype=np.int64)
Tokens = Sequence[int] | np.ndarray  # a document or a context: token ids >= 0


class SuffixIndex:
    """A read-only index over a corpus of token-id documents (the module's docstring: layout)."""

    MAX_MATCH = 32  # tokens of the context matched at most: longer matches do not predict better
    MAX_MATCHES = 256  # occurrences a proposal is built from, the most recent
    MAX_NODES = 48  # the most nodes a proposal holds
    # A range of `sa` at most this long is matched in one vectorized step rather than by binary
    # search; a read of a longer one (a match found everywhere: one token, a common pair) reads this
    # many occurrences, evenly spread over it, a uniform sample of what followed.
    _NARROW = 256
    _SCAN = 8192

    def __init__(self, tokens: np.ndarray, sa: np.ndarray):
        """`tokens`: the corpus T (int32, SEP first and last); `sa`: the suffix array of T[::-1]
        (int32). Either may be a read-only memory map (np.load(mmap_mode="r")); nothing is copied.
        Raises ValueError when they cannot be an index (a damaged file), which a lookup would
        otherwise read out of bounds."""
        # np.asarray: a memmap's own item access is three times slower than an array's
        self.tokens, self.sa = np.asarray(tokens), np.asarray(sa)
        n = len(self.tokens)
        if not (
            self.tokens.ndim == self.sa.ndim == 1
            and self.tokens.dtype == self.sa.dtype == np.int32
            and n == len(self.sa)
            and n >= 1
            and self.tokens[0] == self.tokens[-1] == SEP
        ):
            raise ValueError("not a suffix index: shapes, types or separators")
        if self.sa.min() < 0 or self.sa.max() >= n or self.tokens.min() < SEP:
            raise ValueError("not a suffix index: values out of range")
        # token t's suffixes (R's suffixes starting with t) are sa[_starts[t + 1] : _starts[t + 2]]
        self._starts = np.concatenate(([0], np.cumsum(np.bincount(self.tokens + 1))))
        # the binary search reads items one at a time; a memoryview gives Python ints, faster there
        self._t, self._s = self.tokens.data, self.sa.data

    @classmethod
    def build(cls, docs: Iterable[Tokens]) -> SuffixIndex:
        """An index over `docs` (token ids >= 0; empty ones are left out), in order: later
        documents are the more recent."""
        return cls.of_corpus(np.concatenate([_SEP, *_pieces(docs)]))

    @classmethod
    def of_corpus(cls, tokens: np.ndarray) -> SuffixIndex:
        """An index over a corpus already laid out (SEP first and last), sorted here."""
        tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        if tokens.min(initial=0) < SEP:
            raise ValueError("token ids must be >= 0")
        return cls(tokens, _suffix_array(tokens[::-1]))

    def extended(self, docs: Iterable[Tokens]) -> SuffixIndex:
        """A new index over this corpus and then `docs`."""
        return SuffixIndex.of_corpus(np.concatenate([self.tokens, *_pieces(docs)]))

    @property
    def size(self) -> int:
        """Tokens of the corpus, separators included."""
        return len(self.tokens)

    def longest_match(
        self, context: Tokens, max_match: int = MAX_MATCH, max_matches: int = MAX_MATCHES
    ) -> tuple[int, np.ndarray]:
        """The longest suffix of `context` (up to `max_match` tokens) that occurs in the corpus with
        at least one more token of its document after it: (its length, the T positions of its last
        token in up to `max_matches` occurrences, most recent first). (0, empty) when none does."""
        pattern = [int(t) for t in context[len(context) - min(max_match, len(context)) :][::-1]]
        if not pattern or not 0 <= pattern[0] < len(self._starts) - 2:
            return 0, _NONE
        lo, hi = int(self._starts[pattern[0] + 1]), int(self._starts[pattern[0] + 2])
        if lo == hi:
            return 0, _NONE
        ranges = [(lo, hi)]  # ranges[j - 1]: the range of `sa` whose suffixes start with pattern[:j]
        while len(ranges) < len(pattern) and hi - lo > self._NARROW:
            lo, hi = self._narrow(lo, hi, len(ranges), pattern[len(ranges)])
            if lo == hi:
                break
            ranges.append((lo, hi))
        lo, hi = ranges[-1]
        if hi - lo <= self._NARROW:  # a short range: every row's whole match length at once
            rows = self.sa[lo:hi].astype(np.int64)
            length = self._match_lengths(rows, pattern, len(ranges))
            going_on = self._continues(rows)
            if going_on.any():
                best = int(length[going_on].max())
                return best, self._recent(rows[going_on & (length >= best)], max_matches)
            ranges.pop()
        # Left: a range too long to read whole (where narrowing stopped), or a short one whose
        # occurrences all ended their document. The longest match that goes on is then the first
        # range, from the longest, with an occurrence that goes on (outside the longer ranges, whose
        # occurrences did not, every occurrence of range j matches exactly j tokens).
        for j in range(len(ranges), 0, -1):
            lo, hi = ranges[j - 1]
            rows = (
                self.sa[lo:hi]
                if hi - lo <= self._SCAN
                else self.sa[lo + np.arange(self._SCAN) * (hi - lo) // self._SCAN]
            )
            rows = rows.astype(np.int64)
            going_on = self._continues(rows)
            if going_on.any():
                return j, self._recent(rows[going_on], max_matches)
        return 0, _NONE

    def continuations(self, ends: np.ndarray, k: int) -> list[list[int]]:
        """What followed each end position: up to k tokens, cut at its document's end."""
        if not len(ends) or k <= 0:
            return [[] for _ in ends]
        at = np.minimum(ends[:, None] + np.arange(1, k + 1), len(self.tokens) - 1)  # T ends with SEP
        return [row[: row.index(SEP)] if SEP in row else row for row in self.tokens[at].tolist()]

    def propose(
        self,
        context: Tokens,
        k: int,
        max_nodes: int = MAX_NODES,
        max_matches: int = MAX_MATCHES,
        max_match: int = MAX_MATCH,
    ) -> Draft:
        """A frequency-scored trie (module docstring) of up to `max_nodes` nodes, k deep, of what
        followed the longest match; its `match_len` is the match's length. Empty when none."""
        length, ends = self.longest_match(context, max_match, max_matches)
        if not length:
            return Draft()
        return frequency_tree(self.continuations(ends, k), length, max_nodes)

    def _narrow(self, lo: int, hi: int, j: int, token: int) -> tuple[int, int]:
        """The part of sa[lo:hi] (suffixes sharing their first j tokens) whose token j is `token`.
        Those tokens are sorted within the range; a suffix's token j is T[last - sa[i] - j]."""
        t, s, last = self._t, self._s, len(self.tokens) - 1
        a, b = lo, hi
        while a < b:
            mid = (a + b) // 2
            if t[last - s[mid] - j] < token:
                a = mid + 1
            else:
                b = mid
        first, b = a, hi
        while a < b:
            mid = (a + b) // 2
            if t[last - s[mid] - j] <= token:
                a = mid + 1
            else:
                b = mid
        return first, a

    def _match_lengths(self, rows: np.ndarray, pattern: list[int], matched: int) -> np.ndarray:
        """How many tokens of `pattern` each suffix starting at R position `rows` matches, knowing
        that the first `matched` do."""
        width = len(pattern) - matched
        if not width:
            return np.full(len(rows), matched)
        # T index of R position p is last - p; past R's end (a SEP) reads T[0], a SEP too: a mismatch
        at = np.maximum(len(self.tokens) - 1 - rows[:, None] - np.arange(matched, len(pattern)), 0)
        same = self.tokens[at] == np.asarray(pattern[matched:])
        return matched + np.where(same.all(axis=1), width, same.argmin(axis=1))

    def _continues(self, rows: np.ndarray) -> np.ndarray:
        """Whether the occurrence at each R position has a token of its document after it: T[e + 1],
        with e = n - 1 - r (r >= 1: R[0] is a SEP, never the start of a match)."""
        return self.tokens[len(self.tokens) - rows] != SEP

    def _recent(self, rows: np.ndarray, most: int) -> np.ndarray:
        """The T end positions of the `most` most recent of the occurrences at R positions `rows`."""
        ends = len(self.tokens) - 1 - rows
        if len(ends) > most:
            ends = np.partition(ends, len(ends) - most)[len(ends) - most :]
        return np.sort(ends)[::-1]


class SegmentedIndex:
    """Several indexes asked as one: `base`, built once (kept on disk, memory-mapped), then smaller
    parts of the documents added since, the last of them sorted again at each `add`.

    The corpus it stands for is the parts' corpora joined in order (each part's leading SEP dropped
    after the first), the corpus `SuffixIndex.build` would make of all the documents; positions
    (`longest_match`'s ends) are in it, and lookups give what that single index gives: the longest
    match among the parts, the continuations of the parts that match that long merged, most recent
    first.

    Cost of an add: the last part is sorted again while it is under TAIL_TOKENS (at 16k tokens, 2
    ms), else a new part starts; a part at least as large as the one before is merged into it, so
    the parts after the base halve in size from the oldest, a long-running process keeps
    O(log(tokens added)) of them, and each token is sorted O(log) times. The base is never merged
    into: whoever keeps it on disk rebuilds it (`ReplyHistory` does on opening)."""

    TAIL_TOKENS = 16_384

    def __init__(self, base: SuffixIndex | None = None, docs: Iterable[Tokens] = ()):
        """`base` (default: empty), then one part of `docs` when there are any."""
        self.parts = [base if base is not None else SuffixIndex.build(())]
        recent = SuffixIndex.build(docs)
        if recent.size > 1:
            self.parts.append(recent)

    @property
    def size(self) -> int:
        """Tokens of the joined corpus, separators included."""
        return sum(part.size for part in self.parts) - len(self.parts) + 1

    def add(self, doc: Tokens) -> None:
        """Index one more document (the most recent)."""
        if not len(doc):
            return
        last = self.parts[-1]
        if len(self.parts) > 1 and last.size < self.TAIL_TOKENS:
            self.parts[-1] = last.extended([doc])
        else:
            self.parts.append(SuffixIndex.build([doc]))
        while len(self.parts) > 2 and self.parts[-1].size >= self.parts[-2].size:
            newer = self.parts.pop()
            self.parts[-1] = SuffixIndex.of_corpus(np.concatenate([self.parts[-1].tokens, newer.tokens[1:]]))

    def longest_match(
        self,
        context: Tokens,
        max_match: int = SuffixIndex.MAX_MATCH,
        max_matches: int = SuffixIndex.MAX_MATCHES,
    ) -> tuple[int, np.ndarray]:
        """`SuffixIndex.longest_match` over the joined corpus."""
        length, found = self._matches(context, max_match, max_matches)
        return length, np.concatenate([ends + offset for _, ends, offset in found]) if found else _NONE

    def propose(
        self,
        context: Tokens,
        k: int,
        max_nodes: int = SuffixIndex.MAX_NODES,
        max_matches: int = SuffixIndex.MAX_MATCHES,
        max_match: int = SuffixIndex.MAX_MATCH,
    ) -> Draft:
        """`SuffixIndex.propose` over the joined corpus."""
        length, found = self._matches(context, max_match, max_matches)
        if not length:
            return Draft()
        return frequency_tree([c for part, ends, _ in found for c in part.continuations(ends, k)], length, max_nodes)

    def _matches(
        self, context: Tokens, max_match: int, max_matches: int
    ) -> tuple[int, list[tuple[SuffixIndex, np.ndarray, int]]]:
        """The longest match among the parts, and (part, its ends, the part's offset in the joined
        corpus) for the parts that match that long, newest part first, up to `max_matches` ends in
        all: a newer part's occurrences are all more recent than an older one's."""
        best, offset = 0, 0
        found: list[tuple[SuffixIndex, np.ndarray, int]] = []
        for part in self.parts:
            length, ends = part.longest_match(context, max_match, max_matches)
            if length > best:
                best, found = length, []
            if length == best and length:
                found.append((part, ends, offset))
            offset += part.size - 1
        kept, room = [], max_matches
        for part, ends, offset in reversed(found):
            if room <= 0:
                break
            kept.append((part, ends[:room], offset))
            room -= len(ends[:room])
        return best, kept


def frequency_tree(continuations: list[list[int]], match_len: int, max_nodes: int) -> Draft:
    """The trie of `continuations` (most recent first), nodes taken best first: the most
    occurrences through them, then the most recent; a node's confidence is its occurrences over its
    parent's. Parents come before their children, siblings most frequent first, so the first branch
    is the most frequent path; at most `max_nodes` nodes."""
    out = Draft(match_len=match_len, parents=[])
    # (-occurrences, first row through it, parent node, token, rows through it, depth, parent's
    # occurrences): a row goes through one node per depth, so two entries in the heap at once never
    # share a first row (a node's children enter only once it has left): the key is unique
    heap: list[tuple[int, int, int, int, list[int], int, int]] = []

    def push_children(node: int, rows: list[int], depth: int) -> None:
        below: dict[int, list[int]] = {}
        for row in rows:
            if len(continuations[row]) > depth:
                below.setdefault(continuations[row][depth], []).append(row)
        for token, through in below.items():
            heapq.heappush(heap, (-len(through), through[0], node, token, through, depth + 1, len(rows)))

    push_children(ROOT, list(range(len(continuations))), 0)
    while heap and len(out.ids) < max_nodes:
        count, _, parent, token, rows, depth, parent_count = heapq.heappop(heap)
        push_children(out.add(token, parent, None, -count / parent_count), rows, depth)
    return out


def _pieces(docs: Iterable[Tokens]) -> list[np.ndarray]:
    """Each non-empty document followed by a SEP, as arrays to join."""
    out = []
    for doc in docs:
        if len(doc):
            out += [np.asarray(doc, dtype=np.int32), _SEP]
    return out


def _suffix_array(text: np.ndarray) -> np.ndarray:
    """The suffix array of `text` (int32). pydivsufsort sorts the bytes of each value's narrowest
    big-endian form, so ids are first replaced by their rank among the ids present (same order):
    under 65,536 distinct ids (a corpus of a few million tokens of one tokenizer) that is 2 bytes a
    token, not the 4 a 152k vocabulary takes, and half the work."""
    present = np.bincount(text - SEP) > 0
    rank = (np.cumsum(present) - 1).astype(np.int32)
    _sort_threads(1 if len(text) < _PARALLEL_SORT else os.cpu_count() or 1)
    return np.asarray(pydivsufsort.divsufsort(rank[text - SEP]), dtype=np.int32)


# Texts shorter than this are sorted on one thread. libdivsufsort's OpenMP threads cost a fixed time
# per call on a 2-core machine whose other core is busy (where the models run), many times a small
# tail's sort; one thread also sorted texts of this size faster there, two sorted much larger ones
# faster (timed when the bound was set; no result file keeps those timings).
_PARALLEL_SORT = 1 << 20


def _sort_threads(n: int) -> None:
    """Set libdivsufsort's thread count for the calling thread (OpenMP's setting is per thread, so
    it is set before every sort). The wheel bundles its own OpenMP runtime: the models' threads are
    left alone."""
    runtime = _sort_runtime()
    if runtime is not None:
        runtime.omp_set_num_threads(n)


@functools.cache
def _sort_runtime() -> ctypes.CDLL | None:
    """The OpenMP runtime bundled with pydivsufsort's wheel (Linux, macOS), None in a build without."""
    root = Path(pydivsufsort.__file__).parent
    for lib in [*root.parent.glob("pydivsufsort.libs/libgomp*"), *root.glob(".dylibs/libomp*")]:
        return ctypes.CDLL(str(lib))
    return None
