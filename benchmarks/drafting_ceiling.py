"""The most any drafter could gain on this machine: drafts that are the target's own reply.

A bench suite's prompts run plain (`ar`), with `auto`, with a drafter that proposes the target's
greedy reply from wherever the text has got to (`ceiling`: every draft is accepted), and with the
text's own copies cut where the reply parts from them (`copies`: prompt lookup that knows how far
the target will take each copy), all priced and chosen by the same cost-aware controller on the
same measured verify curve, under each prompt's constraint, in interleaved rounds. What `auto`
gains is bounded by both: the gap to `copies` is what a better choice of draft length could still
win from the copies the text offers, the gap to `ceiling` what better drafts could, and the
ceiling itself is what the verify curve and the time to first token leave.

    .venv/bin/python benchmarks/drafting_ceiling.py --suite suites/structured.jsonl \\
        --suite suites/structured-heldout.jsonl --json benchmarks/results/drafting_ceiling.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from edgespec.bench import modes, report, suites
from edgespec.decoding.decoder import SpeculativeDecoder
from edgespec.decoding.drafters import Draft, DraftChoice, DrafterKind
from edgespec.decoding.events import Summary, Token
from edgespec.decoding.ngram_drafter import NgramDrafter
from edgespec.decoding.policy.controller import make_policy
from edgespec.decoding.policy.plan import KSetting
from edgespec.decoding.sampling import SamplingParams
from edgespec.decoding.tree import children
from edgespec.engine.engine import GenerateSettings
from edgespec.engine.options import EngineOptions
from edgespec.util.provenance import provenance

CEILING = "ceiling"
COPIES = "copies"


class ReplyDrafter:
    """A free drafter whose proposal is the known reply's next tokens: a copy with the longest match
    the controller knows, so it learns at once that these copies survive. Once the text has parted
    from the reply (a near-tie that a long pass reads otherwise than plain decoding did) it
    proposes nothing: it knows no more than that."""

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


ORACLES = {CEILING: ReplyDrafter, COPIES: CopyOracle}


def run(engine, prompt: suites.BenchPrompt, mode: str, reply: list[int] | None, policy) -> dict:
    """One cold generation of `prompt` in `mode` (ar, auto, or the drafts `ORACLES[mode]` makes of
    `reply`)."""
    ids = modes.prompt_ids(engine, prompt)
    engine.empty_caches()
    if mode in ORACLES:
        assert reply is not None
        constraint = engine.constraint(prompt.constraint) if prompt.constraint is not None else None
        decoder = SpeculativeDecoder(engine.target, policy, [ORACLES[mode](len(ids), reply)])
        events = decoder.generate(ids, prompt.max_tokens, SamplingParams(), None, constraint)
    else:
        (m,) = [m for m in modes.parse_modes(mode, DraftChoice.NGRAM) if m.name == mode]
        events = engine.generate_tokens(
            ids, GenerateSettings(prompt.max_tokens, SamplingParams(), m.draft, m.k, prompt.constraint)
        )
    tokens, summary = [], None
    for e in events:
        if isinstance(e, Token):
            tokens.append(e.id)
        elif isinstance(e, Summary):
            summary = e
    assert summary is not None
    return {
        "id": prompt.id,
        "suite": prompt.suite,
        "mode": mode,
        "tokens": tokens,
        "ttft_s": summary.ttft_s,
        "decode_s": summary.decode_s,
        "target_passes": summary.target_passes,
    }


def summarise(rows: list[dict]) -> list[dict]:
    """Per suite and mode, the median over prompts of the mode's speed over ar's (each prompt's
    speed the median of its repeats), in tokens a second as `edgespec bench` reckons them: of the
    whole reply (TTFT included) and of decoding alone; and how many replies were ar's exactly (a
    near-tie the batched pass reads otherwise may part from it, still the target's own reply)."""
    out = []
    ar_tokens = {r["id"]: r["tokens"] for r in rows if r["mode"] == "ar"}
    for suite in dict.fromkeys(r["suite"] for r in rows):
        mine = [r for r in rows if r["suite"] == suite]
        speed = {}  # (id, mode) -> (whole, decode) tokens/s
        for key in dict.fromkeys((r["id"], r["mode"]) for r in mine):
            runs = [r for r in mine if (r["id"], r["mode"]) == key]
            whole = statistics.median(len(r["tokens"]) / (r["ttft_s"] + r["decode_s"]) for r in runs)
            speed[key] = whole, statistics.median(len(r["tokens"]) / r["decode_s"] for r in runs)
        ids = list(dict.fromkeys(r["id"] for r in mine))
        for mode in [m for m in ("auto", *ORACLES) if any(r["mode"] == m for r in mine)]:
            replies = [r for r in mine if r["mode"] == mode]
            out.append(
                {
                    "suite": suite,
                    "mode": mode,
                    "prompts": len(ids),
                    "whole_vs_ar": statistics.median(speed[i, mode][0] / speed[i, "ar"][0] for i in ids),
                    "decode_vs_ar": statistics.median(speed[i, mode][1] / speed[i, "ar"][1] for i in ids),
                    "exact": sum(r["tokens"] == ar_tokens[r["id"]] for r in replies),
                    "replies": len(replies),
                }
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, action="append", required=True, help="a bench suite (repeatable)")
    ap.add_argument("--suites", default=None, help="only these suites of the files (comma-separated)")
    ap.add_argument("--limit", type=int, default=None, help="the first N prompts of each suite")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--pair", default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    engine, _ = EngineOptions(pair=args.pair).check().open()
    policy = make_policy(KSetting("auto"), DraftChoice.NGRAM, engine.costs)  # kept across prompts, as auto's is
    rows: list[dict] = []
    order = ["ar", "auto", *ORACLES]
    prompts = suites.select([p for path in args.suite for p in suites.load_suite(path)], args.limit, args.suites)
    for repeat in range(args.repeats):
        for prompt in prompts:
            reply = next((r["tokens"] for r in rows if (r["id"], r["mode"]) == (prompt.id, "ar")), None)
            turn = repeat % len(order)
            for mode in order if reply is None else order[turn:] + order[:turn]:
                row = run(engine, prompt, mode, reply, policy)
                reply = reply or row["tokens"]
                rows.append({**row, "repeat": repeat})
                print(f"{prompt.id} {mode} ttft {row['ttft_s']:.2f} s decode {row['decode_s']:.2f} s", file=sys.stderr)
    engine.close()
    summary = summarise(rows)
    for s in summary:
        print(
            f"{s['suite']} {s['mode']:8} whole {s['whole_vs_ar']:.2f}x decode {s['decode_vs_ar']:.2f}x, "
            f"{s['exact']}/{s['replies']} replies = ar's"
        )
    if args.json:
        meta = {**provenance(), "verify_ms": {engine.pair.name: report.verify_ms(engine.costs.quiet_curve())}}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "rows": rows, "summary": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
