"""The most any drafter could gain on this machine: drafts that are the target's own reply.

A bench suite's prompts run plain (`ar`), with `auto`, and with a drafter that proposes the target's
greedy reply from wherever the text has got to (every draft is accepted), priced and chosen by the
same cost-aware controller on the same measured verify curve, under each prompt's constraint, in
interleaved rounds. What `auto` gains is bounded by this ceiling; the gap between them is what
better drafts could still win, and the ceiling itself is what the verify curve and the time to
first token leave.

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
from edgespec.engine.engine import GenerateSettings
from edgespec.engine.options import EngineOptions
from edgespec.util.provenance import provenance

CEILING = "ceiling"


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
        written = list(context[self.prompt_len :])
        if self.reply[: len(written)] != written:
            return Draft()
        ids = self.reply[len(written) : len(written) + k]
        return Draft(ids, [None] * len(ids), [1.0] * len(ids), match_len=NgramDrafter.MAX_MATCH)


def run(engine, prompt: suites.BenchPrompt, mode: str, reply: list[int] | None, policy) -> dict:
    """One cold generation of `prompt` in `mode` (ar, auto, or the ceiling's drafts of `reply`)."""
    ids = modes.prompt_ids(engine, prompt)
    engine.empty_caches()
    if mode == CEILING:
        assert reply is not None
        constraint = engine.constraint(prompt.constraint) if prompt.constraint is not None else None
        decoder = SpeculativeDecoder(engine.target, policy, [ReplyDrafter(len(ids), reply)])
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
        for mode in ("auto", CEILING):
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
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--pair", default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    engine, _ = EngineOptions(pair=args.pair).check().open()
    policy = make_policy(KSetting("auto"), DraftChoice.NGRAM, engine.costs)  # kept across prompts, as auto's is
    rows: list[dict] = []
    order = ["ar", "auto", CEILING]
    for repeat in range(args.repeats):
        for prompt in [p for path in args.suite for p in suites.load_suite(path)]:
            reply = next((r["tokens"] for r in rows if (r["id"], r["mode"]) == (prompt.id, "ar")), None)
            for mode in order if reply is None else order[repeat % 3 :] + order[: repeat % 3]:
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
