"""The blocks of prompt reading (benchmarks/render.py): the prompt cache and what it costs, reading
by chunk size, and the chat reading a prompt ahead while the question is typed."""

from __future__ import annotations

from pathlib import Path

from render_sources import host, load, on_every_machine, source


def prompt_cache(folder: Path) -> list[str]:
    doc = load(folder, "prompt_cache.json")
    runs, s = doc["runs"], doc["summary"]
    lines = ["| call | whole call | TTFT | prompt tokens not read |", "|---|---|---|---|"]
    for kind, label in (
        ("no_cache", "cold, `--no-cache`"),
        ("cold", "cold, saving its state"),
        ("warm", "warm: same file, another instruction"),
    ):
        walls = sorted(r[kind]["wall_s"] for r in runs)
        ttfts = sorted(r[kind]["ttft_s"] for r in runs)
        cached = runs[0][kind]["prompt_cached"], runs[0][kind]["prompt_tokens"]
        lines.append(
            f"| {label} | {walls[len(walls) // 2]:.1f} s ({walls[0]:.1f}-{walls[-1]:.1f}) | "
            f"{ttfts[len(ttfts) // 2]:.2f} s | {cached[0]} of {cached[1]} |"
        )
    lines += [
        "",
        f"Warm against cold (medians of {len(runs)} rounds): whole call "
        f"**{s['cold_over_warm_wall']:.2f}x** faster, time to first token **{s['cold_over_warm_ttft']:.0f}x** lower.",
    ]
    if doc.get("serve"):
        lines += ["", "| serve request | file | first text after | prompt tokens cached |", "|---|---|---|---|"]
        for c in doc["serve"]:
            lines.append(
                f"| {c['request']} | {c['file']} | {c['client_ttft_s']:.2f} s | "
                f"{c['cached_tokens']} of {c['prompt_tokens']} |"
            )
    return lines + ["", source(doc, "prompt_cache.json")]


def prompt_cache_cost(folder: Path) -> list[str]:
    doc = load(folder, "prompt_cache_cost.json")
    c = doc["cost"]
    return [
        f"Both models read a {c['prompt_tokens']}-token prompt in {c['read_s']:.1f} s; saving both states "
        f"({c['saved_bytes'] / 1e6:.0f} MB) took {c['save_s'] * 1000:.0f} ms "
        f"({c['save_s'] / c['read_s']:.1%} of that reading); a lookup that found nothing took "
        f"{c['miss_s'] * 1000:.1f} ms.",
        "",
        source(doc, "prompt_cache_cost.json"),
    ]


def read_chunk(folder: Path) -> list[str]:
    """Prompt reading by the size of the chunks a read is cut into (benchmarks/read_chunk.py), a row
    per host and size."""
    docs = [(name, load(folder, name)) for name in on_every_machine(folder, "read_chunk.json")]
    lines = ["| host | chunk | tokens/s, median (best) | against 512 |", "|---|---|---|---|"]
    for _, doc in docs:
        for chunk, r in doc["chunks"].items():
            speed = f"{r['median_tok_s']:.1f} ({r['best_tok_s']:.1f})"
            against = "-" if r["median_vs_512"] is None else f"{r['median_vs_512']:.3f}x"
            lines.append(f"| {host(doc)} | {chunk} | {speed} | {against} |")
    lines.append("")
    for name, doc in docs:
        lines.append(f"{name}: a {doc['prompt_tokens']:,}-token prompt, {doc['rounds']} interleaved rounds.<br>")
    return lines + [source(doc, name) + "<br>" for name, doc in docs]


def chat_read_ahead(folder: Path) -> list[str]:
    """The chat replay, reading ahead on and off: the first token after enter and the keystroke echo
    (benchmarks/chat_read_ahead.py)."""
    name = "chat_read_ahead.json"
    doc = load(folder, name)
    lines = [
        "| pasted | read ahead | prompt tokens read ahead | first token after enter (engine) | echo median/p95/most |",
        "|---|---|---|---|---|",
    ]
    for s in doc["summary"]:
        runs = [r for r in doc["runs"] if r["chars"] == s["chars"] and r["read_ahead"] == s["read_ahead"]]
        firsts = sorted(r["screen_ttft_s"] for r in runs)
        spread = f" ({firsts[0]:.2f}-{firsts[-1]:.2f})" if len(firsts) > 1 else ""
        echo = "/".join(f"{s[k] * 1000:.0f}" for k in ("echo_median_s", "echo_p95_s", "echo_max_s"))
        lines.append(
            f"| {s['prompt_tokens']:,.0f} tokens | {'on' if s['read_ahead'] else 'off'} | "
            f"{s['prompt_read_ahead']:,.0f} | **{s['screen_ttft_s']:.2f} s**{spread} ({s['engine_ttft_s']:.2f} s) | "
            f"{echo} ms |"
        )
    compared = [c for s in doc["summary"] if s["read_ahead"] for c in s["rounds_compared"]]
    same = sum(c["same_reply"] for c in compared)
    parted = [c for c in compared if not c["same_reply"]]
    rounds = max(r["round"] for r in doc["runs"])
    lines += [
        "",
        f"{doc['input']}, its first lines pasted; a {len(doc['question'])}-character question typed at "
        f"{doc['rate']:g} keys a second; medians of {rounds} round{'s' * (rounds > 1)}, each run a cold "
        f"`edgespec chat` process. Replies with and without reading ahead: the same in {same} of "
        f"{len(compared)} pairs of runs"
        + (
            f"; the {len(parted)} that parted also ran "
            f"{'passes of other shapes' if not any(c['same_passes'] for c in parted) else 'some passes alike'}"
            " (K and thread counts are chosen live, as in any two runs).<br>"
            if parted
            else ".<br>"
        ),
    ]
    if doc.get("tmux_echo_s"):
        floor = sorted(doc["tmux_echo_s"])
        lines.append(
            f"tmux's own echo, measured on `cat`: median {floor[len(floor) // 2] * 1000:.0f} ms, most "
            f"{floor[-1] * 1000:.0f} ms.<br>"
        )
    return lines + [source(doc, name) + "<br>"]
