"""The block of the layouts' quality table (benchmarks/render.py), which edgespec ships as package
data (edgespec/data/layout_quality.json) rather than as a machine's result."""

from __future__ import annotations

import json
from pathlib import Path

from render_sources import ROOT, source

QUALITY_TABLE = ROOT / "edgespec" / "data" / "layout_quality.json"  # shipped with the package


def layout_quality(folder: Path) -> list[str]:
    """The quality table edgespec ships for the built-in target's layouts (benchmarks/layout_quality.py):
    each against the published file on held-out text, best first, with what its interval says: worse
    where it lies wholly above 1, better wholly below, else not told apart. It is the package's data,
    not a machine's result, so it is read from the package whatever `folder` is."""
    doc = json.loads(QUALITY_TABLE.read_text())
    lines = [
        "| layout | weights | perplexity ratio (95% interval) | against the published file | KL mean / p99 "
        "| top-1 vs published | qualifies |",
        "|---|---|---|---|---|---|---|",
    ]
    notes = []
    for entry in doc["files"].values():
        rows = sorted(entry["layouts"].items(), key=lambda kv: kv[1]["ratio_high"])
        for name, q in rows:
            lines.append(
                f"| {name} | {q['what']} | {q['ratio']:.3f} ({q['ratio_low']:.3f}-{q['ratio_high']:.3f}) | "
                f"{interval_says(q['ratio_low'], q['ratio_high'])} | "
                f"{q['mean_kl']:.3f} / {q['p99_kl']:.3f} | {q['agreement']:.1%} | "
                f"{'**yes**' if q['qualifies'] else 'no'} |"
            )
        reference = rows[0][1]["reference_perplexity"]
        notes.append(
            f"{entry['model']}: the published file's perplexity is {reference:.3f} on the "
            f"{doc['text']['tokens']} tokens of `{doc['text']['file']}`.<br>"
        )
        notes += [source({"meta": run}, QUALITY_TABLE.name, "edgespec/data") + "<br>" for run in entry["meta"]]
    return lines + ["", f"The rule: {doc['rule']}.<br>", *notes]


def interval_says(low: float, high: float) -> str:
    """What a perplexity ratio's 95% interval says of a layout against the published file."""
    if low > 1:
        return f"worse, by {low - 1:.2%} to {high - 1:.2%}"
    if high < 1:
        return f"better, by {1 - high:.2%} to {1 - low:.2%}"
    return "not told apart"
