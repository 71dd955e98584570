"""edgespec's default path against the peer a user would run instead: llama.cpp alone on the published target.

The peer is llama-cpp-python's high-level `Llama` on the published Qwen2.5-Coder-1.5B Q4_K_M GGUF
(the model `--peer-model` of the registry, found in edgespec's store: never the pair's target,
which may be a layout tuned for this machine), greedy, with the same context, the same threads (the
physical cores: `Llama`'s own default of half the logical CPUs would be unfair to it) and the
same layers on a GPU as edgespec's target. edgespec's side is what a user gets: the default pair
(or `--pair`) opened as `edgespec run` opens it, drafting with `auto`, whatever target file the
pair resolves to (named in the JSON with its layout). Both read the same prompt: edgespec's
rendering of the chat template, or the plain text of a completion prompt, as the same token ids.

Each prompt runs on both sides in turn, the first side alternating by round, cold every time
(edgespec's caches emptied and no prompt cache, the peer's context reset). A call is timed from
the request to its last token, with the first token's time (the prompt's reading) and decoding
after it apart; a prompt's figure is the median of its `--rounds`. Each side first answers one
untimed call: edgespec measures its cost curve there on a machine that has none saved (once per
machine), and both sides fault their weights in.

Prompts: bench suites (`--suite FILE[:SUITES]`, `dev` for the development set edgespec ships) and
real files with an instruction (`--file FILE[:LINES] INSTRUCTION`, a bare name from Python's
standard library), piped in as `edgespec run` reads them. With `--whole-process` each file is
instead one `edgespec run` process (EDGESPEC_NO_CACHE=1) against one peer process (`peer.py
answer`: Python and llama_cpp only, loading `Llama` and answering the same rendered prompt), each
timed from process start to exit. edgespec is imported inside the functions that use it, so that
process starts as llama.cpp alone would.

    .venv/bin/python benchmarks/peer.py --suite suites/heldout-edits.jsonl --suite dev:humaneval,mtbench \\
        --rounds 3 --json benchmarks/results/peer.json
    .venv/bin/python benchmarks/peer.py --file argparse.py:260 "Add type hints to every function." \\
        --whole-process --rounds 2 --json benchmarks/results/peer_files.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

PUBLISHED_TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m"  # the default pair's target as published
FILE_MAX_TOKENS = 200  # a file's reply budget when --max-tokens is not given
SIDES = ("edgespec", "peer")
STDLIB = Path(os.__file__).parent


@dataclass(frozen=True)
class Case:
    """One prompt as both sides read it: token ids, and for a file the text `edgespec run` is piped
    and the rendered prompt the peer's process reads."""

    id: str
    suite: str
    ids: list[int]
    max_tokens: int
    stdin: str | None = None  # a file's text (piped into `edgespec run`)
    instruction: str | None = None
    rendered: str | None = None  # the chat template's text of the prompt (the peer process tokenizes it)


class LlamaAlone:
    """llama.cpp alone as a user runs it: `llama_cpp.Llama` on one GGUF, greedy, cold on every call."""

    def __init__(self, path: Path, n_ctx: int, threads: int, n_gpu_layers: int):
        import llama_cpp

        self._lc = llama_cpp
        self.llm = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_threads=threads,
            n_threads_batch=threads,
            n_gpu_layers=n_gpu_layers,
            verbose=False,
        )
        self._vocab = llama_cpp.llama_model_get_vocab(self.llm.model)

    def tokenize(self, rendered: str) -> list[int]:
        """A rendered chat prompt's ids as edgespec reads it: special tokens parsed, no BOS added."""
        return self.llm.tokenize(rendered.encode(), add_bos=False, special=True)

    def reply(self, ids: list[int], max_tokens: int) -> Iterator[tuple[int, bytes]]:
        """Greedy tokens after `ids` with their text, until an end-of-generation token (not yielded,
        as edgespec yields none) or `max_tokens`. The context is reset first: nothing of an earlier
        call is reused."""
        self.llm.reset()
        tokens = self.llm.generate(list(ids), top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0)
        for n, token in enumerate(tokens, start=1):
            if self._lc.llama_vocab_is_eog(self._vocab, token):
                return
            yield token, self.llm.detokenize([token])
            if n >= max_tokens:
                return

    def close(self) -> None:
        self.llm.close()


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


def ratio(peer: float, mine: float) -> float | None:
    """The peer's time over edgespec's (above 1: edgespec is faster); None where edgespec's is nothing."""
    return peer / mine if mine > 0 else None


def summarise(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """Per prompt, each side's medians over rounds and whether the two outputs were equal in every
    round (else where they first parted, the earliest over rounds: tokens for a call, characters
    of the text's UTF-8 for a process); per suite, the peer's summed whole-reply time over edgespec's and
    the median of the per-prompt ratios (above 1: edgespec is faster), the same of the first token
    and of decoding, tokens each side generated and the share of prompts with equal outputs."""
    prompts = []
    for key in dict.fromkeys((r["suite"], r["id"]) for r in rows):
        mine = [r for r in rows if (r["suite"], r["id"]) == key]
        entry = {"suite": key[0], "id": key[1], "timed": mine[0]["timed"], "prompt_tokens": mine[0]["prompt_tokens"]}
        for side in SIDES:
            runs = [r for r in mine if r["side"] == side]
            entry[side] = {
                k: statistics.median(r[k] for r in runs) for k in ("whole_s", "ttft_s", "decode_s", "tokens")
            }
        parted = [r["first_difference"] for r in mine if r["side"] == "peer" and r["first_difference"] is not None]
        entry["equal"] = not parted
        entry["first_difference"] = min(parted) if parted else None
        prompts.append(entry)
    suites = []
    for suite in dict.fromkeys(p["suite"] for p in prompts):
        mine = [p for p in prompts if p["suite"] == suite]

        def summed(key: str, mine: list[dict] = mine) -> float | None:
            return ratio(sum(p["peer"][key] for p in mine), sum(p["edgespec"][key] for p in mine))

        per_prompt = [r for p in mine if (r := ratio(p["peer"]["whole_s"], p["edgespec"]["whole_s"])) is not None]
        suites.append(
            {
                "suite": suite,
                "timed": mine[0]["timed"],
                "prompts": len(mine),
                "prompt_tokens": [p["prompt_tokens"] for p in mine],
                **{f"{side}_whole_s": sum(p[side]["whole_s"] for p in mine) for side in SIDES},
                **{f"{side}_tokens": sum(p[side]["tokens"] for p in mine) for side in SIDES},
                "whole_ratio": summed("whole_s"),
                "whole_ratio_median": statistics.median(per_prompt) if per_prompt else None,
                "ttft_ratio": summed("ttft_s"),
                "decode_ratio": summed("decode_s"),
                "equal": sum(p["equal"] for p in mine),
                "equal_share": sum(p["equal"] for p in mine) / len(mine),
                "first_differences": sorted(p["first_difference"] for p in mine if not p["equal"]),
            }
        )
    return prompts, suites


def times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(suites: list[dict]) -> list[str]:
    """The summary as printed on stdout: one line per suite, each ratio the peer's time over
    edgespec's (above 1: edgespec is faster)."""
    lines = [
        "suite (prompts) | timed | whole s edgespec / peer | whole ratio (median) | TTFT | decode | tokens | equal"
    ]
    for s in suites:
        parted = (
            f" (first differences at {', '.join(map(str, s['first_differences']))})" if s["first_differences"] else ""
        )
        lines.append(
            f"{s['suite']} ({s['prompts']}) | {s['timed']} | {s['edgespec_whole_s']:.1f} / {s['peer_whole_s']:.1f} | "
            f"{times(s['whole_ratio'])} ({times(s['whole_ratio_median'])}) | {times(s['ttft_ratio'])} | "
            f"{times(s['decode_ratio'])} | {s['edgespec_tokens']:g} / {s['peer_tokens']:g} | "
            f"{s['equal']}/{s['prompts']}{parted}"
        )
    return lines


# -- the cases -------------------------------------------------------------------------------


def read_file_case(spec: str) -> tuple[str, str]:
    """'FILE[:LINES]' (a bare name is looked up in Python's standard library) -> (label, text)."""
    name, _, lines = spec.partition(":")
    path = Path(name) if Path(name).exists() else STDLIB / name
    if not path.is_file():
        raise BadArgument(f"--file {spec}: no such file (nor in {STDLIB})")
    text = path.read_text(encoding="utf-8")
    if lines:
        if not lines.isdigit():
            raise BadArgument(f"--file {spec}: LINES must be a number of lines")
        text = "".join(text.splitlines(keepends=True)[: int(lines)])
    return spec, text


def suite_prompts(spec: str, limit: int | None) -> list:
    """The prompts of 'FILE[:SUITES]' ('dev': the development set edgespec ships)."""
    from edgespec.bench import suites

    name, _, wanted = spec.partition(":")
    path = suites.DEV_SET if name == "dev" else Path(name)
    return suites.select(suites.load_suite(path), limit, wanted or None)


def read_inputs(args: argparse.Namespace) -> tuple[list, list[tuple[str, str, str]]]:
    """The suites' prompts and the files' (label, text, instruction), every one read and checked
    before any model loads."""
    prompts = [p for spec in args.suite for p in suite_prompts(spec, args.limit)]
    return prompts, [(*read_file_case(spec), instruction) for spec, instruction in args.file]


def cases(engine, args: argparse.Namespace, prompts: list, files: list[tuple[str, str, str]]) -> list[Case]:
    """Every prompt of the run, tokenized by the engine (its chat template, or plain text); a file
    as `edgespec run` reads it piped in, with the instruction."""
    from edgespec.bench.modes import prompt_ids
    from edgespec.cli.run import compose_message

    out = [Case(p.id, p.suite, prompt_ids(engine, p), args.max_tokens or p.max_tokens) for p in prompts]
    for label, text, instruction in files:
        messages = [{"role": "user", "content": compose_message(text, instruction)}]
        rendered = engine.target.chat_prompt(messages)
        ids = engine.target.tokenize(rendered, special=True)
        out.append(Case(label, "files", ids, args.max_tokens or FILE_MAX_TOKENS, text, instruction, rendered))
    return out


# -- one call of each side -------------------------------------------------------------------


def edgespec_call(engine, case: Case, draft: str) -> dict:
    """One cold reply of edgespec's engine."""
    from edgespec.decoding.events import Token
    from edgespec.decoding.policy.plan import KSetting
    from edgespec.engine.engine import GenerateSettings

    k = KSetting("fixed", 0) if draft == "none" else KSetting("auto")
    settings = GenerateSettings(max_tokens=case.max_tokens, draft=draft, k=k)  # greedy
    engine.empty_caches()
    events = engine.generate_tokens(case.ids, settings)
    return timed(e.id for e in events if isinstance(e, Token))


def peer_call(peer: LlamaAlone, case: Case) -> dict:
    """One cold reply of llama.cpp alone."""
    return timed(token for token, _ in peer.reply(case.ids, case.max_tokens))


def edgespec_process(case: Case, args: argparse.Namespace) -> dict:
    """One `edgespec run` process, the file piped in, the prompt cache off: process start to exit,
    with its own first-token and decoding times."""
    with tempfile.TemporaryDirectory() as tmp:
        stats = Path(tmp) / "stats.json"
        cmd = [sys.executable, "-m", "edgespec", "run", case.instruction or "", "--max-tokens", str(case.max_tokens)]
        cmd += ["--draft", args.draft, "--temperature", "0", "--color", "never", "--stats-json", str(stats)]
        cmd += (["-m", args.pair] if args.pair else []) + (["--config", str(args.config)] if args.config else [])
        t0 = time.perf_counter()
        done = subprocess.run(cmd, input=(case.stdin or "").encode(), capture_output=True, env=_no_cache_env())
        wall = time.perf_counter() - t0
        _check(done, cmd)
        s = json.loads(stats.read_text())
    return _process_row(wall, s, done.stdout.decode(errors="replace"))


def peer_process(case: Case, peer: dict) -> dict:
    """One peer process (`peer.py answer`): Python, llama_cpp, `Llama` loaded, the rendered prompt
    answered; process start to exit."""
    with tempfile.TemporaryDirectory() as tmp:
        stats = Path(tmp) / "stats.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "answer", "--model", peer["path"], "--n-ctx"]
        cmd += [str(peer["n_ctx"]), "--threads", str(peer["threads"]), "--n-gpu-layers", str(peer["n_gpu_layers"])]
        cmd += ["--max-tokens", str(case.max_tokens), "--stats-json", str(stats)]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, input=(case.rendered or "").encode(), capture_output=True)
        wall = time.perf_counter() - t0
        _check(done, cmd)
        s = json.loads(stats.read_text())
    return _process_row(wall, s, done.stdout.decode(errors="replace"))


def _no_cache_env() -> dict[str, str]:
    return {**os.environ, "EDGESPEC_NO_CACHE": "1"}


def _check(done: subprocess.CompletedProcess, cmd: list[str]) -> None:
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["(nothing on stderr)"]
        raise Failed(f"{cmd[1:4]}... exited {done.returncode}: {tail[0]}")


def _process_row(wall: float, stats: dict, text: str) -> dict:
    """A process's figures: its wall clock is the whole reply (loading included); its stats file
    gives its first token and decoding after the load."""
    return {
        "whole_s": wall,
        "ttft_s": stats["ttft_s"],
        "decode_s": stats["decode_s"],
        "tokens": stats["tokens"],
        "prompt_tokens": stats["prompt_tokens"],
        "load_s": stats.get("load_s"),
        "text": text.rstrip("\n").encode(),  # `edgespec run` ends its reply with a newline
    }


def answer(argv: list[str]) -> int:
    """The peer's process: load `Llama`, read a rendered prompt on stdin, stream the reply to stdout,
    write its figures to --stats-json. Imports nothing of edgespec."""
    ap = argparse.ArgumentParser(prog="peer.py answer")
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--n-ctx", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--stats-json", type=Path, required=True)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    peer = LlamaAlone(args.model, args.n_ctx, args.threads, args.n_gpu_layers)
    load_s = time.perf_counter() - t0
    ids = peer.tokenize(sys.stdin.read())

    def streamed() -> Iterator[int]:
        for token, piece in peer.reply(ids, args.max_tokens):
            sys.stdout.buffer.write(piece)
            sys.stdout.flush()
            yield token

    r = timed(streamed())
    sys.stdout.buffer.write(b"\n")
    peer.close()
    del r["ids"]
    args.stats_json.write_text(json.dumps({**r, "prompt_tokens": len(ids), "load_s": load_s}))
    return 0


# -- the run ---------------------------------------------------------------------------------


class BadArgument(Exception):
    """A setting of the run that cannot work: one line, exit 2."""


class Failed(Exception):
    """A side that failed part way: one line, exit 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, not argparse's usage block."""
        raise BadArgument(message)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from edgespec.decoding.drafters import DraftChoice

    ap = _Parser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--suite", action="append", default=[], metavar="FILE[:SUITES]", help="a bench suite ('dev')")
    ap.add_argument("--file", nargs=2, action="append", default=[], metavar=("FILE[:LINES]", "INSTRUCTION"))
    ap.add_argument("--whole-process", action="store_true", help="time each --file as whole processes")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None, help="the first N prompts of each suite")
    ap.add_argument("--max-tokens", type=int, default=None, help="default: a suite prompt's own, 200 for a file")
    ap.add_argument("-m", "--pair", default=None, help="edgespec's pair (default: the default pair)")
    ap.add_argument("--config", type=Path, default=None, help="a models.toml, as edgespec's --config")
    ap.add_argument("--draft", default="auto", choices=[c.value for c in DraftChoice], help="edgespec's --draft")
    ap.add_argument("--peer-model", default=PUBLISHED_TARGET, help="the registry's model the peer runs")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if not (args.suite or args.file):
        raise BadArgument("nothing to run: give --suite or --file")
    if args.whole_process and not args.file:
        raise BadArgument("--whole-process times the --file cases: give at least one")
    for flag in ("rounds", "limit", "max_tokens"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise BadArgument(f"--{flag.replace('_', '-')} must be at least 1, not {value}")
    return args


def setup(args: argparse.Namespace) -> tuple:
    """edgespec's engine as `edgespec run` opens it (no prompt cache), and the peer's settings:
    the published model's file from the store, the engine's context, threads and GPU layers."""
    from edgespec.backends import llamacpp_runtime
    from edgespec.engine.choices import DraftChoice
    from edgespec.engine.options import EngineOptions
    from edgespec.models.config import load_registry
    from edgespec.models.layouts import read_layout
    from edgespec.models.store import Store
    from edgespec.util.provenance import input_name

    registry = load_registry(args.config)
    if args.peer_model not in registry.models:
        raise BadArgument(f"--peer-model {args.peer_model!r} is not in the registry")
    checked = EngineOptions(pair=args.pair, config=args.config, draft=DraftChoice(args.draft)).check()
    pair = checked.pair
    if pair.backend != "llamacpp":
        raise BadArgument(f"pair {pair.name!r} runs on {pair.backend}; the peer is llama.cpp")
    peer_path = Store().ensure(registry.models[args.peer_model], pair.name)
    engine, _ = checked.open()
    threads = pair.threads or llamacpp_runtime.default_threads()
    peer = {
        "model": args.peer_model,
        "path": str(peer_path),
        "layout": read_layout(peer_path).text(),
        "runtime": "llama_cpp.Llama (llama-cpp-python's high-level API), greedy",
        "n_ctx": engine.n_ctx,
        "threads": threads,
        "n_gpu_layers": llamacpp_runtime.gpu_layers(pair.n_gpu_layers),
    }
    mine = {
        "pair": pair.name,
        "draft": args.draft,
        "target": input_name(engine.target.path),
        "target_layout": read_layout(engine.target.path).text(),
        "draft_model": input_name(engine.draft.path) if engine.draft is not None else None,
        "n_ctx": engine.n_ctx,
        "threads": threads,
        "prompt_cache": False,
    }
    return engine, peer, mine


def measure(args: argparse.Namespace) -> dict:
    """Every case on both sides, interleaved by round; the result document."""
    from edgespec.util.provenance import input_name, provenance

    prompts, files = read_inputs(args)
    engine, peer_settings, mine = setup(args)
    rows: list[dict] = []
    try:
        todo = cases(engine, args, prompts, files)
        in_process = [c for c in todo if not (args.whole_process and c.stdin is not None)]
        processes = [c for c in todo if args.whole_process and c.stdin is not None]
        if in_process:
            peer = LlamaAlone(
                Path(peer_settings["path"]), engine.n_ctx, peer_settings["threads"], peer_settings["n_gpu_layers"]
            )
            try:
                warm = Case("warm-up", "", in_process[0].ids, 8)
                edgespec_call(engine, warm, args.draft)
                peer_call(peer, warm)
                sides = {
                    "edgespec": lambda c: edgespec_call(engine, c, args.draft),
                    "peer": lambda c: peer_call(peer, c),
                }
                rows += interleaved(in_process, sides, args.rounds, "call")
            finally:
                peer.close()
    finally:
        engine.close()
    if processes:
        sides = {"edgespec": lambda c: edgespec_process(c, args), "peer": lambda c: peer_process(c, peer_settings)}
        warm = Case("warm-up", "", [], 8, processes[0].stdin, processes[0].instruction, processes[0].rendered)
        for side in SIDES:
            sides[side](warm)
        rows += interleaved(processes, sides, args.rounds, "process")
    prompts, suites = summarise(rows)
    recorded_peer = peer_settings | {"path": input_name(peer_settings["path"])}  # the file, not where it was kept
    meta = {**provenance(), "edgespec": mine, "peer": recorded_peer, "rounds": args.rounds}
    return {"meta": meta, "rows": rows, "prompts": prompts, "summary": suites}


def interleaved(todo: list[Case], sides: dict, rounds: int, how: str) -> list[dict]:
    """Each case on both sides per round, edgespec first in even rounds and the peer in odd ones;
    each peer row says where its output first parted from edgespec's of the same round."""
    from edgespec.quality.divergence import first_divergence

    rows = []
    for round_ in range(rounds):
        order = SIDES if round_ % 2 == 0 else SIDES[::-1]
        for case in todo:
            got = {side: sides[side](case) for side in order}
            out = {side: got[side].pop("ids" if how == "call" else "text") for side in SIDES}
            for side in order:
                r = got[side]
                parted = first_divergence(out["edgespec"], out["peer"]) if side == "peer" else None
                rows.append(
                    {"suite": case.suite, "id": case.id, "side": side, "round": round_, "timed": how}
                    | {"prompt_tokens": len(case.ids)}
                    | r
                    | {"first_difference": parted}
                )
                print(
                    f"round {round_} {case.id} {side}: whole {r['whole_s']:.2f} s, TTFT {r['ttft_s']:.2f} s, "
                    f"decode {r['decode_s']:.2f} s, {r['tokens']} tokens",
                    file=sys.stderr,
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["answer"]:
        return answer(argv[1:])
    from edgespec.util.errors import EdgespecError, UsageError

    try:
        args = parse_args(argv)
        doc = measure(args)
    except BadArgument as e:
        print(f"peer.py: {e}", file=sys.stderr)
        return 2
    except Failed as e:
        print(f"peer.py: {e}", file=sys.stderr)
        return 1
    except EdgespecError as e:
        print(f"peer.py: {e}", file=sys.stderr)
        return 2 if isinstance(e, UsageError) else 1
    print("\n".join(table(doc["summary"])))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
