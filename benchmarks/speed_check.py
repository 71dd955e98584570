"""Speed figures of the core engine issue, measured in one run on this machine:

1. plain decoding through edgespec (--draft none) against llama-cpp-python's own generation,
   same model, threads and prompt (interleaved repetitions, medians);
2. host-side time per verify step (sampling, bookkeeping) at K=8 with the real vocabulary size,
   using a zero-cost backend so only edgespec's own work is timed;
3. peak RSS of `edgespec run` on the default pair.

    .venv/bin/python benchmarks/speed_check.py [--tokens 128] [--reps 3]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

from edgespec.decoding.copying.ngram import NgramDrafter
from edgespec.decoding.decoder import SpeculativeDecoder
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Step, Summary
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.policy.simple_policies import FixedK
from edgespec.decoding.sampling import SamplingParams, warp
from edgespec.engine.engine import GenerateSettings
from edgespec.engine.options import EngineOptions

PROMPT = "Write a Python function that returns the n-th Fibonacci number, with a docstring."


def llama_cpp_python_rate(path, tokens: int, threads: int):
    """A function timing llama-cpp-python's own streamed greedy chat completion (decode tok/s)."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=4096, n_threads=threads, n_threads_batch=threads, verbose=False)
    messages = [{"role": "user", "content": PROMPT}]

    def once() -> float:
        llm.reset()
        stream = llm.create_chat_completion(messages, max_tokens=tokens, temperature=0.0, stream=True)
        first, n = None, 0
        for chunk in stream:
            if chunk["choices"][0]["delta"].get("content"):
                n += 1
                if first is None:
                    first = time.perf_counter()
        return (n - 1) / (time.perf_counter() - first)

    return once, llm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    engine, _ = EngineOptions(draft=DraftChoice.NONE).check().open()
    threads = engine.pair.threads or __import__("edgespec.backends.llamacpp_runtime", fromlist=["x"]).default_threads()
    theirs, llm = llama_cpp_python_rate(engine.target.path, args.tokens, threads)
    settings = GenerateSettings.build(args.tokens, SamplingParams(), DraftChoice.NONE, PolicyChoice("fixed", 0))
    messages = [{"role": "user", "content": PROMPT}]

    def ours() -> float:
        engine.target.truncate(0)
        summary = [e for e in engine.chat(messages, settings) if isinstance(e, Summary)][0]
        return summary.decode_tokens_per_s

    ours(), theirs()  # warm-up
    mine, other = [], []
    for _ in range(args.reps):
        mine.append(ours())
        other.append(theirs())
    m, o = statistics.median(mine), statistics.median(other)
    print(
        f"plain decoding: edgespec {m:.1f} tok/s, llama-cpp-python {o:.1f} tok/s, ratio {m / o:.3f} "
        f"(runs: {[round(x, 1) for x in mine]} vs {[round(x, 1) for x in other]})"
    )
    del llm
    # nine real rows of target logits: what a K=8 verification works on
    engine.target.truncate(0)
    ids = engine.chat_tokens(messages)
    rows = np.array(engine.target.eval(ids, 9))
    engine.close()

    for label, params in (
        ("greedy", SamplingParams()),
        ("sampled T=0.7 top-k 20 top-p 0.8", SamplingParams(0.7, 20, 0.8, seed=1)),
    ):
        print(f"host time per verify step at K=8 ({label}): {host_ms_per_step(rows, params):.2f} ms")
    for params in (SamplingParams(0.7, 20, 0.8), SamplingParams(0.7, 0, 0.9), SamplingParams(1.0)):
        best = min(timed(lambda params=params: [warp(row, params) for row in rows]) for _ in range(20))
        print(
            f"warping all 9 rows of a K=8 step, worst case (every draft accepted), T={params.temperature} "
            f"top-k {params.top_k} top-p {params.top_p}: {best * 1000:.2f} ms (best of 20)"
        )

    cmd = [sys.executable, "-m", "edgespec", "run", PROMPT, "--max-tokens", "64"]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(f"peak RSS of `edgespec run` (default pair, draft model loaded): {peak_kb / 1024:.0f} MiB")


def timed(f) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


class ZeroCostBackend:
    """Returns fixed rows of logits instantly: the round's time is edgespec's host work alone."""

    name = "zero"

    def __init__(self, rows: np.ndarray, n_ctx: int = 8192):
        self.rows = rows
        self.n_vocab, self.n_ctx, self.eos_ids, self.cached = rows.shape[1], n_ctx, frozenset(), []

    def eval(self, tokens, n_logits):
        self.cached.extend(tokens)
        return self.rows[:n_logits]

    def eval_tree(self, pending, ids, parents):
        self._path_start = len(self.cached) + 1
        return self.eval([pending, *ids], len(ids) + 1)

    def keep_path(self, path):
        del self.cached[self._path_start + len(path) :]

    def truncate(self, n):
        del self.cached[n:]

    def token_bytes(self, token_id):
        return b"x"


def host_ms_per_step(rows: np.ndarray, params: SamplingParams) -> float:
    """Mean wall time of a K=8 round (n-gram drafts of a repeating prompt) on a zero-cost target."""
    backend = ZeroCostBackend(rows)
    prompt = list(range(50)) * 20  # every suffix has an earlier match: full 8-token drafts
    decoder = SpeculativeDecoder(backend, FixedK(8, "ngram"), [NgramDrafter()])
    steps = 0
    t0 = time.perf_counter()
    for e in decoder.generate(prompt, 2000, params):
        steps += isinstance(e, Step)
    return (time.perf_counter() - t0) * 1000 / steps


if __name__ == "__main__":
    main()
