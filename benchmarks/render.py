"""Every table and figure of measured results in README.md, docs/benchmarks.md and docs/design.md,
and the bench plot, rendered from the JSON files under benchmarks/results/ (and edgespec/data/).

Results are data: a page never holds a figure typed by hand. Each table sits between two marker
comments, `<!-- results:NAME -->` and `<!-- /results:NAME -->`, and this script replaces what is
between them with the block NAME rendered from the result files, each followed by the command,
commit and machine that made it. Where a machine changes what a run shows (the structured suite's
gain follows the machine's verify curve), the same runs from another machine sit in a sub-folder
named after its CPU (`results/intel-xeon/`), and those blocks give a row per machine.
tests/test_render_results.py renders the committed files and fails when a page differs, so a table
cannot drift from the run behind it.

A page shows only runs of a committed tree: a figure from uncommitted code is a figure of code no
one can check out again. The script refuses to render while any result file says its tree had
uncommitted changes (`"dirty": true`), or does not say what made it (the command, the commit and
whether the tree was clean, as edgespec.util.provenance records them), one line per file. The
measured tables edgespec ships under edgespec/data/ and a page renders (the layouts' quality) are
held to the same rule (render_sources.data_unfit). A figure that prose states outside a block
names the result file and field it comes from (tests/test_render_results.py checks the pages).

    make results        # = .venv/bin/python benchmarks/render.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))  # the render_* modules beside this script
from render_copying import sessions, static_corpus, suffix_index_costs  # noqa: E402
from render_editors import editor_replay, fim_order, health_latency, llama_vim  # noqa: E402
from render_known import known_text, steady_passes  # noqa: E402
from render_prompts import chat_read_ahead, prompt_cache, prompt_cache_cost, read_chunk  # noqa: E402
from render_quality import QUALITY_TABLE, layout_quality  # noqa: E402
from render_sources import RESULTS, ROOT, load, refused, refused_data  # noqa: E402
from render_speed import (  # noqa: E402
    BENCH_FILES,
    bench,
    busy_machine,
    busy_threads,
    draft_window,
    drafting_ceiling,
    peer,
    structured,
    verify_steps,
)

PAGES = ("README.md", "docs/benchmarks.md", "docs/design.md")
PLOT = "assets/bench_cpu.png"  # the whole-reply speedups of the dev set and held-out edits

_BLOCK = re.compile(r"(<!-- results:([\w-]+) -->\n)(.*?)(<!-- /results:\2 -->)", re.S)
_OPENING = re.compile(r"<!-- results:([\w-]+) -->")

BLOCKS = {
    "bench": bench,
    "structured": structured,
    "prompt-cache": prompt_cache,
    "prompt-cache-cost": prompt_cache_cost,
    "read-chunk": read_chunk,
    "chat-read-ahead": chat_read_ahead,
    "health-latency": health_latency,
    "draft-window": draft_window,
    "drafting-ceiling": drafting_ceiling,
    "layout-quality": layout_quality,
    "peer": peer,
    "known-text": known_text,
    "steady-passes": steady_passes,
    "busy-machine": busy_machine,
    "busy-threads": busy_threads,
    "verify-steps": verify_steps,
    "suffix-index-costs": suffix_index_costs,
    "sessions": sessions,
    "static-corpus": static_corpus,
    "fim-order": fim_order,
    "editor-replay": editor_replay,
    "llama-vim": llama_vim,
}


def render_page(text: str, folder: Path = RESULTS) -> str:
    """`text` with every results block rendered again from the files in `folder`."""
    opened = _OPENING.findall(text)
    closed = [m.group(2) for m in _BLOCK.finditer(text)]
    if opened != closed:
        raise ValueError(f"unclosed results marker: {sorted(set(opened) - set(closed)) or opened}")
    unknown = [name for name in opened if name not in BLOCKS]
    if unknown:
        raise ValueError(f"unknown results block {unknown[0]!r}; known: {', '.join(BLOCKS)}")
    return _BLOCK.sub(lambda m: m.group(1) + "\n".join(BLOCKS[m.group(2)](folder)) + "\n" + m.group(4), text)


def plot(folder: Path, path: Path) -> None:
    """The bench's own plot (edgespec.bench.report.plot) of the dev set and held-out edits."""
    from edgespec.bench.report import plot as bench_plot

    docs = [load(folder, name) for name in BENCH_FILES[:2]]  # one row per suite: the dev set, the held-out edits
    rows = [SimpleNamespace(**row) for doc in docs for row in doc["rows"]]
    bench_plot(path, rows, [s for doc in docs for s in doc["summary"]])


def main(folder: Path = RESULTS, data: tuple[Path, ...] = (QUALITY_TABLE,)) -> int:
    """Render every page and the plot from `folder`, after refusing, one line each, any result file
    and any of the package's `data` files (those the pages render) of an uncommitted tree."""
    if refusals := refused(folder) + refused_data(list(data)):
        for line in refusals:
            print(f"render.py: refused {line}; run it again on a committed tree", file=sys.stderr)
        return 1
    for page in PAGES:
        path = ROOT / page
        text = path.read_text()
        rendered = render_page(text, folder)
        if rendered != text:
            path.write_text(rendered)
            print(f"rendered {page}")
    plot(folder, ROOT / PLOT)
    print(f"plotted {PLOT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
