"""Sequences of related calls (the session suite), each timed as a whole: `auto` against `ar`.

A coding user's calls repeat: follow-up edits of one file, one edit made to three files, a
regenerated reply, an agent's retry after its edit failed, a tool-call loop, chat turns quoting
earlier code (`edgespec/data/session_suite.jsonl`). Every call here is made as a separate `run`
process makes it: the models' caches are emptied before each, and what it may reuse is on disk.
Each (sequence, mode) starts from an empty history and an empty prompt cache of its own, in a
temporary folder, and each call adds to them as `run` does (`--no-prompt-cache`: every call reads
its whole prompt), so a mode drafts only from its own earlier replies in that sequence, never from
another mode's reply to the same prompt. The modes alternate which
goes first, sequence by sequence and round by round.

Figures per part (dev: what the work is tuned on; heldout: what judges it): the whole sequences'
seconds, `ar` over `auto` (the speed-up), per kind too; tokens drafted and accepted per source;
what the lookups and the history's appends cost; and whether the greedy replies were equal: each
call that both modes made with the same messages is compared, and a parting is explained against
the target's noise floor as `bench` does (TIE: a near-tie the batched pass broke the other way;
DIFF: a bug). After a parting, a sequence's later calls quote other text and are not compared.

    .venv/bin/python benchmarks/session_bench.py --rounds 1 --json benchmarks/results/sessions.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from edgespec.bench.sessions import SESSION_SUITE, Session, load_sessions
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Step, Summary, Token
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.copy_sources import DraftSources
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.engine.options import EngineOptions
from edgespec.engine.prompt_cache import PromptCache
from edgespec.engine.reply_history import ReplyHistory
from edgespec.quality.divergence import Round, explain_parting, first_divergence
from edgespec.util.provenance import provenance

sys.path.insert(0, str(Path(__file__).parent))
from result_file import write_result  # noqa: E402

MODES = {"ar": (DraftChoice.NONE, PolicyChoice("fixed", 0)), "auto": (DraftChoice.AUTO, PolicyChoice("auto"))}
GREEDY = SamplingParams(temperature=0.0)


def run_sequence(engine: Engine, session: Session, mode: str, folder: Path, prompt_cache: bool) -> dict:
    """One sequence's calls in order, each as a new process makes it, with a history (and a prompt
    cache) that start empty in `folder`."""
    draft, k = MODES[mode]
    engine.sources = DraftSources(history=ReplyHistory.open(folder / "history", vocab=engine.target.n_vocab))
    engine.cache = PromptCache(folder / "prompt-cache") if prompt_cache else None
    replies: list[str] = []
    calls = []
    for i in range(len(session.calls)):
        engine.empty_caches()
        # decoded, never served again from the history: the sequences measure drafting from it
        settings = GenerateSettings.build(session.max_tokens(i), GREEDY, draft, k, decode_again=True)
        text, ids, rounds, by_source = [], [], [], defaultdict(lambda: [0, 0])
        summary = None
        messages = session.messages(i, replies)
        for event in engine.chat(messages, settings):
            if isinstance(event, Token):
                text.append(event.text)
                ids.append(event.id)
            elif isinstance(event, Step):
                rounds.append(Round(len(ids), event.drafted_ids, *map(tuple, event.tree()), event.drafter))
                if event.drafter:
                    part = event.drafted_part()
                    by_source[event.drafter][0] += part.drafted
                    by_source[event.drafter][1] += part.accepted
            elif isinstance(event, Summary):
                summary = event
        assert summary is not None
        replies.append("".join(text))
        calls.append(
            {
                "call": i,
                "prompt_tokens": summary.prompt_tokens,
                "tokens": summary.tokens,
                "whole_s": summary.total_s,
                "ttft_s": summary.ttft_s,
                "decode_s": summary.decode_s,
                "drafted_accepted": {s: tuple(v) for s, v in by_source.items()},
                "lookups": summary.lookups,
                "lookup_s": summary.lookup_s,
                "history_append_s": summary.history_append_s,
                "reply": replies[-1],
                "messages": messages,
                "ids": ids,
                "rounds": rounds,  # for explaining a parting; not written out
            }
        )
    return {"whole_s": sum(c["whole_s"] for c in calls), "calls": calls}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, default=SESSION_SUITE)
    ap.add_argument("--parts", default="dev,heldout")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--pair", default=None)
    ap.add_argument("--no-prompt-cache", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    sessions = load_sessions(args.suite, args.parts.split(","))
    engine, _ = EngineOptions(pair=args.pair).check().open()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="edgespec-sessions-") as tmp:
            for r in range(args.rounds):
                for n, session in enumerate(sessions):
                    order = list(MODES) if (n + r) % 2 == 0 else list(MODES)[::-1]
                    pair = {}
                    for mode in order:
                        folder = Path(tmp) / f"{r}-{n}-{mode}"
                        row = {"round": r, "id": session.id, "part": session.part, "kind": session.kind, "mode": mode}
                        row.update(run_sequence(engine, session, mode, folder, not args.no_prompt_cache))
                        rows.append(row)
                        pair[mode] = row
                        print(json.dumps({k: v for k, v in row.items() if k != "calls"}), flush=True)
                    compare(engine, pair["ar"], pair["auto"])
    finally:
        engine.close()
    summary = summarize(rows)
    print(json.dumps(summary, indent=1))
    if args.json:
        meta = {
            **provenance(),
            "command": "benchmarks/session_bench.py " + " ".join(sys.argv[1:]),
            "pair": engine.pair.name,
        }
        for row in rows:
            for c in row["calls"]:
                del c["rounds"], c["ids"]
        write_result(args.json, {"meta": meta, "rows": rows, "summary": summary})


def compare(engine: Engine, ar: dict, auto: dict) -> None:
    """Mark each of `auto`'s calls made with the same messages as `ar`'s: exact, TIE or DIFF."""
    floor = engine.noise_floor().max
    for mine, plain in zip(auto["calls"], ar["calls"], strict=True):
        if mine["messages"] != plain["messages"]:
            break
        if first_divergence(mine["ids"], plain["ids"]) is None:
            mine["vs_ar"] = "exact"
            continue
        prompt = engine.chat_tokens(mine["messages"])
        parting = explain_parting(engine.target, prompt, plain["ids"], mine["ids"], mine["rounds"], floor)
        mine["vs_ar"], mine["parting_at"] = parting.verdict, parting.position


def summarize(rows: list[dict]) -> dict:
    """Per part and per kind: the sequences' seconds summed over rounds, ar / auto; calls compared;
    tokens drafted and accepted per source; lookup and append costs."""
    by = defaultdict(lambda: defaultdict(float))
    verdicts: dict[str, Counter] = defaultdict(Counter)  # calls compared with ar, by verdict
    sources: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    lookup_ms: dict[str, list[float]] = defaultdict(list)
    appends: list[float] = []
    for row in rows:
        for key in (row["part"], f"{row['part']}/{row['kind']}"):
            by[key][row["mode"]] += row["whole_s"]
        for c in row["calls"]:
            for s, (d, a) in c["drafted_accepted"].items():
                sources[row["part"]][s][0] += d
                sources[row["part"]][s][1] += a
            for s, n in c["lookups"].items():
                if n:
                    lookup_ms[s].append(1e3 * c["lookup_s"][s] / n)
            if c["history_append_s"]:
                appends.append(1e3 * c["history_append_s"])
    for row in rows:
        for c in row["calls"]:
            if "vs_ar" in c:
                verdicts[row["part"]][c["vs_ar"]] += 1
    return {
        "speedup": {k: round(v["ar"] / v["auto"], 3) for k, v in by.items() if v.get("auto")},
        "seconds": {k: {m: round(s, 2) for m, s in v.items()} for k, v in by.items()},
        "vs_ar": {p: dict(v) for p, v in verdicts.items()},
        "drafted_accepted": {p: dict(v) for p, v in sources.items()},
        "lookup_ms_median": {s: round(statistics.median(v), 3) for s, v in lookup_ms.items()},
        "append_ms_median": round(statistics.median(appends), 3) if appends else None,
    }


if __name__ == "__main__":
    main()
