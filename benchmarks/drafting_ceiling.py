"""The most any drafter could gain on this machine: drafts that are the target's own reply.

A bench suite's prompts run plain (`ar`), with `auto`, and with three oracles (`ceiling_oracles.py`)
that draft a reply their own run produces: `ceiling` (drafts of that reply, K chosen by auto's
controller within its cap), `copies` (the text's own copies cut where the reply parts from them:
prompt lookup that knows how far the target will take each copy, K chosen by the same controller)
and `perfect-length` (drafts of that reply as long as the reply is, one pass each, no cap), in
interleaved rounds under each prompt's constraint. Each oracle runs again with its own reply as its
source until the reply repeats (a near-tie a long pass reads otherwise parts a reply from its
source, and past the parting the oracle would know nothing). What `auto` gains is bounded by them:
the gap to `copies` is what a better choice of draft length could still win from the copies the
text offers within auto's cap, the gap to `perfect-length` what any drafter of any length could;
the result file says both per prompt and overall (`ceiling_summary.gaps`).

`--sessions` adds the session suite's calls (`edgespec/data/session_suite.jsonl`), each a prompt
whose quoted earlier replies are plain decoding's (`ceiling_sessions.py`).

Every mode runs at one thread count (`--threads`, default the physical cores), fixed for the run and
recorded on every row: the engine's thread policy, which would move it between passes, is off.

    .venv/bin/python benchmarks/drafting_ceiling.py --suite suites/structured.jsonl \\
        --suite suites/structured-heldout.jsonl --json benchmarks/results/drafting_ceiling.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from ceiling_oracles import (  # noqa: E402
    CEILING,
    COPIES,
    MAX_ITERATIONS,
    PERFECT,
    CopyOracle,
    LongestRun,
    ReplyDrafter,
    faults,
    ideal_passes,
    iterate,
)
from ceiling_sessions import SessionCalls  # noqa: E402
from ceiling_summary import gaps, lines, summarise  # noqa: E402
from result_file import write_result  # noqa: E402

from edgespec.bench import modes, report, suites  # noqa: E402
from edgespec.bench.sessions import PARTS, load_sessions  # noqa: E402
from edgespec.decoding.decoder import SpeculativeDecoder  # noqa: E402
from edgespec.decoding.drafters import DraftChoice  # noqa: E402
from edgespec.decoding.events import Step, Summary, Token  # noqa: E402
from edgespec.decoding.policy.controller import make_policy  # noqa: E402
from edgespec.decoding.policy.plan import Policy, PolicyChoice  # noqa: E402
from edgespec.decoding.sampling import SamplingParams  # noqa: E402
from edgespec.engine.engine import Engine, GenerateSettings  # noqa: E402
from edgespec.engine.options import EngineOptions  # noqa: E402
from edgespec.util.errors import EdgespecError  # noqa: E402
from edgespec.util.hardware import physical_cores  # noqa: E402
from edgespec.util.provenance import isa_label, provenance  # noqa: E402

ORACLES = {CEILING: ReplyDrafter, COPIES: CopyOracle, PERFECT: ReplyDrafter}
ORDER = ("ar", "auto", *ORACLES)


def fix_threads(engine: Engine, n: int | None) -> int:
    """Run every model of `engine` on `n` threads (None: the physical cores) from now on, whichever
    mode runs: the thread policy is turned off (it would move the count between passes, and a
    decoder built outside the engine would inherit whatever count it left). A runtime whose count
    cannot be set (transformers) keeps its own, unless `n` asks for one. Returns the count the
    target's placement reports."""
    engine.threads = None
    if not hasattr(engine.target, "set_threads"):
        if n is not None:
            raise SystemExit(f"error: the {engine.pair.backend} backend's thread count cannot be set")
        return engine.target.placement.cpu_threads
    for model in (engine.target, engine.draft):
        if model is not None and hasattr(model, "set_threads"):
            model.set_threads(n or physical_cores())
    return engine.target.placement.cpu_threads


def run(engine: Engine, prompt: suites.BenchPrompt, mode: str, reply: list[int] | None, policy: Policy) -> dict:
    """One cold generation of `prompt` in `mode`: ar, auto, or an oracle drafting from `reply`
    (`policy`: the controller `ceiling` and `copies` choose K with; `perfect-length` has its own)."""
    if mode in ORACLES:
        assert reply is not None
        drafter = ORACLES[mode](len(modes.prompt_ids(engine, prompt)), reply)
        return oracle_run(engine, prompt, mode, drafter, LongestRun() if mode == PERFECT else policy)
    ids = modes.prompt_ids(engine, prompt)
    engine.empty_caches()
    (m,) = [m for m in modes.parse_modes(mode, DraftChoice.NGRAM) if m.name == mode]
    settings = GenerateSettings.build(prompt.max_tokens, SamplingParams(), m.draft, m.policy, prompt.constraint)
    return _row(engine, prompt, mode, engine.generate_tokens(ids, settings))[0]


def oracle_run(engine: Engine, prompt: suites.BenchPrompt, mode: str, drafter, policy: Policy) -> dict:
    """One cold generation of `prompt` drafted by `drafter` alone as `policy` plans; a `LongestRun`
    policy's row also says the passes a run with every draft taken whole would need."""
    ids = modes.prompt_ids(engine, prompt)
    engine.empty_caches()
    constraint = engine.constraint(prompt.constraint) if prompt.constraint is not None else None
    decoder = SpeculativeDecoder(engine.target, policy, [drafter])
    events = decoder.generate(ids, prompt.max_tokens, SamplingParams(), None, constraint)
    row, passes = _row(engine, prompt, mode, events)
    if isinstance(policy, LongestRun):
        row["ideal_passes"] = ideal_passes(passes, policy.longest_draft)
    return row


def text(engine: Engine, ids: list[int]) -> str:
    """A reply's text from its tokens, as a later call quotes it."""
    return b"".join(engine.target.token_bytes(t) for t in ids).decode("utf-8", errors="replace")


def _row(engine: Engine, prompt: suites.BenchPrompt, mode: str, events) -> tuple[dict, list[tuple[int, int, int]]]:
    """A generation's result row, and its passes' (drafted, accepted, forced)."""
    tokens, passes, summary = [], [], None
    for e in events:
        if isinstance(e, Token):
            tokens.append(e.id)
        elif isinstance(e, Step):
            passes.append((e.drafted, e.accepted, e.forced))
        elif isinstance(e, Summary):
            summary = e
    assert summary is not None
    row = {
        "id": prompt.id,
        "suite": prompt.suite,
        "mode": mode,
        "tokens": tokens,
        "ttft_s": summary.ttft_s,
        "decode_s": summary.decode_s,
        "target_passes": summary.target_passes,
        "longest_pass": max((k for k, _, _ in passes), default=0),
        "threads": engine.target.placement.cpu_threads,
    }
    return row, passes


def measure(engine: Engine, prompt: suites.BenchPrompt, mode: str, sources: dict, policy: Policy, most: int) -> dict:
    """`run` for ar and auto; for an oracle, `iterate` from the reply it last settled on for this
    prompt (at first ar's), which `sources` keeps, so a later repeat starts from its own reply."""
    if mode not in ORACLES:
        return run(engine, prompt, mode, None, policy)
    row = iterate(lambda source: run(engine, prompt, mode, source, policy), sources[prompt.id, mode], most)
    sources[prompt.id, mode] = row["tokens"]
    return row


def rounds(
    engine: Engine,
    groups: Sequence[Iterable[suites.BenchPrompt]],
    repeats: int,
    most: int,
    record: Callable[[suites.BenchPrompt, list[int]], None] | None = None,
) -> list[dict]:
    """Every mode on every prompt of `groups` (each iterated once per round), `repeats` times, in
    interleaved orders (ar first the first time: its reply is every oracle's first source, and
    `record` is given it, before a group made as it goes makes its next prompt)."""
    policy = make_policy(PolicyChoice("auto"), DraftChoice.NGRAM, engine.costs)  # kept across prompts, as auto's is
    rows: list[dict] = []
    sources: dict[tuple[str, str], list[int]] = {}
    for repeat in range(repeats):
        for prompt in (p for group in groups for p in group):
            turn = repeat % len(ORDER)
            for mode in ORDER if repeat == 0 else ORDER[turn:] + ORDER[:turn]:
                row = measure(engine, prompt, mode, sources, policy, most)
                if mode == "ar":
                    for oracle in ORACLES:
                        sources.setdefault((prompt.id, oracle), row["tokens"])
                    if record is not None and repeat == 0:
                        record(prompt, row["tokens"])
                rows.append({**row, "repeat": repeat})
                said = "; ".join(faults(row))
                print(
                    f"{prompt.id} {mode} ttft {row['ttft_s']:.2f} s decode {row['decode_s']:.2f} s"
                    + (f" after {row['iterations']} runs" if "iterations" in row else "")
                    + (f" ({said})" if said else ""),
                    file=sys.stderr,
                )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, action="append", default=[], help="a bench suite (repeatable)")
    ap.add_argument("--sessions", type=Path, default=None, help="a session suite, each call a prompt")
    ap.add_argument("--parts", default=",".join(PARTS), help="the session suite's parts (comma-separated)")
    ap.add_argument("--suites", default=None, help="only these suites of the files (comma-separated)")
    ap.add_argument("--limit", type=int, default=None, help="the first N prompts of each suite")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="CPU threads for every mode (default: physical cores)")
    ap.add_argument("--iterations", type=int, default=MAX_ITERATIONS, help="the most runs of an oracle per prompt")
    ap.add_argument("--pair", default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if (args.threads is not None and args.threads < 1) or args.iterations < 1:
        ap.error("--threads and --iterations must be at least 1")
    if not args.suite and args.sessions is None:
        ap.error("give --suite, --sessions or both")
    try:
        prompts = suites.select([p for path in args.suite for p in suites.load_suite(path)], args.limit, args.suites)
        calls = SessionCalls(load_sessions(args.sessions, args.parts.split(",")) if args.sessions else [])
        engine, _ = EngineOptions(pair=args.pair).check().open()
    except EdgespecError as e:  # a suite or a pair that cannot be used: one line, as the CLI says it
        sys.exit(f"drafting_ceiling.py: {e}")
    threads = fix_threads(engine, args.threads)

    def record(prompt: suites.BenchPrompt, ids: list[int]) -> None:
        calls.record(prompt, text(engine, ids))

    rows = rounds(engine, [prompts, calls], args.repeats, args.iterations, record)
    engine.close()
    summary, gap = summarise(rows), gaps(rows)
    meta = {**provenance(), "verify_ms": {engine.pair.name: report.verify_ms(engine.costs.quiet_curve())}}
    machine = meta["machine"]
    isa = isa_label(machine["isa"]) if "isa" in machine else "instruction set unknown"
    print(f"{machine.get('cpu_model') or machine['processor']}, {isa}, {threads} threads")
    print("\n".join(lines(summary, gap)))
    if args.json:
        doc = {"meta": {**meta, "threads": threads}, "rows": rows, "summary": summary, "gaps": gap}
        write_result(args.json, doc)


if __name__ == "__main__":
    main()
