#!/usr/bin/env python3
"""Tree headroom: what deeper draft-model trees could gain on a pair, measured before building them.

`auto` drafts trees whose alternatives are leaves (README, "Trees"). Deeper branches mean the
draft model drafting a continuation under each alternative. This script shows what such a tree
could gain at most, from real runs, without writing that code first.

It runs `auto-chain` greedily on each prompt and records every round. Then it evaluates the draft
model over prompt + reply in one teacher-forced pass: at each reply position, the draft's top-2
tokens and its top-1 probability. Where a branch holds the target's own text (it does when it is
accepted), that pass gives the continuation the draft would have drafted.

Each draft-model round is then replayed with one more branch: the draft's second choice at one
chain position, plus L - 1 tokens of its continuation. The branch is accepted when the chain
misses there and the second choice is the target's token, and it adds 1 + the draft's run of
right tokens after it, up to L - 1. Tokens gained are worth the run's own seconds per token.
Extra costs come from the run's calibrated curve: verify(k + 1 + L) - verify(k + 1), plus
(L - 1) draft steps where the continuation is drafted after the chain, not beside it in the same
batch. Rows, each a median over prompts of the speed against the chain run:

  top-2 tree, free     every node of the chain's depth has the draft's top-2 below it, verified
                       and drafted at no cost (no top-2 tree of that depth can do better)
  oracle, free         one branch exactly where the chain misses, at no cost
  oracle, priced       the same, paying only in the rounds that miss, in the batch / after it
  least confident      a branch at the chain token the draft was least sure of, when below
                       --confidence; paid in every such round, as a real tree would be

    .venv/bin/python scripts/tree_headroom.py -m PAIR [--config FILE] [--suites code-edit] [--limit 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgespec.backends.base import Backend  # noqa: E402
from edgespec.bench import DEV_SET, BenchPrompt, generate, load_suite, prompt_ids, select  # noqa: E402
from edgespec.decoding.costs import CostModel  # noqa: E402
from edgespec.decoding.drafters import DrafterKind  # noqa: E402
from edgespec.decoding.plan import KSetting  # noqa: E402
from edgespec.engine import GenerateSettings, find_pair, open_engine  # noqa: E402
from edgespec.errors import EdgespecError, UsageError  # noqa: E402

DEPTHS = (1, 2, 4, 8)
CHUNK = 256  # reply tokens per teacher-forced pass


@dataclass
class Reply:
    """One auto-chain reply and what the draft model would have said at each of its positions."""

    tokens: int
    decode_s: float
    rounds: list[tuple[int, int, int]]  # draft-model rounds: (first reply position, K, accepted)
    top1: list[bool]  # the draft's top-1 is the target's token
    top2: list[bool]  # the draft's second choice is
    confidence: list[float]  # the draft's top-1 probability

    def misses(self) -> list[tuple[int, int]]:
        """(K, the reply position where the chain missed) of each round that missed inside the reply."""
        return [(k, pos + acc) for pos, k, acc in self.rounds if acc < k and pos + acc < self.tokens]

    def run_after(self, q: int) -> int:
        """Right top-1 tokens in a row after position q."""
        r = 0
        while q + 1 + r < self.tokens and self.top1[q + 1 + r]:
            r += 1
        return r

    def branch_gain(self, q: int, depth: int) -> int:
        """Tokens a branch of `depth` at position q adds: the draft's second choice, if it is the
        target's token, then the draft's right top-1 tokens in a row after it, up to depth - 1."""
        return 1 + min(self.run_after(q), depth - 1) if self.top2[q] else 0

    def speed(self, gained: float, extra_s: float) -> float:
        """This reply's speed with `gained` more tokens for `extra_s` more seconds, over the chain's."""
        return self.decode_s / (self.decode_s - gained * self.decode_s / self.tokens + extra_s)


def top2_tree_free(reply: Reply) -> float:
    gained = 0
    for pos, k, accepted in reply.rounds:
        reach = 0
        while reach < k and pos + reach < reply.tokens and (reply.top1[pos + reach] or reply.top2[pos + reach]):
            reach += 1
        gained += reach - min(accepted, reach)
    return reply.speed(gained, 0.0)


def oracle(reply: Reply, depth: int, costs: CostModel | None, batched: bool = True) -> float:
    """One branch of `depth` exactly where the chain misses; `costs` None: free."""
    misses = reply.misses()
    gained = sum(reply.branch_gain(q, depth) for _, q in misses)
    extra = 0.0 if costs is None else sum(_branch_cost(costs, k, depth, batched) for k, _ in misses)
    return reply.speed(gained, extra)


def least_confident(reply: Reply, depth: int, costs: CostModel, below: float, batched: bool = True) -> float:
    """A branch at the chain's least confident token, in every round where that is below `below`."""
    gained, extra = 0, 0.0
    for pos, k, accepted in reply.rounds:
        span = range(pos, min(pos + k, reply.tokens))
        if not span:
            continue
        b = min(span, key=lambda i: reply.confidence[i])
        if reply.confidence[b] >= below:
            continue
        extra += _branch_cost(costs, k, depth, batched)
        if accepted < k and b == pos + accepted:
            gained += reply.branch_gain(b, depth)
    return reply.speed(gained, extra)


def _branch_cost(costs: CostModel, k: int, depth: int, batched: bool) -> float:
    steps = 0.0 if batched else (depth - 1) * (costs.draft_step or 0.0)
    return costs.verify(k + 1 + depth) - costs.verify(k + 1) + steps


def draft_choices(draft: Backend, prompt: Sequence[int], reply: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The draft's top-2 tokens and top-1 probability predicting each reply token, teacher-forced."""
    draft.truncate(0)
    logits = [np.array(draft.eval(list(prompt), 1))]
    for start in range(0, len(reply) - 1, CHUNK):
        chunk = list(reply[start : min(start + CHUNK, len(reply) - 1)])
        logits.append(np.array(draft.eval(chunk, len(chunk))))
    draft.truncate(0)
    z = np.concatenate(logits)
    top = np.argsort(-z, axis=1)[:, :2]
    z = z - z.max(axis=1, keepdims=True)
    return top, 1.0 / np.exp(z).sum(axis=1)


def replay(engine, prompt: BenchPrompt) -> Reply:
    summary, ids, rounds = generate(engine, prompt, GenerateSettings(prompt.max_tokens, k=KSetting("auto-chain")))
    top, p1 = draft_choices(engine.draft, prompt_ids(engine, prompt), ids)
    target = np.array(ids)
    return Reply(len(ids), summary.decode_s,
                 [(r.start, len(r.drafted), len(r.path)) for r in rounds if r.drafter == DrafterKind.MODEL],
                 (top[:, 0] == target).tolist(), (top[:, 1] == target).tolist(), p1.tolist())


def report(replies: list[Reply], costs: CostModel, below: float) -> list[tuple[str, list[float]]]:
    """(row, its median speed at each depth) for the module docstring's rows."""
    def medians(f) -> list[float]:
        return [statistics.median(f(r, depth) for r in replies) for depth in DEPTHS]

    free = statistics.median(top2_tree_free(r) for r in replies)
    return [
        ("top-2 tree as deep as the chain, free", [free]),
        ("oracle branch at the miss, free", medians(lambda r, d: oracle(r, d, None))),
        ("oracle, priced, drafted in the chain's batch", medians(lambda r, d: oracle(r, d, costs))),
        ("oracle, priced, drafted after the chain", medians(lambda r, d: oracle(r, d, costs, batched=False))),
        (f"least confident token (p < {below}), priced, in the batch",
         medians(lambda r, d: least_confident(r, d, costs, below))),
        (f"least confident token (p < {below}), priced, after the chain",
         medians(lambda r, d: least_confident(r, d, costs, below, batched=False))),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--pair", required=True)
    ap.add_argument("--config", type=Path)
    ap.add_argument("--suite", type=Path, default=DEV_SET)
    ap.add_argument("--suites", default="code-edit")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--confidence", type=float, default=0.6)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    try:
        prompts = select(load_suite(args.suite), args.limit, args.suites)
        engine = open_engine(find_pair(args.pair, args.config))
        if engine.draft is None:
            raise UsageError(f"pair {args.pair!r} has no draft model")
        costs = engine.cost_model()
        replies = [replay(engine, p) for p in prompts]
    except EdgespecError as e:  # one line, as edgespec's own commands say it
        print(f"tree_headroom: error: {e}", file=sys.stderr)
        return e.exit_code
    rounds = sum(len(r.rounds) for r in replies)
    missed = [(r, q) for r in replies for _, q in r.misses()]
    rows = report(replies, costs, args.confidence)
    print(f"{args.pair}: {len(replies)} prompts, {sum(r.tokens for r in replies)} tokens; "
          f"verify ms at n = 1..4: {' / '.join(f'{1000 * costs.verify(n):.0f}' for n in range(1, 5))}, "
          f"draft step {1000 * (costs.draft_step or 0):.0f} ms")
    right = sum(r.top2[q] for r, q in missed)
    print(f"draft-model rounds {rounds}, {len(missed)} of them missed inside the reply; "
          f"the draft's 2nd choice was the target's token at {right} of those misses")
    print(f"speed against auto-chain, medians over prompts, depth L = {' / '.join(map(str, DEPTHS))}:")
    for label, values in rows:
        print(f"  {label}: {' / '.join(f'{v:.3f}x' for v in values)}")
    if args.json:
        args.json.write_text(json.dumps({"pair": args.pair, "depths": DEPTHS, "rows": dict(rows),
                                         "rounds": rounds, "missed": len(missed),
                                         "second_choice_right": right}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
