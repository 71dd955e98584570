"""Known text: how fast a reply goes where much of it is text already known, against the machine's
reading speed (issue 49's rows).

Two parts, on held-out inputs, every mode interleaved round by round (the order alternating), one
engine in this process, greedy:

- `retry`: a request for new code asked twice in a row, as a user retries it with `--decode-again`
  (by default a greedy request asked again is served its earlier reply, with no pass at all).
  Each (prompt, mode, round) starts from an empty history and prompt cache of its own in a
  temporary folder; the first
  call fills them, the models' caches are emptied, and the second call is timed: `history` (the
  history on: the retry drafts from the first reply) against `no-history` (only the prompt cache).
  A mode never drafts from another mode's reply. The first call is the same in both modes (no
  history to draft from yet), so whether a second call parts from it is the noise floor's question.
- `file`: a held-out file of Python's standard library returned whole with type hints, prompt cache
  and history off: `auto` against `ar` (plain decoding), decoding and whole reply.

Each timed call records its whole reply, decoding, tokens, the passes per draft length and the
longest pass, and whether its reply equals the first call's (retry) or `ar`'s (file).

    .venv/bin/python benchmarks/known_text.py --rounds 2 --json benchmarks/results/intel-xeon/known_text.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Step, Summary, Token
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.copy_sources import DraftSources
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.engine.options import EngineOptions
from edgespec.engine.prompt_cache import PromptCache
from edgespec.engine.reply_history import ReplyHistory
from edgespec.util.provenance import provenance

sys.path.insert(0, str(Path(__file__).parent))
from result_file import write_result  # noqa: E402

GREEDY = SamplingParams(temperature=0.0)
STDLIB = Path(os.__file__).parent
# Requests for new code that nothing here was tuned on (none is in the development set).
RETRY_PROMPTS = (
    "Write a Python module implementing an LRU cache class with type hints, docstrings and a small usage example.",
    "Write a Python function that parses an ISO 8601 duration such as 'P3DT4H5M' into a datetime.timedelta, "
    "with a docstring and unittest tests.",
    "Write a small Python command-line tool using argparse that counts the lines, words and characters of the "
    "files given as arguments, like wc.",
)
FILES = ("sched.py", "fnmatch.py", "netrc.py")
FILE_INSTRUCTION = "Add type hints to every function of this file. Return the whole file and nothing else."
MODES = {
    "ar": (DraftChoice.NONE, PolicyChoice("fixed", 0)),
    "auto": (DraftChoice.AUTO, PolicyChoice("auto")),
}


def call(engine: Engine, messages: list[dict], max_tokens: int, mode: str) -> dict:
    """One reply after emptied caches (a new process's start): its figures and token ids."""
    draft, k = MODES[mode]
    engine.empty_caches()
    ids: list[int] = []
    longest = 0
    summary = None
    for event in engine.chat(messages, GenerateSettings.build(max_tokens, GREEDY, draft, k, decode_again=True)):
        if isinstance(event, Token):
            ids.append(event.id)
        elif isinstance(event, Step):
            longest = max(longest, event.drafted + 1)
        elif isinstance(event, Summary):
            summary = event
    assert summary is not None
    return {
        "whole_s": summary.total_s,
        "ttft_s": summary.ttft_s,
        "decode_s": summary.decode_s,
        "tokens": summary.tokens,
        "prompt_tokens": summary.prompt_tokens,
        "target_passes": summary.target_passes,
        "longest_pass": longest,
        "k_histogram": {str(n): c for n, c in sorted(summary.k_histogram.items())},
        "accepted_by": dict(summary.accepted_by),
        "ids": ids,
    }


def retry_pair(engine: Engine, prompt: str, mode: str, folder: Path, max_tokens: int) -> dict:
    """The same request twice, with a history and a prompt cache that start empty in `folder`
    (`mode` "history") or a prompt cache alone ("no-history"); the second call's figures."""
    history = ReplyHistory.open(folder / "history", vocab=engine.target.n_vocab) if mode == "history" else None
    engine.sources = DraftSources(history=history)
    engine.cache = PromptCache(folder / "prompt-cache")
    messages = [{"role": "user", "content": prompt}]
    first = call(engine, messages, max_tokens, "auto")
    second = call(engine, messages, max_tokens, "auto")
    second["same_as_first"] = second["ids"] == first["ids"]
    second["parted_at"] = next(
        (i for i, (a, b) in enumerate(zip(first["ids"], second["ids"], strict=False)) if a != b), None
    )
    return second


def file_messages(name: str) -> list[dict]:
    text = (STDLIB / name).read_text(encoding="utf-8")
    return [{"role": "user", "content": f"{FILE_INSTRUCTION}\n\n```python\n{text}```"}]


def run_retry(engine: Engine, rounds: int, max_tokens: int, rows: list[dict]) -> None:
    modes = ["history", "no-history"]
    with tempfile.TemporaryDirectory(prefix="edgespec-known-") as tmp:
        for r in range(rounds):
            for n, prompt in enumerate(RETRY_PROMPTS):
                for mode in modes if (n + r) % 2 == 0 else modes[::-1]:
                    row = retry_pair(engine, prompt, mode, Path(tmp) / f"{r}-{n}-{mode}", max_tokens)
                    rows.append({"part": "retry", "case": prompt, "mode": mode, "round": r, **row})
                    say(rows[-1])


def run_files(engine: Engine, rounds: int, max_tokens: int, rows: list[dict]) -> None:
    engine.sources, engine.cache = DraftSources(), None
    modes = list(MODES)
    for r in range(rounds):
        for n, name in enumerate(FILES):
            messages = file_messages(name)
            for mode in modes if (n + r) % 2 == 0 else modes[::-1]:
                rows.append(
                    {"part": "file", "case": name, "mode": mode, "round": r, **call(engine, messages, max_tokens, mode)}
                )
                say(rows[-1])


def say(row: dict) -> None:
    print(
        f"{row['part']} {row['case'][:40]!r} {row['mode']} round {row['round']}: whole {row['whole_s']:.2f} s, "
        f"decode {row['decode_s']:.2f} s, {row['tokens']} tokens, longest pass {row['longest_pass']}",
        file=sys.stderr,
        flush=True,
    )


def summarize(rows: list[dict]) -> list[dict]:
    """Per part and case: each mode's medians, and the baseline's over the other's (whole, decoding):
    retry, `no-history` over `history`; file, `ar` over `auto`."""
    out = []
    for part, base, other in (("retry", "no-history", "history"), ("file", "ar", "auto")):
        for case in dict.fromkeys(r["case"] for r in rows if r["part"] == part):
            mine = {m: [r for r in rows if r["case"] == case and r["mode"] == m] for m in (base, other)}
            med = {
                m: {k: statistics.median(r[k] for r in rs) for k in ("whole_s", "decode_s", "tokens")}
                for m, rs in mine.items()
            }
            entry = {"part": part, "case": case, **med}
            entry["whole_speedup"] = med[base]["whole_s"] / med[other]["whole_s"]
            entry["decode_speedup"] = med[base]["decode_s"] / med[other]["decode_s"]
            entry["longest_pass"] = max(r["longest_pass"] for r in mine[other])
            if part == "retry":
                entry["retries_same_as_first"] = {m: sum(r["same_as_first"] for r in rs) for m, rs in mine.items()}
            else:
                pairs = zip(mine[base], mine[other], strict=True)
                entry["same_as_ar"] = sum(a["ids"] == b["ids"] for a, b in pairs)
            entry["rounds"] = len(mine[other])
            out.append(entry)
    for part in ("retry", "file"):
        entries = [e for e in out if e["part"] == part]
        if entries:
            out.append(
                {
                    "part": part,
                    "case": "median",
                    "whole_speedup": statistics.median(e["whole_speedup"] for e in entries),
                    "decode_speedup": statistics.median(e["decode_speedup"] for e in entries),
                }
            )
    return out


PARTS = ("retry", "file")


def _parts(text: str) -> set[str]:
    """`--parts`: a comma-separated choice of PARTS (argparse turns the error into one line)."""
    parts = set(text.split(","))
    if not parts <= set(PARTS):
        raise argparse.ArgumentTypeError(f"takes {' and '.join(PARTS)}, comma-separated, not {text!r}")
    return parts


def _rounds(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a whole number of rounds, at least 1, not {text!r}")
    return int(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", type=_parts, default=set(PARTS))
    ap.add_argument("--rounds", type=_rounds, default=2)
    ap.add_argument("--retry-tokens", type=int, default=300)
    ap.add_argument("--file-tokens", type=int, default=2000)
    ap.add_argument("--pair", default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    parts = args.parts
    engine, _ = EngineOptions(pair=args.pair).check().open()
    rows: list[dict] = []
    try:
        if "retry" in parts:
            run_retry(engine, args.rounds, args.retry_tokens, rows)
        if "file" in parts:
            run_files(engine, args.rounds, args.file_tokens, rows)
    finally:
        engine.close()
    summary = summarize(rows)
    print(json.dumps(summary, indent=1))
    if args.json:
        for row in rows:
            del row["ids"]
        meta = {**provenance(), "pair": engine.pair.name}
        write_result(args.json, {"meta": meta, "rows": rows, "summary": summary})


if __name__ == "__main__":
    main()
