"""How fast the target reads a prompt by the size of the chunks it is cut into (`READ_CHUNK` in
`edgespec/backends/llamacpp.py`, set here on the loaded target). Smaller chunks cost a warm call
less to read again (a warm read resumes at a chunk's start); too small ones read slower. One
process, the sizes interleaved per round; the best and median tokens per second of each, and each
median against 512's.

    .venv/bin/python benchmarks/read_chunk.py --rounds 3 --json benchmarks/results/read_chunk.json
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import click

from edgespec.decoding.drafters import DraftChoice
from edgespec.engine.options import EngineOptions
from edgespec.util.provenance import provenance

sys.path.insert(0, str(Path(__file__).parent))
from result_file import write_result  # noqa: E402

SOURCES = ["engine/prompt_cache.py", "decoding/drafters.py"]


@click.command()
@click.option("--rounds", default=3, show_default=True)
@click.option("--tokens", default=2000, show_default=True, help="prompt length")
@click.option("--sizes", default="512,256,128,64,32", show_default=True)
@click.option("--json", "json_path", type=click.Path(path_type=Path))
def main(rounds: int, tokens: int, sizes: str, json_path: Path | None) -> None:
    try:
        chunks = [int(s) for s in sizes.split(",")]
    except ValueError:
        raise click.BadParameter(
            f"{sizes!r} is not a list of token counts (e.g. 512,128,32)", param_hint="--sizes"
        ) from None
    engine, _ = EngineOptions(draft=DraftChoice.NONE).check().open()  # the target as `run` loads it on this machine
    target = engine.target
    root = Path(__file__).parents[1] / "edgespec"
    prompt = target.tokenize("".join((root / s).read_text() for s in SOURCES))[:tokens]
    seconds: dict[int, list[float]] = {c: [] for c in chunks}
    for _ in range(rounds):
        for chunk in chunks:
            target.read_chunk = chunk
            target.truncate(0)
            start = time.perf_counter()
            target.eval(prompt, 1)
            seconds[chunk].append(time.perf_counter() - start)
    base = statistics.median(seconds[512]) if 512 in seconds else None
    rows = {
        str(c): {
            "best_tok_s": len(prompt) / min(s),
            "median_tok_s": len(prompt) / statistics.median(s),
            "seconds": s,
            "median_vs_512": base / statistics.median(s) if base else None,
        }
        for c, s in seconds.items()
    }
    for c, r in rows.items():
        against = "" if r["median_vs_512"] is None else f", {r['median_vs_512']:.3f}x of 512's"
        print(f"chunk {c:>4}: {r['best_tok_s']:6.1f} tok/s best, {r['median_tok_s']:6.1f} median{against}")
    if json_path:
        doc = {"meta": provenance(), "prompt_tokens": len(prompt), "rounds": rounds, "chunks": rows}
        write_result(json_path, doc)
    engine.close()


if __name__ == "__main__":
    main()
