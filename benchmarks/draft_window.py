"""How much of the prompt the draft model needs to read: its agreement with the target by window.

The draft model reads only the last `window` tokens of a prompt (a pair's `draft_window`), so a long
file costs it a bounded read before it can draft. What that costs in acceptance is measured here
without running the controller: for each prompt the target's greedy reply is generated once, then
the draft model reads each window of the prompt followed by the reply, teacher-forced, and its
top-1 choice at every reply position is compared with the target's token there. That agreement is
the chance a drafted token survives when the tokens before it did (greedy), the figure the
controller's acceptance estimates track. A window's view starts where `ModelDrafter.begin` puts
it (aligned down to `ModelDrafter.ALIGN`).

    .venv/bin/python benchmarks/draft_window.py --windows 256,512,1024,all --suites code-edit \\
        --case argparse.py:260 "Add type hints to every function." --json benchmarks/results/draft_window.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

from edgespec.bench import modes, suites
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Token
from edgespec.decoding.model_drafter import ModelDrafter
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import GenerateSettings
from edgespec.engine.options import EngineOptions
from edgespec.util.provenance import provenance

sys.path.insert(0, str(Path(__file__).parent))
from result_file import write_result  # noqa: E402
from whole_call import read_case  # noqa: E402


def reply_ids(engine, prompt: list[int], max_tokens: int) -> list[int]:
    """The target's greedy reply (n-gram drafting only: the same tokens, sooner)."""
    settings = GenerateSettings.build(max_tokens, SamplingParams(), DraftChoice.NGRAM, PolicyChoice("auto"))
    return [e.id for e in engine.generate_tokens(prompt, settings) if isinstance(e, Token)]


def agreement(draft, prompt: list[int], reply: list[int], window: int | None) -> tuple[int, int]:
    """(reply positions where the draft model's top-1 is the target's token, positions), for the
    draft model reading the prompt's window then the reply."""
    drafter = ModelDrafter(draft, window=window)
    drafter.begin(prompt)
    view = prompt[drafter.start :]
    draft.truncate(0)
    draft.eval(view[:-1], 1) if len(view) > 1 else None
    hits = 0
    fed = [view[-1]] + reply[:-1]  # each predicts the next reply token
    for i in range(0, len(fed), 256):
        chunk = fed[i : i + 256]
        logits = draft.eval(chunk, len(chunk))
        hits += int(np.sum(np.argmax(logits, axis=1) == np.asarray(reply[i : i + len(chunk)])))
    draft.truncate(0)
    return hits, len(reply)


def summarise(rows: list[dict], windows: list[int | None]) -> list[dict]:
    """Per suite and window: the agreement over every reply's tokens, and the median prompt."""
    summary = []
    for suite in dict.fromkeys(r["suite"] for r in rows):
        for window in [w or "all" for w in windows]:
            mine = [r for r in rows if r["suite"] == suite and r["window"] == window and r["reply_tokens"]]
            summary.append(
                {
                    "suite": suite,
                    "window": window,
                    "prompts": len(mine),
                    "agreement": sum(r["hits"] for r in mine) / sum(r["reply_tokens"] for r in mine),
                    "median_prompt_tokens": statistics.median(r["prompt_tokens"] for r in mine),
                }
            )
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", default="256,512,1024,all")
    ap.add_argument("--suites", default=None, help="dev-set suites (comma-separated); none: only --case")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--case", nargs=2, action="append", default=[], metavar=("FILE[:LINES]", "INSTRUCTION"))
    ap.add_argument("--max-tokens", type=int, default=200, help="for --case prompts")
    ap.add_argument("--pair", default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    windows = [None if w == "all" else int(w) for w in args.windows.split(",")]
    engine, _ = EngineOptions(pair=args.pair).check().open()
    prompts = []  # (suite, id, prompt ids, max tokens)
    if args.suites:
        for p in suites.select(suites.load_suite(suites.DEV_SET), args.limit, args.suites):
            prompts.append((p.suite, p.id, modes.prompt_ids(engine, p), p.max_tokens))
    for spec, instruction in args.case:
        label, text = read_case(spec)
        message = text.rstrip("\n") + "\n\n" + instruction
        prompts.append(("held-out", label, engine.chat_tokens([{"role": "user", "content": message}]), args.max_tokens))
    rows = []
    for suite, pid, prompt, max_tokens in prompts:
        engine.target.truncate(0)
        reply = reply_ids(engine, prompt, max_tokens)
        for window in windows:
            hits, n = agreement(engine.draft, prompt, reply, window)
            rows.append(
                {
                    "suite": suite,
                    "id": pid,
                    "prompt_tokens": len(prompt),
                    "reply_tokens": n,
                    "window": window or "all",
                    "agreement": hits / n if n else None,
                    "hits": hits,
                }
            )
            print(f"{suite} {pid} ({len(prompt)} prompt tokens) window {window or 'all'}: {hits}/{n}", file=sys.stderr)
    engine.close()
    summary = summarise(rows, windows)
    for s in summary:
        print(
            f"{s['suite']:10} window {str(s['window']):>5}: agreement {s['agreement']:.1%} "
            f"({s['prompts']} prompts, median {s['median_prompt_tokens']:.0f} prompt tokens)"
        )
    if args.json:
        meta = {**provenance(), "pair": engine.pair.name}
        write_result(args.json, {"meta": meta, "rows": rows, "summary": summary})


if __name__ == "__main__":
    main()
