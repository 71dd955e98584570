"""Inline completion in a keystroke replay: llama.vim's requests against `edgespec serve`, and the
same suggestions from llama-cpp-python's own server.

The replay (`editor_session.py`): a function's body typed again into a held-out file of this
Python's standard library, a request at every pause. Two parts, each on a server of its own with a
fresh edgespec home (no history or prompt cache from another part or an earlier run):

- **session**: the requests llama.vim sends, in its shapes and order, to `/infill`: at each pause a
  quick suggestion (`t_max_predict_ms` 250, streamed here so that its first token is seen: the one
  field changed), the speculative follow-up as if it were accepted, and the ring's chunks read in
  the background (`n_predict` 0). Measured: time to the suggestion's first token and to the whole
  quick suggestion, the follow-up's time, and the tokens each request read again
  (`timings.prompt_n`; `tokens_cached` were kept).
- **compare**: at each pause one whole suggestion (greedy, up to `--whole-tokens` tokens or the end
  of the middle, no time limit), from edgespec's `/infill` and from llama-cpp-python's
  `/v1/completions` (`python -m llama_cpp.server`, prefix cache on, the same GGUF), both streamed,
  the side going first alternating by pause. The peer is given the prompt edgespec builds, as text
  with its special tokens (the FIM marks and the ring's chunks): llama-cpp-python 0.3.36 writes
  token 0 for each fill-in-the-middle mark of a `suffix` request (its `TODO: Fix`), so its own
  `suffix` path would ask the model something else. Each side first reads the file's first pause
  untimed. Measured: time to first token and to the whole suggestion, and whether the texts agree.

Targets (issue 48): median first token <= 1.0 s; median whole suggestion >= 2x faster than the
peer's; median tokens read again after a keystroke on the current line <= 64.

    flock /tmp/edgespec-real.lock .venv/bin/python benchmarks/editor_replay.py \\
        --peer-python /tmp/peer-venv/bin/python --json benchmarks/results/editor_replay.json
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import click
import httpx

sys.path.insert(0, str(Path(__file__).parent))
from editor_servers import (  # noqa: E402
    InfillText,
    edgespec_server,
    error_text,
    figures,
    pair_files,
    peer_server,
    timed_post,
)
from editor_session import Edit, LlamaVim, Pause, function_body, local_context, pauses, shown  # noqa: E402
from result_file import write_result  # noqa: E402

STDLIB = Path(os.__file__).parent
# llama_cpp.server's defaults warp even a greedy choice (repeat_penalty 1.1, top_k 40, min_p 0.05)
PEER_GREEDY = {"repeat_penalty": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
FILES = ("graphlib.py:TopologicalSorter.add", "sched.py:scheduler.enterabs", "colorsys.py:rgb_to_hls")


def _row(pause: Pause, n: int, request: str, result: dict) -> dict:
    """A request's record: where, what, status, times, the server's figures; never the code sent."""
    last = result["last"]
    return {
        "pause": n,
        "line": pause.y,
        "col": pause.x,
        "kind": pause.kind,
        "request": request,
        "status": result["status"],
        "first_s": result["first_s"],
        "whole_s": result["whole_s"],
        "chars": len(result["text"]),
        **figures(last),
        **({"error": error_text(last)} if result["status"] != 200 else {}),
    }


def session(client: httpx.Client, root: str, edit: Edit, every: int, limit: int) -> list[dict]:
    """One file's replay in llama.vim's shapes against `/infill`; a record per request sent."""
    vim = LlamaVim(edit.name.split(":")[0])
    opened = edit.lines[: edit.start] + edit.lines[edit.end :]
    vim.open(opened, edit.start)
    rows = []
    body = vim.ring_update()  # the file is opened in normal mode: the ring is read within a second
    if body:
        rows.append(
            _row(Pause(opened, edit.start, 0, "open", ""), -1, "ring", timed_post(client, root + "/infill", body))
        )
    previous_y = None
    for n, pause in enumerate(list(pauses(edit, every))[:limit]):
        same_line = previous_y == pause.y
        previous_y = pause.y
        quick = vim.fim(pause.lines, pause.y, pause.x, [], greedy=True)
        if quick is None:
            rows.append(
                _row(pause, n, "cached", {"status": 200, "first_s": None, "whole_s": 0, "text": "", "last": {}})
            )
            continue
        got = timed_post(client, root + "/infill", quick | {"stream": True})
        rows.append(_row(pause, n, "quick", got) | {"same_line": same_line})
        follow = vim.fim(pause.lines, pause.y, pause.x, shown(got["text"], pause.lines, pause.y, pause.x), True)
        if follow is not None:
            rows.append(_row(pause, n, "follow", timed_post(client, root + "/infill", follow)))
        ring = vim.ring_update() if pause.kind == "end" else None  # idle 3 s at a line's end
        if ring is not None:
            rows.append(_row(pause, n, "ring", timed_post(client, root + "/infill", ring)))
    return rows


def _whole_bodies(vim: LlamaVim, pause: Pause, tokens: int, prompt: InfillText, model: str) -> tuple[dict, dict]:
    """The two requests of a pause in the comparison: edgespec's /infill, and the peer's
    /v1/completions with the prompt edgespec builds for it, as text."""
    ctx = local_context(pause.lines, pause.y, pause.x, [], -1)
    mine = {"input_prefix": ctx.prefix, "input_suffix": ctx.suffix, "prompt": ctx.middle, "input_extra": vim.extra()}
    mine |= {"n_predict": tokens, "temperature": 0.0, "stream": True, "cache_prompt": True}
    text, _ = prompt.text(mine)
    peer = {"model": model, "prompt": text, "max_tokens": tokens, "temperature": 0.0, "stream": True}
    return mine, peer


def compare(
    client: httpx.Client,
    roots: dict,
    edit: Edit,
    limits: tuple[int, int, int],
    prompt: InfillText,
    peer_extra=PEER_GREEDY,
) -> list:
    """One file's pauses (`limits`: a pause every N-th word, pauses, a suggestion's tokens), a whole
    suggestion from each side per pause (`peer_extra` added to the peer's body); a record per request."""
    every, limit, tokens = limits
    vim = LlamaVim(edit.name.split(":")[0])
    vim.open(edit.lines[: edit.start] + edit.lines[edit.end :], edit.start)
    vim.ring_update()
    todo = list(pauses(edit, every))[:limit]
    model = client.get(roots["edgespec"] + "/v1/models").json()["data"][0]["id"]  # the peer takes any name
    vim.fim(todo[0].lines, todo[0].y, todo[0].x, [], greedy=True)  # its ring, as the timed request sends it
    mine, peer = _whole_bodies(vim, todo[0], tokens, prompt, model)
    timed_post(client, roots["edgespec"] + "/infill", mine | {"n_predict": 0, "stream": False})
    timed_post(client, roots["peer"] + "/v1/completions", peer | peer_extra | {"max_tokens": 1, "stream": False})
    rows = []
    for n, pause in enumerate(todo):
        vim.fim(pause.lines, pause.y, pause.x, [], greedy=True)  # the ring as llama.vim keeps it
        mine, peer = _whole_bodies(vim, pause, tokens, prompt, model)
        calls = {"edgespec": ("/infill", mine), "peer": ("/v1/completions", peer | peer_extra)}
        texts = {}
        for side in ("edgespec", "peer") if n % 2 == 0 else ("peer", "edgespec"):
            path, body = calls[side]
            got = timed_post(client, roots[side] + path, body)
            texts[side] = got["text"]
            rows.append(_row(pause, n, side, got))
        for row in rows[-2:]:
            row["same_text"] = texts["edgespec"] == texts["peer"]
    return rows


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarise_session(rows: list[dict]) -> dict:
    """Per kind of request: how many, the median times and tokens read; the keystroke figures."""
    out: dict = {"requests": len(rows), "errors": sum(r["status"] != 200 for r in rows)}
    for kind in ("quick", "follow", "ring", "cached"):
        mine = [r for r in rows if r["request"] == kind and r["status"] == 200]
        out[kind] = {
            "n": len(mine),
            "median_first_token_s": median([r["first_s"] for r in mine]),
            "median_whole_s": median([r["whole_s"] for r in mine]),
            "median_prompt_n": median([r.get("prompt_n") for r in mine]),
            "median_tokens_cached": median([r.get("tokens_cached") for r in mine]),
        }
    keystrokes = [r for r in rows if r["request"] == "quick" and r.get("same_line") and r["status"] == 200]
    out["keystroke_on_the_line"] = {
        "n": len(keystrokes),
        "median_prompt_n": median([r.get("prompt_n") for r in keystrokes]),
    }
    return out


def summarise_compare(rows: list[dict]) -> dict:
    sides = {}
    for side in ("edgespec", "peer"):
        mine = [r for r in rows if r["request"] == side and r["status"] == 200]
        sides[side] = {
            "n": len(mine),
            "median_first_token_s": median([r["first_s"] for r in mine]),
            "median_whole_s": median([r["whole_s"] for r in mine]),
            "median_chars": median([r["chars"] for r in mine]),
        }
    pairs = {}
    for r in rows:
        pairs.setdefault((r["file"], r["pause"]), {})[r["request"]] = r
    ratios = [p["peer"]["whole_s"] / p["edgespec"]["whole_s"] for p in pairs.values() if len(p) == 2]
    whole = sides["edgespec"]["median_whole_s"], sides["peer"]["median_whole_s"]
    return {
        **sides,
        "errors": sum(r["status"] != 200 for r in rows),
        "peer_over_edgespec_whole": whole[1] / whole[0] if None not in whole else None,
        "median_of_pause_ratios": median(ratios),
        "same_text": sum(p["edgespec"].get("same_text", False) for p in pairs.values() if len(p) == 2),
        "pauses": len(pairs),
    }


def targets(session: dict | None, compared: dict | None) -> dict:
    first = session["quick"]["median_first_token_s"] if session else None
    reread = session["keystroke_on_the_line"]["median_prompt_n"] if session else None
    ratio = compared["peer_over_edgespec_whole"] if compared else None
    return {
        "median_first_token_s <= 1.0": _met(first, first is not None and first <= 1.0),
        "median whole suggestion >= 2x faster than the peer": _met(ratio, ratio is not None and ratio >= 2),
        "median tokens read again after a keystroke on the line <= 64": _met(
            reread, reread is not None and reread <= 64
        ),
    }


def _met(value: float | None, met: bool) -> dict:
    """A target's figure and whether it is met (None: the part that measures it did not run)."""
    return {"value": value, "met": None if value is None else met}


def run_compare(args: dict, edits: list[Edit], info: dict) -> list[dict]:
    rows = []
    prompt = InfillText(info["target"], info["context"], args["fim_order"])
    limits = args["every"], args["compare_pauses"], args["whole_tokens"]
    with edgespec_server(args["pair"], _order_flag(args)) as mine:
        with peer_server(args["peer_python"], info["target"], info["context"], info["threads"]) as peer:
            with httpx.Client() as client:
                for edit in edits:
                    got = [
                        r | {"file": edit.name}
                        for r in compare(client, {"edgespec": mine, "peer": peer}, edit, limits, prompt)
                    ]
                    rows += got
                    _say(edit.name, summarise_compare(got))
    return rows


def _order_flag(args: dict) -> list[str]:
    return ["--fim-order", args["fim_order"]] if args["fim_order"] else []


def run_session(args: dict, edits: list[Edit]) -> list[dict]:
    rows = []
    with edgespec_server(args["pair"], _order_flag(args)) as mine:
        with httpx.Client() as client:
            for edit in edits:
                got = [r | {"file": edit.name} for r in session(client, mine, edit, args["every"], args["pauses"])]
                rows += got
                _say(edit.name, summarise_session(got))
    return rows


def _say(name: str, figures: dict) -> None:
    print(f"{name}: {json.dumps(figures)}", file=sys.stderr, flush=True)


@click.command()
@click.option("--file", "files", multiple=True, default=FILES, show_default=True, help="FILE:FUNCTION of the stdlib")
@click.option("--lines", default=10, show_default=True, help="lines of each body typed again")
@click.option("--every", default=3, show_default=True, help="a pause after every N-th word of a line")
@click.option("--pauses", default=16, show_default=True, help="pauses per file in the session")
@click.option("--compare-pauses", default=6, show_default=True, help="pauses per file in the comparison")
@click.option("--whole-tokens", default=32, show_default=True, help="a whole suggestion's most tokens")
@click.option("--fim-order", type=click.Choice(["psm", "psm-near", "spm"]), help="serve's (default: serve's default)")
@click.option("--peer-python", default=None, help="a Python with llama_cpp.server's packages; none: no comparison")
@click.option("--parts", default="session,compare", show_default=True, help="session, compare or both")
@click.option("-m", "--pair", default=None)
@click.option("--json", "json_path", type=click.Path(path_type=Path))
def main(files, json_path, **args) -> None:
    from edgespec.util.provenance import input_name, provenance

    meta = provenance() | {"loadavg_start": os.getloadavg()}
    info = pair_files(args["pair"])
    edits = [function_body(STDLIB / f.split(":")[0], f.split(":")[1], args["lines"]) for f in files]
    parts = args["parts"].split(",")
    session_rows = run_session(args, edits) if "session" in parts else []
    compare_rows = run_compare(args, edits, info) if "compare" in parts and args["peer_python"] else []
    summary = {"session": summarise_session(session_rows)} if session_rows else {}
    if compare_rows:
        summary["compare"] = summarise_compare(compare_rows)
    summary["targets"] = targets(summary.get("session"), summary.get("compare"))
    meta |= {"loadavg_end": os.getloadavg(), "pair": info["pair"], "target": input_name(info["target"])}
    # the peer's interpreter is where this machine keeps it: recorded as what it is, not by its path
    settings = args | {"peer_python": "a venv with llama-cpp-python[server]" if args["peer_python"] else None}
    meta |= {"context": info["context"], "threads": info["threads"], "settings": settings, "files": list(files)}
    print(json.dumps(summary, indent=1))
    if json_path:
        doc = {"meta": meta, "summary": summary, "session": session_rows, "compare": compare_rows}
        write_result(json_path, doc)


if __name__ == "__main__":
    main()
