"""Draft trees: several candidate continuations, checked by the target in one pass.

A tree is flattened into nodes in drafting order. Node i holds a drafted token and its parent:
`ROOT` (-1) for the root's children, else an earlier node, so parents always come before their
children and any prefix of the node list is itself a tree. The root is the pending token: the last
committed token, whose logits the verify pass computes anyway. A node's children are its siblings
in the order they were drafted, the order sampled verification tries them in.

The target evaluates [pending, node 0, ..., node n-1] in one pass, each token attending to the
committed text and to its own ancestors only; row 0 of the logits predicts the root's children and
row i + 1 node i's. A chain is the tree whose node i has parent i - 1: it is verified, cached and
accounted for by the same code as any other tree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ROOT = -1


def chain(n: int) -> list[int]:
    """The parents of a chain of n nodes."""
    return list(range(-1, n - 1))


def is_chain(parents: Sequence[int]) -> bool:
    return all(p == i - 1 for i, p in enumerate(parents))


def children(parents: Sequence[int]) -> list[list[int]]:
    """Children of each logits row: entry 0 lists the root's children, entry i + 1 node i's, each in
    drafting order."""
    out: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for node, parent in enumerate(parents):
        out[parent + 1].append(node)
    return out


def depths(parents: Sequence[int]) -> list[int]:
    """Depth of each node: 1 for the root's children (the pending token is at depth 0)."""
    out: list[int] = []
    for parent in parents:
        out.append(1 if parent == ROOT else out[parent] + 1)
    return out


def path_to(parents: Sequence[int], node: int) -> list[int]:
    """The nodes from the root's child down to `node` (empty for ROOT)."""
    path = []
    while node != ROOT:
        path.append(node)
        node = parents[node]
    return path[::-1]


def leaves(parents: Sequence[int]) -> list[int]:
    """Nodes without children, in node order: one per branch."""
    has_child = set(parents)
    return [i for i in range(len(parents)) if i not in has_child]


def branches_through(parents: Sequence[int]) -> list[list[int]]:
    """For each node, the branches (indices into `leaves`) that pass through it; the root (pending
    token) is on every branch. A runtime that caches one sequence per branch tags each token with
    these (llama.cpp's seq ids)."""
    ends = leaves(parents)
    out: list[list[int]] = [[] for _ in parents]
    for branch, leaf in enumerate(ends):
        for node in path_to(parents, leaf):
            out[node].append(branch)
    return out


def ancestry(parents: Sequence[int]) -> np.ndarray:
    """Which tokens of the pass each token sees: a boolean (n + 1, n + 1) matrix over [pending,
    nodes...], True where the column is the row itself or one of its ancestors (the tree's causal
    mask)."""
    n = len(parents)
    seen = np.zeros((n + 1, n + 1), dtype=bool)
    seen[0, 0] = True
    for node, parent in enumerate(parents):
        seen[node + 1] = seen[parent + 1]
        seen[node + 1, node + 1] = True
    return seen


def subtree(parents: Sequence[int], keep: Sequence[int]) -> list[int]:
    """The parents of the nodes `keep` (ascending, each one's parent kept too), renumbered."""
    where = {old: new for new, old in enumerate(keep)}
    return [ROOT if parents[old] == ROOT else where[parents[old]] for old in keep]


def first_branch(parents: Sequence[int]) -> list[int]:
    """The nodes reached by always taking the first child from the root: the drafter's own first
    choice at every step (the chain a chain-only drafter would have proposed)."""
    below = children(parents)
    out: list[int] = []
    row = 0
    while below[row]:
        node = below[row][0]
        out.append(node)
        row = node + 1
    return out


def ranks(parents: Sequence[int]) -> list[int]:
    """Each node's place among its siblings (0: its parent's first child)."""
    seen: dict[int, int] = {}
    out = []
    for parent in parents:
        out.append(seen.get(parent, 0))
        seen[parent] = out[-1] + 1
    return out
