"""The known-text block: replies that are mostly text already known (benchmarks/known_text.py), a
row per host, part and case; and the steady-passes block: the same request asked twice
(benchmarks/steady_passes.py), a row per host and prompt."""

from __future__ import annotations

from pathlib import Path

from render_sources import host, load, on_every_machine, source


def known_text(folder: Path) -> list[str]:
    """A greedy retry (the history on against `--no-history`) and a file returned whole (`auto`
    against `ar`): whole reply and decoding, the longest pass, and how often the replies matched."""
    docs = [(name, load(folder, name)) for name in on_every_machine(folder, "known_text.json")]
    lines = [
        "| host | what | case | whole reply | decoding | longest pass | same reply |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, doc in docs:
        for s in doc["summary"]:
            what = "retry, history / no history" if s["part"] == "retry" else "file returned whole, auto / ar"
            if s["case"] == "median":
                lines.append(
                    f"| {host(doc)} | {what} | **median** | **{s['whole_speedup']:.2f}x** | "
                    f"**{s['decode_speedup']:.2f}x** | | |"
                )
                continue
            same = (
                f"as the first reply: {s['retries_same_as_first']['history']}/{s['rounds']} with history, "
                f"{s['retries_same_as_first']['no-history']}/{s['rounds']} without"
                if s["part"] == "retry"
                else f"{s['same_as_ar']}/{s['rounds']} as ar's"
            )
            case = s["case"] if len(s["case"]) < 50 else s["case"][:47] + "..."
            lines.append(
                f"| {host(doc)} | {what} | {case} | {s['whole_speedup']:.2f}x | {s['decode_speedup']:.2f}x | "
                f"{s['longest_pass']} | {same} |"
            )
    lines.append("")
    return lines + [source(doc, name) + "<br>" for name, doc in docs]


def steady_passes(folder: Path) -> list[str]:
    """The same greedy request asked twice (benchmarks/steady_passes.py): decoding speed with auto's
    passes priced from the saved curve (steady, the default) and from each call's timings (live,
    the policy kept across calls; live-fresh, a fresh one per call), and how many pairs of calls
    gave the same reply."""
    docs = [(name, load(folder, name)) for name in on_every_machine(folder, "steady_passes.json")]
    lines = [
        "| host | prompt | decoding: steady / live / live-fresh | steady over live / live-fresh "
        "| same reply: steady / live / live-fresh |",
        "|---|---|---|---|---|",
    ]
    for _, doc in docs:
        s, rounds = doc["summary"], doc["meta"]["rounds"]
        for c in s["cases"]:
            speed, same = c["decode_tok_s"], c["same_reply"]
            lines.append(
                f"| {host(doc)} | {c['case']} | {speed['steady']:.1f} / {speed['live']:.1f} / "
                f"{speed['live-fresh']:.1f} tok/s | {c['steady_over_live']:.2f}x / {c['steady_over_live-fresh']:.2f}x "
                f"| {same['steady']}/{rounds} / {same['live']}/{rounds} / {same['live-fresh']}/{rounds} |"
            )
        same, pairs = s["same_reply"], s["pairs"]
        lines.append(
            f"| {host(doc)} | **median** | | **{s['median_steady_over_live']:.2f}x / "
            f"{s['median_steady_over_live-fresh']:.2f}x** | **{same['steady']}/{pairs['steady']} / "
            f"{same['live']}/{pairs['live']} / {same['live-fresh']}/{pairs['live-fresh']}** |"
        )
    lines.append("")
    return lines + [source(doc, name) + "<br>" for name, doc in docs]
