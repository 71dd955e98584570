"""The development set's `auto` rounds as edgespec ships them (edgespec/data/auto_rounds.json), derived
from a committed bench run: how many target passes `auto` ran at each number of drafted tokens k,
and the tokens those passes decoded. `decoding.costs.call_prediction.typical_call_s` replays them on each
candidate layout's verify curve to predict a typical call.

The rounds must come from `auto` on the pair's published file: the reference every layout is
compared with, and the steepest curve of them, on which `auto` drafts least. Rounds recorded on a
flatter layout price the published file on drafts it would not choose, and the prediction favours
the flatter layouts by that much. A run on another file is refused (exit 1), with no file written.

    .venv/bin/python benchmarks/auto_rounds.py benchmarks/results/bench_dev.json --json edgespec/data/auto_rounds.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from edgespec.models.config import load_registry

sys.path.insert(0, str(Path(__file__).parent))
from result_file import write_result  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ABOUT = (
    "Target passes of `auto` by tokens drafted (k), over the development set's replies: a typical reply's "
    "rounds, replayed on a candidate layout's verify curve to predict its decoding time "
    "(edgespec.decoding.costs.call_prediction.typical_call_s)."
)


def rounds(run: dict, pair: str) -> dict[str, object]:
    """`auto`'s passes by k over the run's rows of `pair`, and the tokens they decoded (a reply's
    first token comes from reading the prompt, not from a pass)."""
    rows = [r for r in run["rows"] if r["mode"] == "auto" and r["pair"] == pair]
    passes = Counter(k for r in rows for k in r["k_trace"])
    return {"tokens": sum(r["tokens"] - 1 for r in rows), "passes_by_k": {str(k): passes[k] for k in sorted(passes)}}


def wrong_file(run: dict, pair: str) -> str | None:
    """Why the run's `auto` rows are not rounds on `pair`'s published file, or None."""
    published = load_registry().pair(pair).target.name
    target = run["meta"].get("targets", {}).get(pair)
    if target != published:
        return f"its {pair} target was {target or 'not recorded'}, not the published file {published}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a committed result file of `edgespec bench --modes ar,auto`")
    parser.add_argument("--pair", default=None, help="the pair whose rounds are taken (default: the default pair)")
    parser.add_argument("--json", type=Path, required=True, help="the file to write")
    args = parser.parse_args(argv)
    run = json.loads(args.source.read_text())
    pair = load_registry().pair(args.pair).name
    if why := wrong_file(run, pair):
        print(f"auto_rounds.py: {args.source}: {why}", file=sys.stderr)
        return 1
    where = args.source.resolve()
    source = where.relative_to(ROOT).as_posix() if where.is_relative_to(ROOT) else str(args.source)
    made = run["meta"]
    doc = {"about": ABOUT, "source": source, "command": made["command"], "commit": made["commit"]}
    write_result(args.json, doc | rounds(run, pair))
    return 0


if __name__ == "__main__":
    sys.exit(main())
