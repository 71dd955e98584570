"""edgespec's default path against the peers a user would run instead: llama.cpp alone on the published
target, and llama-cpp-python's own speculative decoding on it.

A peer is llama-cpp-python's high-level `Llama` on the published Qwen2.5-Coder-1.5B Q4_K_M GGUF
(the model `--peer-model` of the registry, found in edgespec's store: never the pair's target,
which may be a layout tuned for this machine), greedy, with the same context, the same threads (the
physical cores: `Llama`'s own default of half the logical CPUs would be unfair to it) and the
same layers on a GPU as edgespec's target. `--peers` chooses its modes (peer_sides.PeerMode):
`alone` (llama.cpp alone, the default), and `lookupN`, `Llama(draft_model=LlamaPromptLookupDecoding(
num_pred_tokens=N))`: `lookup2` as its docs advise on a CPU, `lookup10` its default. edgespec's side
is what a user gets: the default pair (or `--pair`) opened as `edgespec run` opens it, drafting with
`auto`, whatever target file the pair resolves to (named in the JSON with its layout). Every side
reads the same prompt (peer_cases): edgespec's rendering of the chat template, or the plain text of
a completion prompt, as the same token ids.

Each prompt runs on every side in turn, in the order edgespec then `--peers` in even rounds and the
reverse in odd ones, cold every time (edgespec's caches emptied and no prompt cache, a peer's
context reset). A call is timed from the request to its last token, with the first token's time (the
prompt's reading) and decoding after it apart; a prompt's figure is the median of its `--rounds`
(peer_summary). Each side first answers one untimed call: edgespec measures its cost curve there on a
machine that has none saved (once per machine), and every side faults its weights in.

With `--whole-process` each `--file` is instead one `edgespec run` process (EDGESPEC_NO_CACHE=1)
against one process per peer mode (`peer.py answer`: Python and llama_cpp only, loading `Llama` and
answering the same rendered prompt), each timed from process start to exit. edgespec is imported
inside the functions that use it, so that process starts as llama.cpp alone would.

    .venv/bin/python benchmarks/peer.py --suite suites/heldout-edits.jsonl --suite dev:humaneval,mtbench \\
        --peers alone,lookup2,lookup10 --rounds 3 --json benchmarks/results/peer.json
    .venv/bin/python benchmarks/peer.py --file argparse.py:260 "Add type hints to every function." \\
        --whole-process --rounds 2 --json benchmarks/results/peer_files.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

sys.path.insert(0, str(Path(__file__).parent))
from peer_cases import BadArgument, Case, cases, read_inputs  # noqa: E402
from peer_sides import (  # noqa: E402
    Failed,
    PeerMode,
    answer,
    edgespec_call,
    edgespec_process,
    open_peers,
    peer_call,
    peer_process,
)
from peer_summary import EDGESPEC, summarise, table  # noqa: E402
from result_file import write_result  # noqa: E402

PUBLISHED_TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m"  # the default pair's target as published


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
    ap.add_argument("--peer-model", default=PUBLISHED_TARGET, help="the registry's model the peers run")
    ap.add_argument("--peers", default="alone", help="the peers' modes: alone, lookupN (e.g. alone,lookup2,lookup10)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if not (args.suite or args.file):
        raise BadArgument("nothing to run: give --suite or --file")
    if args.whole_process and not args.file:
        raise BadArgument("--whole-process times the --file cases: give at least one")
    try:
        args.peers = [PeerMode.parse(name) for name in dict.fromkeys(args.peers.split(","))]
    except ValueError as e:
        raise BadArgument(f"--peers: {e}") from None
    for flag in ("rounds", "limit", "max_tokens"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise BadArgument(f"--{flag.replace('_', '-')} must be at least 1, not {value}")
    return args


def setup(args: argparse.Namespace) -> tuple:
    """edgespec's engine as `edgespec run` opens it (no prompt cache), and the peers' settings:
    the published model's file from the store, the engine's context, threads and GPU layers, and
    what each mode runs."""
    from edgespec.backends import llamacpp_runtime
    from edgespec.decoding.drafters import DraftChoice
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
        "modes": {mode.name: mode.record() for mode in args.peers},
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
    """Every case on every side, interleaved by round; the result document."""
    from edgespec.util.provenance import input_name, provenance

    prompts, files = read_inputs(args)
    engine, peer_settings, mine = setup(args)
    rows: list[dict] = []
    try:
        todo = cases(engine, args, prompts, files)
        in_process = [c for c in todo if not (args.whole_process and c.stdin is not None)]
        processes = [c for c in todo if args.whole_process and c.stdin is not None]
        if in_process:
            rows += calls(engine, peer_settings, in_process, args)
    finally:
        engine.close()
    if processes:
        sides = {EDGESPEC: lambda c: edgespec_process(c, args)}
        sides |= {m.name: lambda c, m=m: peer_process(c, peer_settings, m) for m in args.peers}
        warm = Case("warm-up", "", [], 8, processes[0].stdin, processes[0].instruction, processes[0].rendered)
        for side in sides.values():
            side(warm)
        rows += interleaved(processes, sides, args.rounds, "process")
    prompts, suites = summarise(rows)
    recorded_peer = peer_settings | {"path": input_name(peer_settings["path"])}  # the file, not where it was kept
    meta = {**provenance(), "edgespec": mine, "peer": recorded_peer, "rounds": args.rounds}
    return {"meta": meta, "rows": rows, "prompts": prompts, "summary": suites}


def calls(engine, peer_settings: dict, todo: list[Case], args: argparse.Namespace) -> list[dict]:
    """The cases as calls in this process: edgespec's engine and each peer mode's `Llama`, every side
    warmed by one untimed call first."""
    s = peer_settings
    peers = open_peers(args.peers, Path(s["path"]), engine.n_ctx, s["threads"], s["n_gpu_layers"])
    try:
        sides = {EDGESPEC: lambda c: edgespec_call(engine, c, args.draft)}
        sides |= {m.name: lambda c, m=m: peer_call(peers[m.name], c, m) for m in args.peers}
        warm = Case("warm-up", "", todo[0].ids, 8)
        for side in sides.values():
            side(warm)
        return interleaved(todo, sides, args.rounds, "call")
    finally:
        for peer in {id(p): p for p in peers.values()}.values():
            peer.close()


def interleaved(todo: list[Case], sides: dict, rounds: int, how: str) -> list[dict]:
    """Each case on every side per round, in `sides`' order (edgespec first) in even rounds and the
    reverse in odd ones; each peer's row says where its output first parted from edgespec's of the
    same round."""
    from edgespec.quality.divergence import first_divergence

    rows = []
    for round_ in range(rounds):
        order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
        for case in todo:
            got = {side: sides[side](case) for side in order}
            out = {side: got[side].pop("ids" if how == "call" else "text") for side in order}
            for side in order:
                r = got[side]
                parted = None if side == EDGESPEC else first_divergence(out[EDGESPEC], out[side])
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
        write_result(args.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
