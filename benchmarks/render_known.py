"""The known-text block: replies that are mostly text already known (benchmarks/known_text.py), a
row per host, part and case."""

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
                f"{s['retries_same_as_first']['history']}/{s['rounds']} retries as the first reply"
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
