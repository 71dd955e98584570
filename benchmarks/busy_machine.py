"""Decoding on a machine that runs other programs: edgespec with its thread count chosen per pass
against fixed threads (one per physical core), and llama.cpp alone, each on a quiet machine and
with cores kept busy by processes this script starts and stops itself.

Setups: `ar` (plain decoding) and `auto`, each `-adaptive` (the engine's thread policy) and
`-fixed`; `llama.cpp` (llama-cpp-python's `Llama` on the same target file, n_threads = physical
cores, greedy). Every round measures every setup quiet, then every setup under load (`--busy`
spinning processes, each ending by itself after `--busy-limit` seconds whatever happens to this
script), so a change of the machine hits all setups alike. Figures: decode milliseconds per token
(after the first), medians over rounds; per setup its speed under load over its quiet speed, and
its speed over llama.cpp alone's under the same load.

    .venv/bin/python benchmarks/busy_machine.py --rounds 3 --tokens 128 \\
        --json benchmarks/results/busy_machine.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Summary
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.engine.options import EngineOptions
from edgespec.util.hardware import physical_cores
from edgespec.util.provenance import provenance

sys.path.insert(0, str(Path(__file__).parent))
from result_file import write_result  # noqa: E402

PROMPT = "Write a Python function that returns the n-th Fibonacci number, with a docstring."
MODES = {"ar": (DraftChoice.NONE, PolicyChoice("fixed", 0)), "auto": (DraftChoice.AUTO, PolicyChoice("auto"))}
LLAMA = "llama.cpp"
SETUPS = [f"{mode}-{threads}" for mode in MODES for threads in ("adaptive", "fixed")] + [LLAMA]
QUIET, BUSY = "quiet", "busy"
BUSY_NAME = "edgespec-busy-machine"  # in each busy process's command line, to find it by
SPIN = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end: pass"


@contextmanager
def busy_cores(n: int, limit_s: float) -> Iterator[list[subprocess.Popen]]:
    """`n` processes spinning on a core each (as `yes > /dev/null` does), each ending by itself after
    `limit_s` seconds, stopped when the block ends."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN, str(limit_s), BUSY_NAME]) for _ in range(n)]
    try:
        time.sleep(0.3)  # running, and seen by the scheduler as busy
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def measure_engine(engine: Engine, setup: str, prompt: list[int], tokens: int) -> dict:
    """One cold reply in an edgespec setup: ms per decoded token and the passes per thread count."""
    mode, threads = setup.rsplit("-", 1)
    draft, choice = MODES[mode]
    policy = engine.threads
    if threads == "fixed":
        engine.threads = None  # the models keep the count set here: one per core, as before
        for backend in (engine.target, engine.draft):
            if backend is not None and hasattr(backend, "set_threads"):
                backend.set_threads(physical_cores())
    try:
        engine.empty_caches()
        # greedy, live timings: the thread count follows the load (a steady reply would hold it)
        settings = GenerateSettings.build(tokens, SamplingParams(), draft, choice, live_timings=True)
        summary = [e for e in engine.generate_tokens(prompt, settings) if isinstance(e, Summary)][0]
    finally:
        engine.threads = policy
    decoded = max(summary.tokens - 1, 1)
    return {
        "ms_per_token": 1000 * summary.decode_s / decoded,
        "tokens": summary.tokens,
        "threads": {str(n): v for n, v in sorted(summary.threads.items())},
    }


def llama_alone(path: Path, threads: int, n_ctx: int = 4096):
    """llama-cpp-python's own `Llama` on `path` with `threads` threads, and a function timing one cold
    greedy streamed completion of a prompt text (ms per token after the first; the function holds
    the model)."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False)

    def once(text: str, tokens: int) -> dict:
        llm.reset()
        first, n = None, 0
        for _ in llm.create_completion(text, max_tokens=tokens, temperature=0.0, stream=True):
            n += 1
            if first is None:
                first = time.perf_counter()
        elapsed = time.perf_counter() - first if first is not None else 0.0
        return {"ms_per_token": 1000 * elapsed / max(n - 1, 1), "tokens": n, "threads": {str(threads): n}}

    return once, llm


def summarise(rows: list[dict]) -> dict:
    """Median ms per token per setup and load; each setup's speed under load over its quiet speed,
    and its speed over llama.cpp alone's under the same load."""
    med = {}
    for setup in dict.fromkeys(r["setup"] for r in rows):
        for load in (QUIET, BUSY):
            ms = [r["ms_per_token"] for r in rows if r["setup"] == setup and r["load"] == load]
            if ms:
                med.setdefault(setup, {})[load] = statistics.median(ms)
    out = {}
    for setup, by_load in med.items():
        entry: dict = {f"{load}_ms_per_token": ms for load, ms in by_load.items()}
        if QUIET in by_load and BUSY in by_load:
            entry["busy_speed_over_quiet"] = by_load[QUIET] / by_load[BUSY]
        for load, ms in by_load.items():
            alone = med.get(LLAMA, {}).get(load)
            if alone and setup != LLAMA:
                entry[f"{load}_speed_over_llama_cpp"] = alone / ms
        out[setup] = entry
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--busy", type=int, default=1, help="cores kept busy under load (default 1)")
    ap.add_argument("--busy-limit", type=float, default=900.0, help="seconds after which a busy process ends by itself")
    ap.add_argument("--setups", default=",".join(SETUPS), help=f"comma-separated, of {', '.join(SETUPS)}")
    ap.add_argument("--pair", default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    setups = [s for s in args.setups.split(",") if s]
    if unknown := [s for s in setups if s not in SETUPS]:
        sys.exit(f"busy_machine: unknown setups {unknown}")
    engine, _ = EngineOptions(pair=args.pair, draft=DraftChoice.AUTO).check().open()
    if engine.threads is None:
        print("busy_machine: this pair's threads are not chosen per pass (pinned, GPU or one core)", file=sys.stderr)
    prompt = engine.chat_tokens([{"role": "user", "content": PROMPT}])
    text = engine.target.chat_prompt([{"role": "user", "content": PROMPT}])
    alone = llama_alone(engine.target.path, physical_cores())[0] if LLAMA in setups else None

    def one(setup: str) -> dict:
        if setup == LLAMA:
            assert alone is not None
            return alone(text, args.tokens)
        return measure_engine(engine, setup, prompt, args.tokens)

    for setup in setups:  # warm-up: first calls pay for allocation (and auto's calibration, quiet)
        one(setup)
    rows = []
    for round_ in range(args.rounds):
        for load in (QUIET, BUSY):
            with busy_cores(args.busy if load == BUSY else 0, args.busy_limit):
                for setup in setups:
                    r = {"round": round_, "load": load, "setup": setup, **one(setup)}
                    rows.append(r)
                    print(
                        f"round {round_} {load:5} {setup:13} {r['ms_per_token']:6.1f} ms/token threads {r['threads']}",
                        file=sys.stderr,
                    )
    summary = summarise(rows)
    for setup, entry in summary.items():
        print(setup, json.dumps({k: round(v, 3) for k, v in entry.items()}))
    engine.close()
    if args.json:
        meta = {**provenance(), "busy_cores": args.busy, "tokens": args.tokens, "pair": engine.pair.name}
        write_result(args.json, {"meta": meta, "rows": rows, "summary": summary})


if __name__ == "__main__":
    main()
