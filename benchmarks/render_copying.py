"""The blocks of copying sources (benchmarks/render.py): the history's suffix index and its costs,
the session suite, and copying from a static corpus."""

from __future__ import annotations

from pathlib import Path

from render_sources import load, source


def suffix_index_costs(folder: Path) -> list[str]:
    """What the history's suffix index costs at its size (benchmarks/suffix_index_costs.py)."""
    name = "suffix_index_costs.json"
    doc = load(folder, name)
    r, a = doc["round_ms"], doc["append_ms"]
    lines = [
        "| what | cost |",
        "|---|---|",
        f"| tokens indexed | {doc['tokens']:,} in {doc['records']:,} calls |",
        f"| a lookup and its proposal, per round | median {r['median']:.2f} ms, p99 {r['p99']:.2f} ms |",
        f"| append a reply | median {a['median']:.1f} ms, p99 {a['p99']:.0f} ms |",
        f"| open with the saved index / sort all of it | {doc['open_s']:.2f} s / {doc['build_s']:.2f} s |",
        f"| index in memory / on disk | {doc['index_nbytes_mb']:.0f} MB / {doc['disk_bytes'] / 1e6:.0f} MB |",
    ]
    return lines + ["", source(doc, name) + "<br>"]


def sessions(folder: Path) -> list[str]:
    """The session suite (benchmarks/session_bench.py): whole sequences of related calls, `auto`
    against `ar`, per part and kind, with what each copying source drafted and took."""
    name = "sessions.json"
    doc = load(folder, name)
    s = doc["summary"]
    lines = ["| part | kind | ar s | auto s | speed-up |", "|---|---|---|---|---|"]
    for key, ratio in s["speedup"].items():
        part, _, kind = key.partition("/")
        seconds = s["seconds"][key]
        cell = f"**{ratio:.2f}x**" if not kind else f"{ratio:.2f}x"
        lines.append(f"| {part} | {kind or 'all'} | {seconds['ar']:.0f} | {seconds['auto']:.0f} | {cell} |")
    lines.append("")
    for part, by in s["drafted_accepted"].items():
        taken = ", ".join(f"{src} {acc:,}/{dr:,}" for src, (dr, acc) in sorted(by.items()))
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(s["vs_ar"].get(part, {}).items()))
        lines.append(f"{part}: accepted/drafted by source: {taken}; calls compared with ar: {verdicts}.<br>")
    lookups = ", ".join(f"{src} {ms:.2f} ms" for src, ms in s["lookup_ms_median"].items())
    lines.append(f"Median lookup per round: {lookups}; median append: {s['append_ms_median']:.1f} ms.<br>")
    return lines + [source(doc, name) + "<br>"]


def static_corpus(folder: Path) -> list[str]:
    """`auto` copying from a static corpus against `auto` without it (benchmarks/static_corpus.py)."""
    name = "static_corpus.json"
    doc = load(folder, name)
    s = doc["summary"]
    lines = [
        "| mode | whole reply vs ar | median per prompt | tokens from the corpus | = ar |",
        "|---|---|---|---|---|",
    ]
    for mode in ("auto", "auto+corpus"):
        m = s[mode]
        lines.append(
            f"| {mode} | **{m['whole_ratio']:.2f}x** | {m['median_ratio']:.2f}x | {m['from_corpus']} | "
            f"{m['equal_to_ar']}/{s['prompts']} |"
        )
    lines += [
        "",
        f"The corpus: {doc['meta']['corpus']}, {s['corpus_tokens']:,} tokens indexed in {s['index_s']:.1f} s.<br>",
    ]
    return lines + [source(doc, name) + "<br>"]
