"""The blocks of editor completion and the server under load (benchmarks/render.py): /health while
a large request is checked, the fill-in-the-middle order, the editor replay and llama.vim in Vim."""

from __future__ import annotations

from pathlib import Path

from render_sources import host, load, source


def health_latency(folder: Path) -> list[str]:
    """/health while `serve` checks one request at the body cap (benchmarks/health_latency.py)."""
    name = "health_latency.json"
    doc = load(folder, name)
    lines = ["| request | size | answer | /health most (median) |", "|---|---|---|---|"]
    for what, r in doc["requests"].items():
        lines.append(
            f"| {what} | {r['bytes'] / 2**20:.1f} MiB | {r['status']} in {r['seconds']:.1f} s | "
            f"{r['health_max_s'] * 1000:.0f} ms ({r['health_median_s'] * 1000:.0f} ms) |"
        )
    return lines + ["", source(doc, name) + "<br>"]


def fim_order(folder: Path) -> list[str]:
    """What each order of a fill-in-the-middle prompt costs (benchmarks/fim_order.py): tokens read
    again a keystroke, and the suggestions' agreement with the line the file has."""
    name = "fim_order.json"
    doc = load(folder, name)
    lines = [
        "| order | tokens read again a keystroke: median (mean, p90) | next line exact | characters right |",
        "|---|---|---|---|",
    ]
    for order, r in doc["orders"].items():
        t = r["reread"]
        lines.append(
            f"| `{order}` | {t['median']:g} ({t['mean']:.0f}, {t['p90']}) | {r['exact']:.0%} | {r['chars_right']:.0%} |"
        )
    sites = len(doc["orders"]["psm"]["sites"])
    keystrokes = doc["orders"]["psm"]["reread"]["keystrokes"]
    files = ", ".join(f"`{f}`" for f in doc["files"])
    lines.append("")
    where = host(doc)
    lines.append(f"{keystrokes} keystrokes and {sites} suggestions on {files}; {where}.<br>")
    return lines + [source(doc, name) + "<br>"]


def editor_replay(folder: Path) -> list[str]:
    """Inline completion at every pause of an edit, as llama.vim asks (benchmarks/editor_replay.py),
    and the same pauses against llama-cpp-python's server."""
    name = "editor_replay.json"
    doc = load(folder, name)
    session, compare = doc["summary"]["session"], doc["summary"]["compare"]
    lines = [
        "| requests (llama.vim's shapes) | n | first token, median | whole, median | tokens read, median |",
        "|---|---|---|---|---|",
    ]
    for kind in ("quick", "follow", "ring"):
        r = session[kind]
        first = f"{r['median_first_token_s']:.2f} s" if r["median_first_token_s"] is not None else "-"
        read = r["median_prompt_n"] if r["median_prompt_n"] is not None else "-"
        lines.append(f"| {kind} | {r['n']} | {first} | {r['median_whole_s']:.2f} s | {read} |")
    ours, peer = compare["edgespec"], compare["peer"]
    lines += [
        "",
        "| the same pauses | first token, median | whole suggestion, median |",
        "|---|---|---|",
        f"| edgespec `serve`, `/infill` | {ours['median_first_token_s']:.2f} s | {ours['median_whole_s']:.2f} s |",
        f"| llama-cpp-python's server, prefix cache on | {peer['median_first_token_s']:.2f} s | "
        f"{peer['median_whole_s']:.2f} s |",
        "",
        f"{session['requests']} requests, {session['errors']} errors; a keystroke on the line read "
        f"{session['keystroke_on_the_line']['median_prompt_n']} tokens again (median of "
        f"{session['keystroke_on_the_line']['n']}). Whole suggestion: the peer took "
        f"{compare['peer_over_edgespec_whole']:.2f}x edgespec's time (median of the pauses' ratios "
        f"{compare['median_of_pause_ratios']:.2f}x); {compare['same_text']} of {compare['pauses']} suggestions "
        f"had the same text. {host(doc)}.<br>",
    ]
    return lines + [source(doc, name) + "<br>"]


def llama_vim(folder: Path) -> list[str]:
    """llama.vim in a headless Vim against `serve` (benchmarks/llama_vim_replay.py)."""
    name = "llama_vim_replay.json"
    doc = load(folder, name)
    checks, latency, edit = doc["checks"], doc["latency"], doc["edit"]
    lines = ["| llama.vim's requests | n | answered in, median (most) |", "|---|---|---|"]
    for kind, r in latency.items():
        lines.append(f"| {kind} | {r['n']} | {r['median_s']:.1f} s ({r['max_s']:.1f} s) |")
    accepted = "as the file has it" if checks["accepted_as_in_the_file"] else "not as the file has it"
    lines += [
        "",
        f"{edit['lines']} lines of `{edit['function']}` in {edit['file']} typed in Vim ({edit['pauses']} pauses): "
        f"{checks['requests']} requests, {'every one' if checks['every_request_answered'] else 'not all'} answered; "
        f"{checks['suggestions_shown']} suggestions shown; the last line taken with Tab came out {accepted}; "
        f"Vim errors: {len(checks['vim_errors'])}. {host(doc)}.<br>",
    ]
    return lines + [source(doc, name) + "<br>"]
