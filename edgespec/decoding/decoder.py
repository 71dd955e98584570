"""The speculative decode loop: draft -> verify in one target pass -> accept / roll back.

One round, top to bottom (`_round`):
  1. the policy picks a drafter and K (K = 0: a plain target step), having seen what the free
     drafters (n-gram lookup) propose;
  2. the drafter proposes a tree of up to K tokens after the committed text (`tree.py`; a chain
     is a tree with one branch, and takes the same path);
  3. the target evaluates [pending, d1..dK] in one pass, each token seeing its ancestors, with
     logits at all K+1 positions;
  4. verification accepts a path d1..dn down the tree and adds one target token (a correction, or
     a bonus after a leaf);
  5. the target's cache keeps the committed text and that path, minus the new pending token.

Cache invariant between rounds: the target's cache holds every committed token but the last one
(the "pending" token, whose logits the next pass computes anyway). The draft model syncs its own
cache to (a window of) the committed text at the start of each draft, reading what it missed;
rejected drafts are dropped from it right after verification. The first token comes from the
target's reading of the prompt alone: no drafter reads before it is out.

Under a constraint (`constraint.py`) every row chosen or verified with is masked, drafts are drafted
under the same mask, and the matcher follows the draft and rolls back to the committed text. Drafts
are then chains: a tree's branches would each need the matcher's own state, and the trees' gain on
the machines measured (design.md, "The tree ceiling") does not pay for that yet. Where the
constraint forces the next tokens (its fixed text: a key, a brace), the round takes them as the
start of its draft, at no draft step, and the drafters draft after them for the same pass;
verification keeps them lossless (the target's masked choice may spell the same text otherwise).
"""

from __future__ import annotations

import codecs
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from edgespec.decoding.backend import Backend, ContextOverflow, reused_prefix, sync_cache
from edgespec.decoding.constraint import Constraint, ConstraintDeadEnd, masked, take_forced
from edgespec.decoding.costs.thread_count import ThreadPolicy
from edgespec.decoding.drafters import Draft, Drafter, DrafterKind
from edgespec.decoding.events import Event, Source, Step, Summary, Token
from edgespec.decoding.policy.plan import Plan, Policy, RoundContext
from edgespec.decoding.sampling import (
    SamplingParams,
    choose,
    verify_greedy,
    verify_sampled,
)
from edgespec.decoding.tree import first_branch


class IncrementalText:
    """Token bytes in, text out: holds back a UTF-8 character split across tokens."""

    def __init__(self, backend: Backend):
        self._bytes = backend.token_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token_id: int) -> str:
        return self._utf8.decode(self._bytes(token_id))


def after_forced(forced: list[int], draft: Draft) -> Draft:
    """The chain `forced` then `draft` (a chain: drafts under a constraint are), for one pass. The
    forced tokens are point masses: the only tokens the constraint allows there, accepted whenever
    the target's masked choice spells the text the same way."""
    n = len(forced)
    return Draft(
        forced + draft.ids,
        [*([None] * n), *draft.dists],
        [1.0] * n + draft.confidence,
        draft.match_len,
        draft.catch_up_s,
        draft.catch_up_tokens,
        steps=draft.steps,
    )


@dataclass(slots=True)
class Reply:
    """One reply's state while it is generated, which every round reads and extends: the committed
    text, how tokens are chosen, and the constraint with what it learnt this reply."""

    context: list[int]  # the prompt and the reply so far: each round extends it
    prompt_tokens: int  # where the reply starts in `context`
    params: SamplingParams
    rng: np.random.Generator
    constraint: Constraint | None = None  # the matcher, having consumed the reply so far
    # The forced text's last token is a guess at how the target splits the text's end
    # (`Constraint.forced`); one the target spelled otherwise is added here and not offered again
    # in the reply (a bare space before a value a model writes as ` "`, say).
    refused: set[int] = field(default_factory=set)

    @property
    def emitted(self) -> int:
        return len(self.context) - self.prompt_tokens


class SpeculativeDecoder:
    """Generates from `target`, drafting with any of `drafters` (at most one of each kind) as
    `policy` decides. Every pass's timings go into the policy's cost curve (`policy.costs`),
    whatever the policy, so every policy sharing that curve prices the same current machine.
    `threads`: the CPU thread count's policy, when the models' thread count is chosen per pass
    (None: they keep theirs); it sees every pass's timing too."""

    def __init__(
        self, target: Backend, policy: Policy, drafters: Sequence[Drafter] = (), threads: ThreadPolicy | None = None
    ):
        self.target, self.policy, self.threads = target, policy, threads
        self.drafters = {d.kind: d for d in drafters}

    def generate(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        params: SamplingParams,
        cancel: threading.Event | None = None,
        constraint: Constraint | None = None,
    ) -> Iterator[Event]:
        """Yield Token and Step events, then one Summary. Stops at an end-of-generation token,
        after max_tokens, when the context is full, or when `cancel` is set (checked per pass).
        `constraint`: a fresh matcher the reply must satisfy (it consumes the reply as it is
        committed)."""
        self._check_prompt(prompt)
        reply = Reply(list(prompt), len(prompt), params, np.random.default_rng(params.seed), constraint)
        text = IncrementalText(self.target)
        summary = Summary(prompt_tokens=len(prompt), prompt_cached=reused_prefix(self.target, prompt))
        summary.sampled = not params.greedy
        first = self._first_token(prompt, reply, summary)
        t_decode = time.perf_counter()

        def emit(token_id: int, source: Source) -> Token:
            token = Token(token_id, text.feed(token_id), source)
            summary.add(token)
            return token

        stop = ""
        if first in self.target.eos_ids:
            stop = "eos"
        else:
            yield emit(first, Source.TARGET)
        for drafter in self.drafters.values():
            if self.policy.may_use(drafter.kind):
                drafter.begin(prompt)
        while not stop:
            stop = self._stop_before_round(reply, max_tokens, cancel)
            if stop:
                break
            step, new_ids = self._round(reply, self._room(reply, max_tokens) - 1)
            summary.add(step)
            yield step
            for token_id, source in zip(new_ids, step.sources(), strict=True):
                if token_id in self.target.eos_ids:
                    stop = "eos"
                    break
                yield emit(token_id, source)
                if summary.tokens >= max_tokens:
                    stop = "length"
                    break
        self._finish(summary, reply, stop, t_decode)
        yield summary

    def _check_prompt(self, prompt: Sequence[int]) -> None:
        if not prompt:
            raise ValueError("empty prompt")
        if len(prompt) >= self.target.n_ctx:
            raise ContextOverflow(
                f"the prompt is {len(prompt)} tokens; the context holds {self.target.n_ctx} "
                "(shorten the input or use a pair with a longer context)"
            )

    def _first_token(self, prompt: Sequence[int], reply: Reply, summary: Summary) -> int:
        """The first token, from the target's reading of `prompt` alone: it goes out before any
        drafter is asked to do anything (a draft model reads when it is first used, if ever)."""
        t_start = time.perf_counter()
        if self.threads is not None:  # the prompt is read at the count the machine's load suggests
            self.threads.begin()
        logits = sync_cache(self.target, prompt, 1)[0]
        summary.target_read_s = time.perf_counter() - t_start
        if reply.constraint is not None:
            logits = masked(logits, reply.constraint.allowed())
        first = choose(logits, reply.params, reply.rng)
        if reply.constraint is not None:
            reply.constraint.advance(first)
        summary.ttft_s = time.perf_counter() - t_start
        reply.context.append(first)
        return first

    def _room(self, reply: Reply, max_tokens: int) -> int:
        """Tokens the reply may still add: within max_tokens and the context."""
        return min(max_tokens - reply.emitted, self.target.n_ctx - len(reply.context))

    def _stop_before_round(self, reply: Reply, max_tokens: int, cancel: threading.Event | None) -> str:
        """Why the reply ends before another pass ("": it does not)."""
        if reply.constraint is not None and reply.constraint.done():
            return "eos"  # nothing but the end may follow: no pass is needed to learn it
        if cancel is not None and cancel.is_set():
            return "cancelled"
        if self._room(reply, max_tokens) <= 0:
            return "length" if reply.emitted >= max_tokens else "context"
        return ""

    @staticmethod
    def _finish(summary: Summary, reply: Reply, stop: str, t_decode: float) -> None:
        """The summary's last figures; a constraint that allowed only the end of an incomplete
        reply raises `ConstraintDeadEnd`."""
        summary.decode_s = time.perf_counter() - t_decode
        if reply.constraint is not None:
            summary.constraint_s = reply.constraint.busy_s
            if stop == "eos" and not reply.constraint.accepting():
                raise ConstraintDeadEnd(summary.tokens)
        summary.stop_reason = stop

    def _round(self, reply: Reply, draft_room: int) -> tuple[Step, list[int]]:
        """One draft/verify pass of at most `draft_room` drafted tokens. Extends `reply.context` with the
        accepted tokens and the target's token (and the constraint with them), and returns the Step
        with the new ids in order."""
        t0 = time.perf_counter()
        threads = self.threads.count if self.threads is not None else 0
        drafter, own, plan, forced = self._draft_after_forced(reply, draft_room)
        draft = after_forced(forced, own) if forced else own
        t1 = time.perf_counter()

        n_committed = len(reply.context)  # the target's cache holds n_committed - 1 tokens
        parents, path, next_id, whole_rows = self._verify(reply, draft)
        accepted = len(path)
        if drafter is not None:
            drafter.accept(n_committed + accepted)
        t2 = time.perf_counter()

        if accepted < len(forced):
            reply.refused.add(forced[accepted])
        new_ids = [*(draft.ids[node] for node in path), next_id]
        reply.context.extend(new_ids)
        if reply.constraint is not None:
            for token_id in new_ids:
                reply.constraint.advance(token_id)
        on_path = set(path)
        step = Step(
            drafted=len(draft.ids),
            accepted=accepted,
            drafted_ids=tuple(draft.ids),
            rejected_ids=tuple(t for node, t in enumerate(draft.ids) if node not in on_path),
            draft_s=t1 - t0,
            verify_s=t2 - t1,
            read_s=draft.catch_up_s,
            drafter=drafter.kind if drafter is not None and draft.ids else None,
            controller=plan.state if plan is not None else None,
            parents=tuple(parents),
            path=tuple(path),
            forced=len(forced),
            threads=threads,
        )
        self._learn(step, draft, own, whole_rows)
        return step, new_ids

    def _draft_after_forced(
        self, reply: Reply, draft_room: int
    ) -> tuple[Drafter | None, Draft, Plan | None, list[int]]:
        """The drafter, its draft and the plan (as `_draft`), and the forced text the pass verifies
        before that draft. Where the constraint forces the next tokens, the drafters draft after
        them, for the same pass; the matcher is left where it was."""
        forced: list[int] = []
        if reply.constraint is not None and self.drafters and draft_room > 0:
            forced, _ = take_forced(reply.constraint, draft_room, reply.refused)
        if not forced:
            return (*self._draft(reply, draft_room), forced)
        assert reply.constraint is not None
        drafter, own, plan = None, Draft(), None
        if len(forced) < draft_room:
            drafter, own, plan = self._draft(reply, draft_room - len(forced), forced)
        reply.constraint.rollback(len(forced))
        return drafter, own, plan, forced

    def _verify(self, reply: Reply, draft: Draft) -> tuple[list[int], list[int], int, bool]:
        """Verify `draft` after the committed text in one target pass and keep the accepted path in
        the target's cache: (the draft's parents, the path, the target's token after it, whether
        every row's logits were computed)."""
        parents = draft.parent_list()
        constraint = reply.constraint
        masks = self._row_masks(draft.ids, constraint) if constraint is not None else None
        # a row where the constraint allows one token needs no logits: that token is the choice
        need = None if masks is None else [int(np.count_nonzero(m)) != 1 for m in masks]
        if need is not None and all(need):
            need = None
        logits = self.target.eval_tree(reply.context[-1], draft.ids, parents, need)
        if masks is not None:
            logits = self._masked_rows(logits, masks)
        if reply.params.greedy:
            path, next_id = verify_greedy(logits, draft.ids, parents)
        else:
            path, next_id = verify_sampled(logits, draft.ids, parents, draft.dists, reply.params, reply.rng)
        self.target.keep_path(path)
        return parents, path, next_id, need is None

    def _learn(self, step: Step, draft: Draft, own: Draft, whole_rows: bool) -> None:
        """Feed the pass to the cost curve, the thread count and the policy. `own`: the drafter's
        part of `draft` (after any forced tokens)."""
        # before observe: the policy learns at the new costs; a pass that skipped rows' logits is
        # cheaper than the curve it would be read into (one per tokens verified, every row's logits)
        own_threads = self.threads is None or step.threads == self.threads.most
        self.policy.costs.observe_round(step, draft, whole_rows=whole_rows, own_threads=own_threads)
        if self.threads is not None and whole_rows:  # timings comparable with the verify curve's
            self.threads.observe(step.drafted + 1, step.verify_s)
        if step.accepted >= step.forced:  # else the drafted part was never verified
            self.policy.observe(step, own)

    @staticmethod
    def _row_masks(chain: Sequence[int], constraint: Constraint) -> list[np.ndarray]:
        """The allowed tokens at each row of the verify pass: the constraint's state after the
        committed text and the chain's tokens before the row (every drafted token is allowed where
        it stands: drafts are drafted under the mask). The matcher is left where it was."""
        masks = []
        for token_id in chain:
            masks.append(constraint.allowed())
            constraint.advance(token_id)
        masks.append(constraint.allowed())
        constraint.rollback(len(chain))
        return masks

    @staticmethod
    def _masked_rows(logits: np.ndarray, masks: Sequence[np.ndarray]) -> np.ndarray:
        """The verify pass's rows, each masked by its row's allowed tokens."""
        rows = np.empty_like(logits)
        for i, allowed in enumerate(masks):
            rows[i] = masked(logits[i], allowed)
        return rows

    def _draft(self, reply: Reply, draft_room: int, forced: Sequence[int] = ()) -> tuple[Drafter | None, Draft, Plan]:
        """Ask the free drafters, let the policy plan, and draft: the drafter (None: plain decoding),
        its draft and the plan. `forced`: tokens the pass verifies before this draft (the drafters
        draft after them), which the policy prices the draft with."""
        context = reply.context + list(forced) if forced else reply.context
        params, rng, constraint = reply.params, reply.rng, reply.constraint
        free = {
            kind: d.propose(context, min(draft_room, self.policy.longest_draft), params, rng, constraint=constraint)
            for kind, d in self.drafters.items()
            if d.free and draft_room > 0
        }
        model = self.drafters.get(DrafterKind.MODEL)
        behind = model.behind(context) if model is not None and draft_room > 0 else 0
        emitted = reply.emitted + len(forced)
        plan: Plan = self.policy.plan(
            RoundContext.of(free, self.drafters.keys(), draft_room, context, behind, emitted, len(forced))
        )
        k = max(0, min(plan.draft_len, draft_room))
        drafter = self.drafters.get(plan.drafter) if k and plan.drafter is not None else None
        if drafter is None:
            draft = Draft()
        elif drafter.kind in free:
            proposal = free[drafter.kind]
            keep = plan.nodes if plan.nodes is not None else first_branch(proposal.parent_list())
            draft = proposal.subtree(keep[:k])
        else:
            # k bounds the chain; a tree's alternatives must still fit the budget
            branch = plan.branch if constraint is None else None  # chains under a constraint
            draft = drafter.propose(context, k, params, rng, plan.stop, branch, constraint).head(draft_room)
        return drafter, draft, plan
