"""The drafting ceiling's oracles (benchmarks/drafting_ceiling.py): drafters that know the reply.

Each oracle drafts from a copy source, a reply it is given. A reply the oracle's own passes read
otherwise than its source (a near-tie that a pass of another length breaks the other way) parts from
the source, and past the parting the oracle knows nothing. So an oracle is run again with its own
reply as the source (`iterate`) until its reply repeats: the run that counts then drafted its own
reply throughout, never another mode's.

- `ceiling` (`ReplyDrafter` under `auto`'s controller): drafts the reply's next tokens; the
  controller chooses K as it does for a copy it trusts, within auto's caps (LONGEST_COPY, and the
  passes its curve has timed).
- `copies` (`CopyOracle` under `auto`'s controller): prompt lookup's proposal cut where the reply
  parts from it: the copies the text offers, with where each ends known.
- `perfect-length` (`ReplyDrafter` under `LongestRun`): no controller and no cap: each pass drafts
  all of the reply that is left, up to the longest pass the backend verifies (LONGEST_PASS), so
  every pass is taken whole and the reply takes the fewest passes there are (`ideal_passes`).

`faults` says what a row of an oracle's run shows went wrong: a reply that never repeated, or a
perfect-length run with more passes than the ideal (a draft that was cut short or not taken whole).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from edgespec.decoding.copying.ngram import NgramDrafter
from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.drafters import Draft, DrafterKind
from edgespec.decoding.events import Step
from edgespec.decoding.policy.plan import Plan, RoundContext
from edgespec.decoding.tree import children, first_branch

CEILING = "ceiling"
COPIES = "copies"
PERFECT = "perfect-length"

# The most tokens one pass may draft: llama.cpp's batch (512 tokens, `backends/llamacpp.py`) less
# the pending token every pass reads first.
LONGEST_PASS = 511
MAX_ITERATIONS = 4  # runs of an oracle before a reply that keeps changing is given up on (`iterate`)


class ReplyDrafter:
    """A free drafter whose proposal is the known reply's next tokens: a copy with the longest match
    the controller knows, so it learns at once that these copies survive. Once the text has parted
    from the reply it proposes nothing: it knows no more than that (`iterate` runs it again with
    the reply it parted into)."""

    kind = DrafterKind.NGRAM
    free = True

    def __init__(self, prompt_len: int, reply: Sequence[int]):
        self.prompt_len, self.reply = prompt_len, list(reply)

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def behind(self, context: Sequence[int]) -> int:
        return 0

    def accept(self, n_committed: int) -> None:
        pass

    def propose(self, context: Sequence[int], k: int, *args, **kwargs) -> Draft:
        return _sure(self._ahead(context, k))

    def _ahead(self, context: Sequence[int], k: int) -> list[int]:
        """The reply's next k tokens after the text, none once the text has parted from it."""
        written = list(context[self.prompt_len :])
        if self.reply[: len(written)] != written:
            return []
        return self.reply[len(written) : len(written) + k]


class CopyOracle(ReplyDrafter):
    """Prompt lookup's proposal (`NgramDrafter`: the trie of what followed earlier occurrences of the
    text's suffix), cut to the branch the reply takes and where the reply parts from it: the copies
    the text offers, with the draft length a perfect controller would know."""

    def __init__(self, prompt_len: int, reply: Sequence[int]):
        super().__init__(prompt_len, reply)
        self.lookup = NgramDrafter()

    def propose(self, context: Sequence[int], k: int, *args, constraint=None, **kwargs) -> Draft:
        ahead = self._ahead(context, k)
        trie = self.lookup.propose(context, k, constraint=constraint) if ahead else Draft()
        below, row, taken = children(trie.parent_list()), 0, 0
        while taken < len(ahead):
            row = next((node + 1 for node in below[row] if trie.ids[node] == ahead[taken]), 0)
            if not row:
                break
            taken += 1
        return _sure(ahead[:taken])


def _sure(ids: list[int]) -> Draft:
    """A chain the controller takes for a copy that always survives (the longest match it knows)."""
    return Draft(ids, [None] * len(ids), [1.0] * len(ids), match_len=NgramDrafter.MAX_MATCH)


class LongestRun:
    """A policy with a fixed plan and no controller: every pass drafts the whole of the copying
    drafter's proposal, as far as the reply's room and `longest` tokens (forced text included)
    allow. The decoder bounds proposals by a policy's own `longest_draft` alone; auto's caps are its
    controller's, so this policy's passes run as long as the backend verifies.

    Its timings go to a curve of its own (`costs`), not the engine's: passes hundreds of tokens
    long are this harness's, and must not reach the curve the engine saves for `auto`."""

    def __init__(self, longest: int = LONGEST_PASS):
        self.longest_draft = longest
        self.costs = CostModel()

    def plan(self, ctx: RoundContext) -> Plan:
        proposal = ctx.ngram if ctx.ngram is not None else Draft()
        k = max(0, min(len(first_branch(proposal.parent_list())), ctx.draft_room, self.longest_draft - ctx.forced))
        return Plan(DrafterKind.NGRAM if k else None, k)

    def observe(self, step: Step, draft: Draft) -> None:
        pass

    def may_use(self, kind: DrafterKind) -> bool:
        return kind == DrafterKind.NGRAM


def ideal_passes(passes: Sequence[tuple[int, int, int]], longest: int = LONGEST_PASS) -> int:
    """The passes a reply takes when no draft is ever cut short or refused: `passes` are the run's
    (drafted, accepted, forced) per pass; every pass then gives `longest` + 1 tokens (its draft and
    the target's own token after it) but the last, which gives what is left. A pass where the
    target spelled a constraint's forced text otherwise than the constraint guessed (it took fewer
    tokens than were forced) ends where the decoder, not the oracle, cut it: the reply's stretches
    between such passes are each counted so."""
    stretches, given = 0, 0
    for _, accepted, forced in passes:
        given += accepted + 1
        if accepted < forced:
            stretches, given = stretches + -(-given // (longest + 1)), 0
    return stretches + -(-given // (longest + 1))


def iterate(run: Callable[[list[int]], dict], source: list[int], most: int = MAX_ITERATIONS) -> dict:
    """Run an oracle (`run(source)`: a result row whose "tokens" are its reply) with `source` as its
    copy source, then with each run's own reply, until a reply repeats its source or `most` runs
    have been made: the last run's row, with how many runs it took ("iterations") and whether its
    reply was its source ("converged")."""
    for iteration in range(1, most + 1):
        row = run(source)
        if row["tokens"] == source:
            return {**row, "iterations": iteration, "converged": True}
        source = row["tokens"]
    return {**row, "iterations": most, "converged": False}


def faults(row: dict) -> list[str]:
    """What an oracle's row shows went wrong (none: it drafted its own reply as it should)."""
    found = []
    if row.get("converged") is False:
        found.append(f"its reply still changed after {row['iterations']} runs")
    if row.get("ideal_passes") is not None and row["target_passes"] != row["ideal_passes"]:
        found.append(f"{row['target_passes']} passes where drafts taken whole need {row['ideal_passes']}")
    return found
