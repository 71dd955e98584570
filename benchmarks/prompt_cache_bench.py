"""What the prompt cache saves a user: whole calls of `edgespec run`, cold against warm, and a
client alternating two files against `edgespec serve`.

`run` (N interleaved rounds, each with a file prefix no earlier call has read, so its first calls
are cold): the same stdin with one instruction and `--no-cache` (cold, nothing saved), with the
cache on (cold, and saving: the cache's own cost), then with another instruction (warm: the file
comes from the cache). Each call's whole-process wall clock, and its time to first token and the
prompt tokens it did not read from `--stats-json` (`ttft_s`, `prompt_cached`).

`serve` (once): one server, one client, two files A and B, requests A, B, A, B with other
instructions each time; the time to the first streamed text of each, and the engine's own TTFT.
Requests 3 and 4 should find their file in the server's memory.

`--cost` (once): in one process, the seconds to save a 2k-token prompt's two states, against the
seconds both models took to read it, and a lookup that finds nothing.

The issue's targets (2-core CPU, default pair): warm TTFT at least 10x lower than cold, warm call
at least 2x faster; saving adds at most 5% to a cold call.

    .venv/bin/python benchmarks/prompt_cache_bench.py --rounds 3 --json cache-bench.json
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import click
import httpx

from edgespec.util.provenance import input_name, provenance

sys.path.insert(0, str(Path(__file__).parent))
from result_file import write_result  # noqa: E402
from serve_throughput import run_once, start_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EDGESPEC = [sys.executable, "-m", "edgespec"]
DEFAULT_INPUT = ROOT / "edgespec" / "decoding" / "policy" / "controller.py"
INSTRUCTIONS = (
    "Add type hints to every function.",
    "Write a docstring for every class.",
    "List the functions and what each returns.",
    "Find one bug and explain it.",
)


def fresh(text: str) -> str:
    """`text` under a line no earlier call has read: a prefix the cache cannot have."""
    return f"# {uuid.uuid4()}\n{text}"


def run_call(pair: str | None, stdin: str, instruction: str, max_tokens: int, *flags: str) -> dict:
    """One `edgespec run`, timed from start to exit, with its --stats-json figures."""
    start = time.perf_counter()
    summary = run_once(pair, instruction, max_tokens, *flags, stdin=stdin)
    wall = time.perf_counter() - start
    return {
        "wall_s": wall,
        "ttft_s": summary["ttft_s"],
        "prompt_tokens": summary["prompt_tokens"],
        "prompt_cached": summary.get("prompt_cached"),
        "tokens": summary["tokens"],
    }


def stream_call(url: str, model: str, text: str, max_tokens: int) -> dict:
    """One streamed chat request: the time to its first text chunk, and the engine's figures."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    first, last = None, None
    with httpx.stream("POST", url + "/chat/completions", json=body, timeout=1800) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: ") :])
            if first is None and chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                first = time.perf_counter() - start
            last = chunk
    return {
        "client_ttft_s": first,
        "wall_s": time.perf_counter() - start,
        "engine_ttft_s": (last.get("metrics") or {}).get("ttft_s"),
        "prompt_tokens": (last.get("usage") or {}).get("prompt_tokens"),
        "cached_tokens": ((last.get("usage") or {}).get("prompt_tokens_details") or {}).get("cached_tokens"),
    }


def serve_scenario(pair: str | None, files: dict[str, str], max_tokens: int) -> list[dict]:
    server, url = start_server(pair, queue=8)  # serve's default queue
    try:
        model = httpx.get(url + "/models", timeout=60).json()["data"][0]["id"]
        calls = []
        for i, name in enumerate(["A", "B", "A", "B"]):
            one = stream_call(url, model, files[name] + "\n\n" + INSTRUCTIONS[i], max_tokens)
            calls.append({"request": i + 1, "file": name, **one})
            print(
                f"serve request {i + 1} ({name}): first text after {one['client_ttft_s']:.3f} s "
                f"(engine TTFT {one['engine_ttft_s']:.3f} s), {one['cached_tokens']}/{one['prompt_tokens']} prompt "
                "tokens cached",
                flush=True,
            )
        return calls
    finally:
        os.kill(server.pid, signal.SIGINT)
        server.wait(timeout=120)


def median(rows: list[dict], kind: str, key: str) -> float:
    return statistics.median(r[kind][key] for r in rows)


def cache_cost(pair: str | None, text: str) -> dict:
    """The cache's own cost, in one process: a 2k-token prompt read cold by both models, its two
    states saved (what a cold call pays after its reply), then a lookup that finds nothing (what a
    call on a new file pays before reading)."""
    from edgespec.decoding.backend import sync_cache
    from edgespec.engine.options import EngineOptions
    from edgespec.engine.prompt_cache import PromptCache

    with tempfile.TemporaryDirectory() as folder:
        cache = PromptCache(Path(folder))
        engine, _ = EngineOptions(pair=pair).check().open()
        try:
            ids = engine.chat_tokens([{"role": "user", "content": fresh(text) + "\n\n" + INSTRUCTIONS[0]}])
            start = time.perf_counter()
            for backend in (engine.target, engine.draft):
                sync_cache(backend, ids, 1)
            read_s = time.perf_counter() - start
            start = time.perf_counter()
            for backend in (engine.target, engine.draft):
                cache.save(backend)
            save_s = time.perf_counter() - start
            saved_bytes = sum(p.stat().st_size for p in Path(folder).glob("*.kv"))
            other = engine.chat_tokens([{"role": "user", "content": fresh(text[::-1])}])
            engine.empty_caches()
            start = time.perf_counter()
            gained = cache.warm(engine.target, other)
            miss_s = time.perf_counter() - start
        finally:
            engine.close()
    print(
        f"cache cost: both models read {len(ids)} tokens in {read_s:.1f} s; saving their states "
        f"({saved_bytes / 1e6:.0f} MB) took {save_s * 1000:.0f} ms; a miss took {miss_s * 1000:.1f} ms",
        flush=True,
    )
    return {
        "prompt_tokens": len(ids),
        "read_s": read_s,
        "save_s": save_s,
        "saved_bytes": saved_bytes,
        "miss_s": miss_s,
        "miss_gained": gained,
    }


def cold_and_warm_rounds(pair: str | None, text: str, rounds: int, max_tokens: int) -> list[dict]:
    """Per round a call with no cache, a cold call and a warm one on the same text; a line each."""
    rows = []
    for n in range(rounds):  # interleaved: a busy spell on the machine hits every kind of call alike
        row = {"round": n + 1, "no_cache": run_call(pair, fresh(text), INSTRUCTIONS[0], max_tokens, "--no-cache")}
        stdin = fresh(text)
        row["cold"] = run_call(pair, stdin, INSTRUCTIONS[0], max_tokens)
        row["warm"] = run_call(pair, stdin, INSTRUCTIONS[1], max_tokens)
        rows.append(row)
        print(
            " | ".join(
                f"{kind} {row[kind]['wall_s']:.2f} s (TTFT {row[kind]['ttft_s']:.2f} s, "
                f"{row[kind]['prompt_cached']}/{row[kind]['prompt_tokens']} cached)"
                for kind in ("no_cache", "cold", "warm")
            ),
            flush=True,
        )
    return rows


@click.command()
@click.option("-m", "--pair", default=None, help="Model pair (default: the registry's default).")
@click.option(
    "--input",
    "input_path",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=DEFAULT_INPUT,
    show_default=True,
    help="The file piped to every call.",
)
@click.option("--chars", default=7800, show_default=True, help="Characters of the file to use (7,800: ~1.9k tokens).")
@click.option(
    "--rounds",
    default=3,
    show_default=True,
    help="Interleaved rounds of no-cache, cold and warm calls (0: none, e.g. for --cost alone).",
)
@click.option("--max-tokens", default=200, show_default=True)
@click.option("--serve/--no-serve", default=True, show_default=True, help="Also the serve scenario.")
@click.option(
    "--cost/--no-cost",
    default=True,
    show_default=True,
    help="Also time saving a 2k-token prompt's states and a lookup that misses, in process.",
)
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False), default=None)
def main(pair, input_path, chars, rounds, max_tokens, serve, cost, json_path):
    whole = input_path.read_text()
    text, other = whole[:chars], whole[chars : 2 * chars] or whole[:chars]  # other: file B of the serve scenario
    rows = cold_and_warm_rounds(pair, text, rounds, max_tokens)
    summary = None
    if rows:
        summary = {
            "cold_over_warm_wall": median(rows, "cold", "wall_s") / median(rows, "warm", "wall_s"),
            "cold_over_warm_ttft": median(rows, "cold", "ttft_s") / median(rows, "warm", "ttft_s"),
            "saving_cost": median(rows, "cold", "wall_s") / median(rows, "no_cache", "wall_s") - 1,
        }
        print(
            f"medians of {rounds}: warm call {summary['cold_over_warm_wall']:.2f}x faster, TTFT "
            f"{summary['cold_over_warm_ttft']:.1f}x lower; saving adds {summary['saving_cost']:+.1%} to a cold call"
        )
    calls = serve_scenario(pair, {"A": fresh(text), "B": fresh(other)}, max_tokens) if serve else []
    costs = cache_cost(pair, text) if cost else None
    if json_path:
        result = {
            **provenance(),
            "pair": pair,
            "input": input_name(input_path),
            "chars": chars,
            "max_tokens": max_tokens,
            "runs": rows,
            "summary": summary,
            "serve": calls,
            "cost": costs,
        }
        write_result(json_path, result)


if __name__ == "__main__":
    main()
