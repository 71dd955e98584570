"""Does a static corpus pay? `auto` copying from a folder of code every prompt may quote (by default
the Python standard library's own source on this machine) against `auto` without it, and `ar`.

The three modes run interleaved per prompt, each generation cold, greedy; the corpus is indexed
once, as the repository source (`engine/repository.py`), and is the same for every prompt. The
figures: whole reply (the prompt's reading included) `ar` over each mode, the tokens the corpus's
drafts gave, and the index's size. A corpus is worth shipping only if it pays on held-out prompts.

    .venv/bin/python benchmarks/static_corpus.py --suite suites/heldout-edits.jsonl \\
        --json benchmarks/results/static_corpus.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import sysconfig
import time
from pathlib import Path

from edgespec.bench.modes import AR, Mode, measure
from edgespec.bench.suites import DEV_SET, load_suite, select
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.copy_sources import DraftSources, open_sources
from edgespec.engine.options import EngineOptions
from edgespec.util.provenance import input_name, provenance

sys.path.insert(0, str(Path(__file__).parent))
from result_file import write_result  # noqa: E402

AUTO = Mode("auto", DraftChoice.AUTO, PolicyChoice("auto"))
CORPUS = "auto+corpus"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, default=DEV_SET)
    ap.add_argument("--suites", default=None, help="only these suites of the file (comma-separated)")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--corpus", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    engine, _ = EngineOptions().check().open()
    prompts = select(load_suite(args.suite, engine.n_ctx), args.limit, args.suites)
    start = time.perf_counter()
    corpus = open_sources(engine.target, None, context=[args.corpus])
    index_s = time.perf_counter() - start
    plain = DraftSources()
    greedy = SamplingParams(temperature=0.0)
    rows = []
    try:
        for n, prompt in enumerate(prompts):
            order = [AR, AUTO, CORPUS] if n % 2 == 0 else [CORPUS, AUTO, AR]
            for mode in order:
                engine.sources = corpus if mode == CORPUS else plain
                row = measure(engine, prompt, AUTO if mode == CORPUS else mode, greedy)
                rows.append(
                    {
                        "id": prompt.id,
                        "mode": mode if mode == CORPUS else mode.name,
                        "whole_s": row.ttft_s + row.decode_s,
                        "tokens": row.tokens,
                        "from_corpus": sum(len(r.path) for r in row.rounds if r.drafter == "repository"),
                        "ids": row.output_ids,
                    }
                )
                print(json.dumps({k: v for k, v in rows[-1].items() if k != "ids"}), flush=True)
    finally:
        engine.close()
    summary = summarize(rows)
    summary["corpus_tokens"] = corpus.repository.size if corpus.repository is not None else 0
    summary["index_s"] = round(index_s, 2)
    print(json.dumps(summary, indent=1))
    if args.json:
        meta = {**provenance(), "command": "benchmarks/static_corpus.py " + " ".join(sys.argv[1:])}
        meta["corpus"] = input_name(args.corpus)
        for row in rows:
            del row["ids"]
        write_result(args.json, {"meta": meta, "rows": rows, "summary": summary})


def summarize(rows: list[dict]) -> dict:
    """Whole-reply seconds summed per mode, ar over each; the median per-prompt ratio; tokens the
    corpus gave; replies equal to ar's."""
    by_mode: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_mode.setdefault(row["mode"], {})[row["id"]] = row
    ar = by_mode["ar"]
    out: dict = {"prompts": len(ar)}
    for mode in ("auto", CORPUS):
        mine = by_mode[mode]
        out[mode] = {
            "whole_ratio": round(sum(r["whole_s"] for r in ar.values()) / sum(r["whole_s"] for r in mine.values()), 3),
            "median_ratio": round(statistics.median(ar[i]["whole_s"] / mine[i]["whole_s"] for i in ar), 3),
            "equal_to_ar": sum(mine[i]["ids"] == ar[i]["ids"] for i in ar),
            "from_corpus": sum(r["from_corpus"] for r in mine.values()),
        }
    return out


if __name__ == "__main__":
    main()
