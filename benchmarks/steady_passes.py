"""Steady passes against live timings: what pricing auto's passes from the saved curve alone costs,
and whether the same greedy request then gets the same reply (issue 50, item 5).

`steady` (the default: `GenerateSettings.live_timings` off) prices every pass of a call from the
curve the last calibration left and starts each call with a fresh policy; `live` (--live-timings)
prices from the call's own timings and keeps the policy across calls, as `chat` and `serve` do;
`live-fresh` prices from them too, with a fresh policy per call, as each `run` process has. Each
prompt is asked twice in a row in each mode, the history and the prompt cache off (`--no-history
--no-cache`), the models' caches emptied before each call, one engine in this process and the
home's saved calibration, the modes interleaved prompt by prompt (each mode first as often). Each
call records its decoding speed, its pass shapes (the K series) and its token ids; each pair,
whether the second call made the same passes and gave the same reply as the first.

    .venv/bin/python benchmarks/steady_passes.py --rounds 1 --json benchmarks/results/intel-xeon/steady_passes.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from edgespec.bench.suites import load_suite
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Step, Summary, Token
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.engine.options import EngineOptions
from edgespec.util.provenance import provenance

sys.path.insert(0, str(Path(__file__).parent))
from result_file import write_result  # noqa: E402

DEV = Path(__file__).parent.parent / "edgespec" / "data" / "dev.jsonl"
# two code edits and two chat requests of the development set: copies hold in the first, seldom in the others
PROMPTS = ("code-edit/HumanEval-20", "code-edit/HumanEval-33", "mtbench/121", "mtbench/81")
MODES = ("steady", "live", "live-fresh")


def call(engine: Engine, messages: list[dict], max_tokens: int, mode: str) -> dict:
    """One greedy reply after emptied caches: its decoding figures, pass shapes and token ids."""
    engine.empty_caches()
    if mode == "live-fresh":
        engine.forget_policies()  # what a new process starts from: no policy learnt yet
    settings = GenerateSettings.build(
        max_tokens,
        SamplingParams(temperature=0.0),
        DraftChoice.AUTO,
        PolicyChoice("auto"),
        live_timings=mode != "steady",
    )
    ids: list[int] = []
    ks: list[int] = []
    summary = None
    for event in engine.chat(messages, settings):
        if isinstance(event, Token):
            ids.append(event.id)
        elif isinstance(event, Step):
            ks.append(event.drafted)
        elif isinstance(event, Summary):
            summary = event
    assert summary is not None
    return {"decode_s": summary.decode_s, "tokens": summary.tokens, "ks": ks, "ids": ids}


def asked_twice(engine: Engine, messages: list[dict], max_tokens: int, mode: str) -> dict:
    """The same request twice in a row: both calls' decoding speed, and whether they agreed."""
    first, second = (call(engine, messages, max_tokens, mode) for _ in range(2))
    parted = next((i for i, (a, b) in enumerate(zip(first["ids"], second["ids"], strict=False)) if a != b), None)
    return {
        "decode_tok_s": [c["tokens"] / c["decode_s"] for c in (first, second)],
        "tokens": [first["tokens"], second["tokens"]],
        "passes": [len(first["ks"]), len(second["ks"])],
        "same_passes": first["ks"] == second["ks"],
        "same_reply": first["ids"] == second["ids"],
        "parted_at": parted,
    }


def summarize(rows: list[dict]) -> dict:
    """Per prompt: each mode's median decoding speed over its calls, steady over each live mode, and
    the pairs that gave the same reply; then the median ratios and the totals."""
    cases = []
    for case in dict.fromkeys(r["case"] for r in rows):
        mine = {m: [r for r in rows if r["case"] == case and r["mode"] == m] for m in MODES}
        speed = {m: statistics.median(s for r in rs for s in r["decode_tok_s"]) for m, rs in mine.items()}
        same = {m: sum(r["same_reply"] for r in rs) for m, rs in mine.items()}
        ratios = {f"steady_over_{m}": speed["steady"] / speed[m] for m in MODES[1:]}
        cases.append({"case": case, "decode_tok_s": speed, **ratios, "same_reply": same})
    return {
        "cases": cases,
        **{f"median_{r}": statistics.median(c[r] for c in cases) for r in ratios},
        "same_reply": {m: sum(r["same_reply"] for r in rows if r["mode"] == m) for m in MODES},
        "same_passes": {m: sum(r["same_passes"] for r in rows if r["mode"] == m) for m in MODES},
        "pairs": {m: sum(r["mode"] == m for r in rows) for m in MODES},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--pair", default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    prompts = {p.id: p for p in load_suite(DEV)}
    engine, _ = EngineOptions(pair=args.pair).check().open()
    rows: list[dict] = []
    try:
        for r in range(args.rounds):
            for n, name in enumerate(PROMPTS):
                prompt = prompts[name]
                assert prompt.messages is not None
                turn = MODES[n % 3 :] + MODES[: n % 3]  # each mode first as often
                for mode in turn if r % 2 == 0 else turn[::-1]:
                    row = asked_twice(engine, list(prompt.messages), prompt.max_tokens, mode)
                    rows.append({"case": name, "mode": mode, "round": r, **row})
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        engine.close()
    summary = summarize(rows)
    print(json.dumps(summary, indent=1))
    if args.json:
        meta = {**provenance(), "pair": engine.pair.name, "prompts": list(PROMPTS), "rounds": args.rounds}
        write_result(args.json, {"meta": meta, "rows": rows, "summary": summary})


if __name__ == "__main__":
    main()
