"""The README's tables of measured results, rendered from the JSON the benchmarks wrote.

Results are data: each figure in the README's "Measured here" comes from a file under results/,
which also says the command, commit and machine that made it. Run this after a new measurement
and paste its output over the section's tables.

    .venv/bin/python scripts/render_results.py [results/]
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path


def load(folder: Path, name: str) -> dict | None:
    path = folder / name
    return json.loads(path.read_text()) if path.exists() else None


def source(doc: dict, name: str) -> str:
    """One line saying what made a file's figures."""
    meta = doc.get("meta", doc)
    commit = (meta.get("commit") or "")[:7] or meta.get("version", "?")
    machine = meta.get("machine") if isinstance(meta.get("machine"), dict) else meta
    cpus = machine.get("cpus", machine.get("cpu_count"))
    command = meta.get("command", "?")
    command = shlex.join(command) if isinstance(command, list) else command
    return f"<sub>`results/{name}`: `{command}` at {commit}, {cpus} CPUs {meta.get('date', '')}</sub>"


def whole_call(doc: dict) -> list[str]:
    modes = [k for k in doc["summary"][0] if isinstance(doc["summary"][0][k], dict)]
    lines = ["| file (prompt tokens) | " + " | ".join(modes[1:]) + " |", "|---" * (len(modes)) + "|"]
    for entry in doc["summary"]:
        cells = [f"{entry['case'].split(' | ')[0]} ({entry['prompt_tokens']})"]
        for mode in modes[1:]:
            m = entry[mode]
            cells.append(f"**{m['whole_speedup']:.2f}x** whole, TTFT {m['ttft_ratio']:.2f}x, "
                         f"decode {m['decode_speedup']:.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    base = modes[0]
    lines.append("")
    lines.append(f"Against `--draft {base}` in the same rounds (medians): " + "; ".join(
        f"{e['case'].split(' | ')[0]} {e[base]['wall_s']:.1f} s whole, TTFT {e[base]['ttft_s']:.1f} s, "
        f"decode {e[base]['decode_s']:.1f} s" for e in doc["summary"]) + ".")
    return lines


def prompt_cache(doc: dict) -> list[str]:
    runs, s = doc["runs"], doc["summary"]
    lines = ["| call | whole call | TTFT | prompt tokens not read |", "|---|---|---|---|"]
    for kind, label in (("no_cache", "cold, `--no-cache`"), ("cold", "cold, saving its state"),
                        ("warm", "warm: same file, another instruction")):
        walls = sorted(r[kind]["wall_s"] for r in runs)
        ttfts = sorted(r[kind]["ttft_s"] for r in runs)
        cached = runs[0][kind]["prompt_cached"], runs[0][kind]["prompt_tokens"]
        lines.append(f"| {label} | {walls[len(walls) // 2]:.1f} s ({walls[0]:.1f}-{walls[-1]:.1f}) | "
                     f"{ttfts[len(ttfts) // 2]:.2f} s | {cached[0]} of {cached[1]} |")
    lines += ["", f"Warm against cold (medians of {len(runs)} rounds): whole call **{s['cold_over_warm_wall']:.2f}x** "
              f"faster, time to first token **{s['cold_over_warm_ttft']:.0f}x** lower."]
    if doc.get("serve"):
        lines += ["", "| serve request | file | first text after | prompt tokens cached |", "|---|---|---|---|"]
        for c in doc["serve"]:
            lines.append(f"| {c['request']} | {c['file']} | {c['client_ttft_s']:.2f} s | "
                         f"{c['cached_tokens']} of {c['prompt_tokens']} |")
    return lines


def bench(docs: list[tuple[str, dict]]) -> list[str]:
    lines = ["| suite (prompts) | whole reply vs ar | decode vs ar | TTFT ar / auto | acceptance "
             "| = ar (exact/tie/DIFF) |",
             "|---|---|---|---|---|---|"]
    for _, doc in docs:
        by = {(s["suite"], s["mode"]): s for s in doc["summary"]}
        for suite in dict.fromkeys(s["suite"] for s in doc["summary"]):
            ar, auto = by.get((suite, "ar")), by.get((suite, "auto"))
            if not (ar and auto):
                continue
            v = auto["vs_ar"] or {}
            lines.append(f"| {suite} ({auto['prompts']}) | **{auto['total_speedup_vs_ar']:.2f}x** | "
                         f"{auto['speedup_vs_ar']:.2f}x | {ar['ttft_s']:.2f} / {auto['ttft_s']:.2f} s | "
                         f"{auto['acceptance']:.0%} | {v.get('exact', 0)}/{v.get('tie', 0)}/{v.get('DIFF', 0)} |")
    return lines


def draft_window(doc: dict) -> list[str]:
    windows = list(dict.fromkeys(str(s["window"]) for s in doc["summary"]))
    lines = ["| prompts | " + " | ".join(f"window {w}" for w in windows) + " |", "|---" * (len(windows) + 1) + "|"]
    for suite in dict.fromkeys(s["suite"] for s in doc["summary"]):
        mine = {str(s["window"]): s for s in doc["summary"] if s["suite"] == suite}
        first = next(iter(mine.values()))
        cells = [f"{suite} ({first['prompts']}, median {first['median_prompt_tokens']:.0f} tokens)"]
        cells += [f"{mine[w]['agreement']:.0%}" for w in windows]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "results"
    sections = []
    if doc := load(folder, "whole_call.json"):
        sections.append(("Whole cold calls of `edgespec run` on real files (200 tokens out)",
                         whole_call(doc) + ["", source(doc, "whole_call.json")]))
    if doc := load(folder, "prompt_cache.json"):
        sections.append(("The prompt cache", prompt_cache(doc) + ["", source(doc, "prompt_cache.json")]))
    if (doc := load(folder, "prompt_cache_cost.json")) and doc.get("cost"):
        c = doc["cost"]
        sections.append(("The prompt cache's own cost", [
            f"Both models read a {c['prompt_tokens']}-token prompt in {c['read_s']:.1f} s; saving both states "
            f"({c['saved_bytes'] / 1e6:.0f} MB) took {c['save_s'] * 1000:.0f} ms "
            f"({c['save_s'] / c['read_s']:.1%} of that reading); a lookup that found nothing took "
            f"{c['miss_s'] * 1000:.1f} ms.", "", source(doc, "prompt_cache_cost.json")]))
    benches = [(n, d) for n in ("bench_dev.json", "bench_heldout.json") if (d := load(folder, n))]
    if benches:
        sections.append(("The dev set and held-out edits, `auto` against `ar`, whole reply",
                         bench(benches) + [""] + [source(d, n) + "<br>" for n, d in benches]))
    if doc := load(folder, "draft_window.json"):
        sections.append(("The draft model's agreement with the target by window",
                         draft_window(doc) + ["", source(doc, "draft_window.json")]))
    for title, lines in sections:
        print(f"#### {title}\n")
        print("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
