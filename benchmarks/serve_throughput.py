"""Does the server slow decoding? Streaming tokens/s measured by a client against `edgespec run`.

Starts `edgespec serve` (a process of its own, greedy), then for each prompt, interleaved, one
`edgespec run --stats-json` (its decode tokens/s and TTFT, from the engine's Summary) and one
streamed request through the server with the official `openai` client, timed where the client
sees the chunks arrive: decode tokens/s = (completion tokens - 1) / (last chunk - first chunk),
and the TTFT the server adds = the client's time to the first text minus the engine's own TTFT
for that request (`metrics.ttft_s`). Then a repeated ~2,000-token prefix (TTFT cold against warm)
and a burst of concurrent clients (each completes or gets 503 with Retry-After; the server's
memory before and after two bursts). The issue's targets: >= 0.95x run's tokens/s, < 20 ms added
to TTFT, >= 5x lower TTFT on the repeated prefix.

    .venv/bin/python benchmarks/serve_throughput.py                     # the default pair, 4 prompts
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click
import httpx
import openai
import psutil

from edgespec.bench import suites

EDGESPEC = [sys.executable, "-m", "edgespec"]


def start_server(pair: str | None, queue: int) -> tuple[subprocess.Popen, str]:
    args = [*EDGESPEC, "serve", "--port", "0", "--temperature", "0", "--queue", str(queue)] + (
        ["-m", pair] if pair else []
    )
    server = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in server.stderr:
        if "serving" in line:
            threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()  # keep it drained
            return server, re.search(r"(http://\S+/v1)", line).group(1)
    raise SystemExit(f"the server did not start (exit {server.wait()})")


def run_once(pair: str | None, prompt: str, max_tokens: int, *flags: str, stdin: str | None = None) -> dict:
    """One greedy `edgespec run` (its output thrown away): its --stats-json figures."""
    with tempfile.TemporaryDirectory() as tmp:
        stats = Path(tmp) / "stats.json"
        args = [*EDGESPEC, "run", prompt, "--max-tokens", str(max_tokens), "--temperature", "0"]
        args += ["--color", "never", "--stats-json", str(stats), *flags] + (["-m", pair] if pair else [])
        subprocess.run(args, input=stdin, text=True, check=True, stdout=subprocess.DEVNULL)
        return json.loads(stats.read_text())


def stream_once(client: openai.OpenAI, model: str, messages: list[dict], max_tokens: int) -> dict:
    start = time.perf_counter()
    arrivals, last = [], None
    for chunk in client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.perf_counter())
        last = chunk
    tokens = last.usage.completion_tokens
    metrics = last.model_extra["metrics"]
    span = arrivals[-1] - arrivals[0]
    return {
        "tokens": tokens,
        "rate": (tokens - 1) / span if span else 0.0,
        "client_ttft": arrivals[0] - start,
        "engine_ttft": metrics["ttft_s"],
        "engine_rate": metrics["decode_tokens_per_s"],
        "prompt_tokens": last.usage.prompt_tokens,
    }


def burst(url: str, model: str, clients: int) -> list[tuple[int, str | None]]:
    def one(i: int) -> tuple[int, str | None]:
        body = {
            "model": model,
            "messages": [{"role": "user", "content": f"Name {i + 2} prime numbers."}],
            "max_tokens": 16,
            "stream": True,
        }
        with httpx.stream("POST", url + "/chat/completions", json=body, timeout=600) as r:
            text = "".join(r.iter_lines())
            return r.status_code, r.headers.get("retry-after") if r.status_code == 503 else text.endswith("[DONE]")

    with ThreadPoolExecutor(clients) as pool:
        return list(pool.map(one, range(clients), timeout=900))


def served_against_run(client: openai.OpenAI, model: str, texts: dict, pair, max_tokens: int, rounds: int) -> None:
    """Per prompt, `edgespec run`'s decode tokens/s against the client's and the server engine's,
    and the TTFT the server adds."""
    runs: dict[str, list[float]] = {id: [] for id in texts}
    served: dict[str, list[dict]] = {id: [] for id in texts}
    added = []
    for _ in range(rounds):  # interleaved: a busy spell on this machine hits both sides alike
        for id, text in texts.items():
            runs[id].append(run_once(pair, text, max_tokens)["decode_tokens_per_s"])
            one = stream_once(client, model, [{"role": "user", "content": text}], max_tokens)
            served[id].append(one)
            added.append(one["client_ttft"] - one["engine_ttft"])
    ratios = []
    for id in texts:
        run_rate = statistics.median(runs[id])
        client_rate = statistics.median(o["rate"] for o in served[id])
        engine_rate = statistics.median(o["engine_rate"] for o in served[id])
        ratios.append(client_rate / run_rate)
        print(
            f"{id}: run {run_rate:.1f} tok/s; served {client_rate:.1f} tok/s at the client, {engine_rate:.1f} "
            f"in the server's engine ({served[id][0]['tokens']} tokens, medians of {rounds})"
        )
    print(f"served / run tokens/s: median {statistics.median(ratios):.3f} ({', '.join(f'{r:.3f}' for r in ratios)})")
    print(f"TTFT added by the server: median {statistics.median(added) * 1000:.1f} ms, max {max(added) * 1000:.1f} ms")


def repeated_prefix(client: openai.OpenAI, model: str) -> None:
    """TTFT of a ~2,000-token prompt, cold and then again with the same prefix."""
    source = (Path(suites.__file__).parents[1] / "decoding" / "policy" / "controller.py").read_text()[:7800]
    prefix = [{"role": "system", "content": "You review Python code."}]
    cold = stream_once(client, model, prefix + [{"role": "user", "content": source + "\n\nWhat does Rate do?"}], 1)
    warm = stream_once(client, model, prefix + [{"role": "user", "content": source + "\n\nWhat is best_k?"}], 1)
    print(
        f"repeated prefix of {cold['prompt_tokens']} tokens: engine TTFT {cold['engine_ttft']:.3f} -> "
        f"{warm['engine_ttft']:.3f} s ({cold['engine_ttft'] / warm['engine_ttft']:.1f}x); client "
        f"{cold['client_ttft']:.3f} -> {warm['client_ttft']:.3f} s "
        f"({cold['client_ttft'] / warm['client_ttft']:.1f}x)"
    )


def bursts(server: subprocess.Popen, url: str, model: str, clients: int) -> None:
    """Two bursts of `clients` concurrent requests: each completes or gets 503; the server's memory."""
    process = psutil.Process(server.pid)
    for n in range(2):
        t0 = time.perf_counter()
        results = burst(url, model, clients)
        done = sum(1 for status, ok in results if status == 200 and ok is True)
        busy = [after for status, after in results if status == 503]
        other = [status for status, _ in results if status not in (200, 503)]
        print(
            f"burst {n + 1}: {clients} clients in {time.perf_counter() - t0:.1f} s: {done} complete, {len(busy)} "
            f"503 (Retry-After {sorted(set(busy))}), other {other}; server RSS "
            f"{process.memory_info().rss / 2**20:.0f} MiB"
        )
    print(f"health after: {httpx.get(url.removesuffix('/v1') + '/health').json()}")


@click.command()
@click.option("-m", "--pair", default=None)
@click.option(
    "--prompts",
    "n_prompts",
    default=2,
    show_default=True,
    help="Chat prompts of each of the dev set's chat suites (mtbench, code-edit).",
)
@click.option("--max-tokens", default=96, show_default=True)
@click.option("--rounds", default=2, show_default=True, help="Interleaved rounds per prompt (medians).")
@click.option("--clients", default=16, show_default=True)
def main(pair, n_prompts, max_tokens, rounds, clients):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` stops the server too (finally)
    chats = suites.load_suite(suites.DEV_SET)
    texts = {
        p.id: p.messages[-1]["content"]
        for suite in ("mtbench", "code-edit")  # single user messages
        for p in [p for p in chats if p.suite == suite][:n_prompts]
    }
    server, url = start_server(pair, queue=8)
    try:
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
        model = client.models.list().data[0].id
        stream_once(client, model, [{"role": "user", "content": "Say hi."}], 8)  # warm-up
        served_against_run(client, model, texts, pair, max_tokens, rounds)
        repeated_prefix(client, model)
        bursts(server, url, model, clients)
    finally:
        os.kill(server.pid, signal.SIGINT)
        print(f"server exit: {server.wait(timeout=60)}")


if __name__ == "__main__":
    main()
