"""What the order of a fill-in-the-middle prompt costs: tokens read again after each keystroke, and
what the model suggests: `psm` (prefix, suffix, middle, as llama.cpp writes it), `psm-near` (the
suffix past the line after the cursor moved before the prefix, as a chunk of the current file)
and `spm` (suffix first).

An editing session is replayed on held-out files (standard-library modules nobody here tuned on):
at each of `--sites` lines a file, the line is removed and typed again, a character at a time, with
the context llama.vim sends (the 256 lines above as the prefix, the line so far as the middle, the
64 lines below as the suffix, engine/infill.py). For every keystroke and order: the tokens the
engine reads again, from the start of the read chunk that holds the first changed token to the end
(what keeps a suggestion bit for bit a cold read's). That part needs only the tokenizer.

Then, at each site, the cursor after the line's indentation: the target's greedy suggestion up to
its first new line (the default pair, `auto`), for each order, scored against the line the file
really has (the same line exactly, and the share of its characters the suggestion gets right
before it parts).

    .venv/bin/python benchmarks/fim_order.py --json benchmarks/results/fim_order.json
"""

from __future__ import annotations

import statistics
import sys
import sysconfig
from pathlib import Path

import click

from edgespec.decoding.backend import common_prefix, kept_from_saved
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Token
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.engine.infill import ORDERS, FimMarks, Infill, Order, fim_marks, infill_prompt
from edgespec.engine.options import EngineOptions
from edgespec.util.provenance import provenance

sys.path.insert(0, str(Path(__file__).parent))
from result_file import write_result  # noqa: E402

STDLIB = Path(sysconfig.get_paths()["stdlib"])
DEFAULT_FILES = ("colorsys.py", "graphlib.py", "sched.py")
N_PREFIX, N_SUFFIX = 256, 64  # lines above and below the cursor that llama.vim sends
ROOM = 256  # the reply's room the server keeps (native_routes.DEFAULT_ROOM)


def sites(lines: list[str], n: int) -> list[int]:
    """`n` code lines spread over the file (past its first 10 lines), each with text after its indentation."""
    candidates = [i for i in range(10, len(lines)) if len(lines[i].strip()) >= 8]
    step = max(1, len(candidates) // n)
    return candidates[::step][:n]


def context(lines: list[str], y: int, typed: str) -> Infill:
    """The cursor on line `y`, which holds only `typed` so far (the rest of the line is yet to come)."""
    prefix = "".join(line + "\n" for line in lines[max(0, y - N_PREFIX) : y])
    suffix = "".join(line + "\n" for line in lines[y + 1 : y + 1 + N_SUFFIX])
    return Infill(prefix, "\n" + suffix, typed)


def reread(engine: Engine, before: list[int], after: list[int]) -> int:
    """Tokens of `after` read again when the cache holds the exact read of `before` (what a reply to
    it leaves: its whole chunks and tail chunks)."""
    return len(after) - kept_from_saved(engine.target, before, after)


def keystrokes(engine: Engine, marks: FimMarks, lines: list[str], y: int, order: Order) -> list[int]:
    line = lines[y]
    indent = len(line) - len(line.lstrip())
    prompts = [
        infill_prompt(engine.target, marks, context(lines, y, line[:i]), ROOM, order).tokens
        for i in range(indent, len(line) + 1)
    ]
    return [reread(engine, a, b) for a, b in zip(prompts, prompts[1:], strict=False)]


def suggestion(engine: Engine, marks: FimMarks, lines: list[str], y: int, order: Order) -> dict:
    line = lines[y]
    indent = line[: len(line) - len(line.lstrip())]
    prompt = infill_prompt(engine.target, marks, context(lines, y, indent), ROOM, order).tokens
    settings = GenerateSettings.build(48, SamplingParams(), DraftChoice.AUTO, PolicyChoice("auto"))  # greedy
    events = list(engine.generate_tokens(prompt, settings))
    text = "".join(e.text for e in events if isinstance(e, Token))
    first = (indent + text).split("\n")[0]
    summary = events[-1]
    right = common_prefix(list(first.strip()), list(line.strip()))
    return {
        "line": y + 1,
        "exact": first.strip() == line.strip(),
        "chars_right": right / len(line.strip()),
        "read_tokens": summary.target_read_tokens,
        "ttft_s": summary.ttft_s,
        "total_s": summary.total_s,
        "suggested": first,
    }


@click.command()
@click.option("--files", default=",".join(DEFAULT_FILES), show_default=True, help="Standard-library modules.")
@click.option("--sites", "n_sites", type=int, default=4, show_default=True, help="Lines typed again per file.")
@click.option("--no-suggestions", is_flag=True, help="Only count the tokens read again (no model run).")
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False), default=None)
def main(files: str, n_sites: int, no_suggestions: bool, json_path: Path | None) -> None:
    meta = provenance()  # before the run: the tree as it was when it started
    engine, _ = EngineOptions().check().open()
    try:
        marks = fim_marks(engine.target)
        result = measure(engine, marks, files.split(","), n_sites, not no_suggestions)
    finally:
        engine.close()
    result["meta"] = meta
    for order in ORDERS:
        r = result["orders"][order]
        click.echo(f"{order}: {r['reread']['median']} tokens read again a keystroke (median)", err=True)
        if "exact" in r:
            click.echo(f"  exact next line {r['exact']:.0%}, characters right {r['chars_right']:.0%}", err=True)
    if json_path:
        write_result(json_path, result)


def measure(engine: Engine, marks: FimMarks, files: list[str], n_sites: int, suggest: bool) -> dict:
    """Per order: the tokens read again per keystroke, and (with `suggest`) each site's suggestion.
    The orders take turns per file, psm first, so each reads from the cache the other left."""
    orders: dict[str, dict] = {o: {"reread_per_keystroke": [], "sites": []} for o in ORDERS}
    for name in files:
        lines = (STDLIB / name).read_text().splitlines()
        for y in sites(lines, n_sites):
            for order in ORDERS:
                orders[order]["reread_per_keystroke"] += keystrokes(engine, marks, lines, y, order)
                if suggest:
                    orders[order]["sites"].append({"file": name, **suggestion(engine, marks, lines, y, order)})
    for r in orders.values():
        counts = sorted(r["reread_per_keystroke"])
        r["reread"] = {
            "keystrokes": len(counts),
            "median": statistics.median(counts),
            "mean": statistics.fmean(counts),
            "p90": counts[int(0.9 * (len(counts) - 1))],
        }
        if r["sites"]:
            r["exact"] = statistics.fmean(s["exact"] for s in r["sites"])
            r["chars_right"] = statistics.fmean(s["chars_right"] for s in r["sites"])
    return {"files": files, "sites_per_file": n_sites, "n_prefix": N_PREFIX, "n_suffix": N_SUFFIX, "orders": orders}


if __name__ == "__main__":
    main()
