"""Drafters: cheap proposals of the next few tokens, for the target to verify in one pass.

Every draft source sits behind the same few calls (`Drafter`, as llama.cpp's common speculative
layer does it), so the decode loop never asks which one it has:
- `begin(prompt)` when a generation starts, once the first token is out (nothing is read then);
- `behind(context)`, the tokens it must read before it can propose (the draft model's catch-up);
- `propose(context, k, params, rng, stop, branch, constraint)` up to k tokens after the committed text;
- `accept(n_committed)` once the target has verified them: forget everything past the committed
  text (the draft model drops rejected tokens from its cache).
A drafter that is `free` costs nothing to ask, so the decoder asks it before planning and the
policy sees its proposal (its length, how far its match reaches) when choosing K.

The kinds, each with the same result type (`Draft`, a tree of tokens; a chain is a tree with one
branch, see `tree.py`):
- `ModelDrafter` (`model_drafter.py`) runs a small model of the same vocabulary, its chain the
  model's first choices, with alternatives beside a token where the policy's `branch` rule says
  they are worth verifying.
- The copying drafters (`copying/`), each free to ask:
  - `NgramDrafter` (prompt lookup, `copying/ngram.py`) copies what followed earlier occurrences of
    the text's last few tokens, every one of them merged into a trie whose first branch is the most
    recent match's copy. How far the match reaches back (`match_len`) tells the controller how much
    of the copy is likely to survive. Under a constraint, at a value's start, its `SourceCopy`
    (`copying/source_copy.py`) proposes the prompt's next word instead.
  - `CorpusDrafter` (`copying/corpus.py`) copies the same way from text other than the call's own:
    earlier replies, history, the repository, the reply a regenerate replaces.

Under a constraint (`constraint.py`) every kind drafts chains only: the draft model drafts under
the constraint's mask, and a copy stops at the first token the constraint forbids (`allowed_chain`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Protocol

import numpy as np

from edgespec.decoding.constraint import Constraint
from edgespec.decoding.sampling import Dist, SamplingParams
from edgespec.decoding.tree import chain, first_branch, subtree

# (tokens drafted so far, confidence of the next) -> stop; asked before every token, the first (0) too
StopRule = Callable[[int, float], bool]
# (drafter probability of an alternative beside the chain token at a position (0 for the first), nodes
# drafted so far) -> add it
BranchRule = Callable[[float, int, int], bool]


class DrafterKind(StrEnum):
    """The kinds of draft source; a policy learns each one's acceptance apart. A StrEnum: shown as its
    value ("ngram") wherever it is formatted, in the stats line and the chat app's."""

    MODEL = "model"
    NGRAM = "ngram"  # copies from the prompt and the reply so far
    RETRY = "retry"  # copies from earlier replies to this prompt, or to a prompt it extends
    HISTORY = "history"  # copies from every earlier call's prompt and reply, across processes
    REPOSITORY = "repository"  # copies from the working repository's files and --context paths
    REPLACED = "replaced"  # copies from the reply this one replaces (a regenerate), as the front end gave it


# The copying drafters: free to ask, each proposal a trie of point masses, scored against the text.
LOOKUPS = frozenset(
    {DrafterKind.NGRAM, DrafterKind.RETRY, DrafterKind.HISTORY, DrafterKind.REPOSITORY, DrafterKind.REPLACED}
)
# Those that copy from text other than the call's own: the front ends colour what they gave apart.
FROM_ELSEWHERE = LOOKUPS - {DrafterKind.NGRAM}


class DraftChoice(str, Enum):
    """The user's choice of drafters (--draft): which kinds a generation may use."""

    AUTO = "auto"  # any, chosen per round
    MODEL = "model"
    NGRAM = "ngram"  # copying only: the text itself, and history, retries and the repository where on
    NONE = "none"  # plain decoding

    @property
    def kinds(self) -> frozenset[DrafterKind]:
        if self is DraftChoice.AUTO:
            return frozenset(DrafterKind)
        if self is DraftChoice.NGRAM:
            return LOOKUPS
        return frozenset() if self is DraftChoice.NONE else frozenset({DrafterKind.MODEL})


@dataclass(slots=True)
class Draft:
    """A proposed tree of tokens (`tree.py`), nodes in drafting order; `dists[i]` is the warped q
    node i was sampled from (None: point mass). `parents` None is a chain, the common case."""

    ids: list[int] = field(default_factory=list)
    dists: list[Dist | None] = field(default_factory=list)
    confidence: list[float] = field(default_factory=list)  # drafter's probability of each token
    match_len: int = 0  # n-gram drafter: length of the matched suffix
    catch_up_s: float = 0.0  # model drafter: seconds spent reading committed text it had not seen
    catch_up_tokens: int = 0  # ... and how many tokens that was
    parents: list[int] | None = None  # each node's parent (tree.ROOT for the root's children)
    steps: int = 0  # model drafter: the tokens it chose, each a draft step (forced tokens cost none)

    def parent_list(self) -> list[int]:
        return chain(len(self.ids)) if self.parents is None else self.parents

    def head(self, k: int) -> Draft:
        """The first k nodes (a tree too: parents come before their children)."""
        return self.subtree(range(min(k, len(self.ids))))

    def first_branch(self) -> Draft:
        """The chain of the drafter's first choices (`tree.first_branch`)."""
        return self if self.parents is None else self.subtree(first_branch(self.parents))

    def add(self, token: int, parent: int, dist: Dist | None, confidence: float) -> int:
        """Append a node under `parent` (ROOT or an earlier node); its index."""
        if self.parents is None:
            self.parents = chain(len(self.ids))
        self.ids.append(token)
        self.parents.append(parent)
        self.dists.append(dist)
        self.confidence.append(confidence)
        return len(self.ids) - 1

    def subtree(self, keep: Sequence[int]) -> Draft:
        """The nodes `keep` (ascending, each with its parent: of a chain, a prefix), renumbered."""
        return Draft(
            [self.ids[i] for i in keep],
            [self.dists[i] for i in keep],
            [self.confidence[i] for i in keep],
            self.match_len,
            self.catch_up_s,
            self.catch_up_tokens,
            None if self.parents is None else subtree(self.parents, keep),
            self.steps,
        )


def allowed_chain(proposal: Draft, constraint: Constraint) -> Draft:
    """A copying drafter's proposal under a constraint: its first branch, up to the first token the
    constraint forbids (a tree's branches would each need the matcher's own state)."""
    chain = proposal.first_branch()
    return chain.head(constraint.allowed_prefix(chain.ids))


class Drafter(Protocol):
    kind: DrafterKind
    free: bool  # proposing costs nothing: the decoder asks before planning, for the policy to see

    def begin(self, prompt: Sequence[int]) -> None:
        """A generation starts after `prompt` (nothing is read yet)."""
        ...

    def behind(self, context: Sequence[int]) -> int:
        """Tokens it must read before it can propose after `context` (a cost the policy weighs)."""
        ...

    def propose(
        self,
        context: Sequence[int],
        k: int,
        params: SamplingParams,
        rng: np.random.Generator,
        stop: StopRule | None = None,
        branch: BranchRule | None = None,
        constraint: Constraint | None = None,
    ) -> Draft:
        """A tree of up to k tokens deep after `context`; `stop(j, confidence)` may end the draft
        before token j+1, `branch(confidence, position, nodes)` adds an alternative beside the chain's
        token at that position. Under `constraint` (its state: after the committed text) a chain of
        allowed tokens, and the constraint is left in that state."""
        ...

    def accept(self, n_committed: int) -> None:
        """The target verified the proposal: the committed text is now `n_committed` tokens long."""
        ...
