"""The sides benchmarks/peer.py times, each answering one `Case` cold, greedy, timed the same way.

edgespec's side is its engine (in process) or an `edgespec run` process. A peer is llama-cpp-python
as a user runs it, in one of its modes (`PeerMode`): `alone`, plain `Llama` (llama.cpp alone), or
`lookupN`, `Llama` built with its own speculative decoding, `draft_model=LlamaPromptLookupDecoding(
num_pred_tokens=N)` (`lookup2` as its docs advise on a CPU, `lookup10` its default). In a process a
peer is `peer.py answer`, which imports Python and llama_cpp only. Nothing here imports edgespec at
the top: the peer's process starts as llama.cpp alone would.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from peer_cases import Case

ALONE = "llama_cpp.Llama (llama-cpp-python's high-level API), greedy"
LOOKUP = (
    "llama_cpp.Llama with draft_model=llama_cpp.llama_speculative.LlamaPromptLookupDecoding("
    "num_pred_tokens={n}) (llama-cpp-python's own speculative decoding; max_ngram_size its default), greedy"
)


@dataclass(frozen=True)
class PeerMode:
    """How a peer answers: `alone` (num_pred_tokens None), or `lookupN`, drafting up to N tokens a
    pass by prompt lookup."""

    name: str
    num_pred_tokens: int | None = None

    @classmethod
    def parse(cls, name: str) -> PeerMode:
        if name == "alone":
            return cls(name)
        if m := re.fullmatch(r"lookup([1-9][0-9]*)", name):
            return cls(name, int(m.group(1)))
        raise ValueError(f"unknown peer {name!r}: alone, or lookupN (prompt lookup drafting N tokens, e.g. lookup2)")

    def record(self) -> dict:
        """What the mode ran, for the result's meta."""
        runtime = ALONE if self.num_pred_tokens is None else LOOKUP.format(n=self.num_pred_tokens)
        return {"runtime": runtime, "num_pred_tokens": self.num_pred_tokens}


def counted_lookup():
    """llama-cpp-python's `LlamaPromptLookupDecoding` as it is, counting the tokens it proposes
    (`drafted`): a lookup mode that proposed nothing would be llama.cpp alone under another name."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    class CountedLookup(LlamaPromptLookupDecoding):
        drafted = 0

        def __call__(self, input_ids, /, **kwargs):
            draft = super().__call__(input_ids, **kwargs)
            self.drafted += len(draft)
            return draft

    return CountedLookup()


class LlamaPeer:
    """llama-cpp-python's `Llama` on one GGUF as a user runs it, greedy, cold on every call: alone,
    or (`drafting`) built with the prompt lookup draft model, whose length each reply sets (nothing
    else of a `Llama` depends on it, so the lookup modes of a run share one)."""

    def __init__(self, path: Path, n_ctx: int, threads: int, n_gpu_layers: int, drafting: bool = False):
        import llama_cpp

        self._lc = llama_cpp
        self.lookup = counted_lookup() if drafting else None
        self.llm = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_threads=threads,
            n_threads_batch=threads,
            n_gpu_layers=n_gpu_layers,
            draft_model=self.lookup,
            # a draft model needs every position's logits; llama-cpp-python 0.3.36 turns that on but
            # sizes its score buffer by this argument, and a prompt past n_batch tokens then fails
            logits_all=drafting,
            verbose=False,
        )
        self._vocab = llama_cpp.llama_model_get_vocab(self.llm.model)

    def tokenize(self, rendered: str) -> list[int]:
        """A rendered chat prompt's ids as edgespec reads it: special tokens parsed, no BOS added."""
        return self.llm.tokenize(rendered.encode(), add_bos=False, special=True)

    def reply(self, ids: list[int], max_tokens: int, num_pred_tokens: int | None = None) -> Iterator[tuple[int, bytes]]:
        """Greedy tokens after `ids` with their text, until an end-of-generation token (not yielded,
        as edgespec yields none) or `max_tokens`; a drafting peer proposes `num_pred_tokens` a pass
        and counts them afresh. The context is reset first: nothing of an earlier call is reused."""
        if self.lookup is not None:
            self.lookup.num_pred_tokens, self.lookup.drafted = num_pred_tokens, 0
        self.llm.reset()
        tokens = self.llm.generate(list(ids), top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0)
        for n, token in enumerate(tokens, start=1):
            if self._lc.llama_vocab_is_eog(self._vocab, token):
                return
            yield token, self.llm.detokenize([token])
            if n >= max_tokens:
                return

    def drafted(self) -> dict:
        """The tokens the last reply's drafter proposed, for a drafting peer."""
        return {} if self.lookup is None else {"drafted": self.lookup.drafted}

    def close(self) -> None:
        self.llm.close()


def open_peers(modes: list[PeerMode], path: Path, n_ctx: int, threads: int, n_gpu_layers: int) -> dict:
    """Each mode's `LlamaPeer`: one `Llama` alone, and one with the draft model for every lookup mode."""
    shared: dict[bool, LlamaPeer] = {}
    for mode in modes:
        drafting = mode.num_pred_tokens is not None
        if drafting not in shared:
            shared[drafting] = LlamaPeer(path, n_ctx, threads, n_gpu_layers, drafting)
    return {mode.name: shared[mode.num_pred_tokens is not None] for mode in modes}


def timed(tokens: Iterable[int]) -> dict:
    """Time a reply from now, the request, to its last token: the first token's time (reading the
    prompt), decoding after it, and the whole; with the ids. A reply of no tokens is whole at its end."""
    t0 = time.perf_counter()
    ids, first, last = [], None, None
    for token in tokens:
        last = time.perf_counter()
        first = first or last
        ids.append(token)
    end = time.perf_counter()
    first, last = first or end, last or end
    return {"whole_s": last - t0, "ttft_s": first - t0, "decode_s": last - first, "tokens": len(ids), "ids": ids}


def edgespec_call(engine, case: Case, draft: str) -> dict:
    """One cold reply of edgespec's engine."""
    from edgespec.decoding.drafters import DraftChoice
    from edgespec.decoding.events import Token
    from edgespec.decoding.policy.plan import PolicyChoice
    from edgespec.decoding.sampling import SamplingParams
    from edgespec.engine.engine import GenerateSettings

    k = PolicyChoice("fixed", 0) if draft == "none" else PolicyChoice("auto")
    # greedy, live timings: what a user's call gets with the history on (the default), which is off
    # here only so that each call stays cold
    settings = GenerateSettings.build(case.max_tokens, SamplingParams(), DraftChoice(draft), k, live_timings=True)
    engine.empty_caches()
    events = engine.generate_tokens(case.ids, settings)
    return timed(e.id for e in events if isinstance(e, Token))


def peer_call(peer: LlamaPeer, case: Case, mode: PeerMode) -> dict:
    """One cold reply of a peer in `mode`."""
    return timed(token for token, _ in peer.reply(case.ids, case.max_tokens, mode.num_pred_tokens)) | peer.drafted()


class Failed(Exception):
    """A side that failed part way: one line, exit 1."""


def edgespec_process(case: Case, args: argparse.Namespace) -> dict:
    """One `edgespec run` process, the file piped in, the prompt cache off: process start to exit,
    with its own first-token and decoding times."""
    cmd = [sys.executable, "-m", "edgespec", "run", case.instruction or "", "--max-tokens", str(case.max_tokens)]
    cmd += ["--draft", args.draft, "--temperature", "0", "--color", "never"]
    cmd += (["-m", args.pair] if args.pair else []) + (["--config", str(args.config)] if args.config else [])
    return _run_timed(cmd, case.stdin, {**os.environ, "EDGESPEC_NO_CACHE": "1"})


def peer_process(case: Case, peer: dict, mode: PeerMode) -> dict:
    """One peer process in `mode` (`peer.py answer`): Python, llama_cpp, `Llama` loaded, the
    rendered prompt answered; process start to exit."""
    cmd = [sys.executable, str(Path(__file__).with_name("peer.py")), "answer", "--model", peer["path"], "--n-ctx"]
    cmd += [str(peer["n_ctx"]), "--threads", str(peer["threads"]), "--n-gpu-layers", str(peer["n_gpu_layers"])]
    cmd += ["--max-tokens", str(case.max_tokens), "--num-pred-tokens", str(mode.num_pred_tokens or 0)]
    return _run_timed(cmd, case.rendered, None)


def _run_timed(cmd: list[str], stdin: str | None, env: dict[str, str] | None) -> dict:
    """Run `cmd` (with `--stats-json` added) on `stdin`, timed from process start to exit; its stats
    file gives its first token and decoding after the load."""
    with tempfile.TemporaryDirectory() as tmp:
        stats = Path(tmp) / "stats.json"
        t0 = time.perf_counter()
        done = subprocess.run(
            [*cmd, "--stats-json", str(stats)], input=(stdin or "").encode(), capture_output=True, env=env
        )
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["(nothing on stderr)"]
            raise Failed(f"{cmd[1:4]}... exited {done.returncode}: {tail[0]}")
        s = json.loads(stats.read_text())
    return {
        "whole_s": wall,
        **{k: s[k] for k in ("ttft_s", "decode_s", "tokens", "prompt_tokens")},
        "load_s": s.get("load_s"),
        **({"drafted": s["drafted"]} if "drafted" in s else {}),
        "text": done.stdout.decode(errors="replace").rstrip("\n").encode(),  # both end their reply with a newline
    }


def answer(argv: list[str]) -> int:
    """A peer's process: load `Llama` (with prompt lookup drafting `--num-pred-tokens` tokens, when
    not 0), read a rendered prompt on stdin, stream the reply to stdout, write its figures to
    --stats-json. Imports nothing of edgespec."""
    ap = argparse.ArgumentParser(prog="peer.py answer")
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--n-ctx", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--num-pred-tokens", type=int, default=0)
    ap.add_argument("--stats-json", type=Path, required=True)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    peer = LlamaPeer(args.model, args.n_ctx, args.threads, args.n_gpu_layers, drafting=args.num_pred_tokens > 0)
    load_s = time.perf_counter() - t0
    ids = peer.tokenize(sys.stdin.read())

    def streamed() -> Iterator[int]:
        for token, piece in peer.reply(ids, args.max_tokens, args.num_pred_tokens or None):
            sys.stdout.buffer.write(piece)
            sys.stdout.flush()
            yield token

    r = timed(streamed())
    sys.stdout.buffer.write(b"\n")
    del r["ids"]
    args.stats_json.write_text(json.dumps({**r, **peer.drafted(), "prompt_tokens": len(ids), "load_s": load_s}))
    peer.close()
    return 0
