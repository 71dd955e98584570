"""Every table of measured results in README.md and docs/benchmarks.md, and the bench plot, rendered
from the JSON files under benchmarks/results/.

Results are data: a page never holds a figure typed by hand. Each table sits between two marker
comments, `<!-- results:NAME -->` and `<!-- /results:NAME -->`, and this script replaces what is
between them with the block NAME rendered from the result files, each followed by the command,
commit and machine that made it. Where a machine changes what a run shows (the structured suite's
gain follows the machine's verify curve), the same runs from another machine sit in a sub-folder
named after its CPU (`results/intel-xeon/`), and those blocks give a row per machine.
tests/test_render_results.py renders the committed files and fails when a page differs, so a table
cannot drift from the run behind it.

A page shows only runs of a committed tree: a figure from uncommitted code is a figure of code no
one can check out again. The script refuses to render while any result file says its tree had
uncommitted changes (`"dirty": true`), or does not say what made it (the command, the commit and
whether the tree was clean, as edgespec.util.provenance records them), one line per file.

    make results        # = .venv/bin/python benchmarks/render.py
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

from edgespec.util.provenance import instruction_set, isa_label

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGES = ("README.md", "docs/benchmarks.md")
PLOT = "assets/bench_cpu.png"  # the whole-reply speedups of the dev set and held-out edits
BENCH_FILES = ("bench_dev.json", "bench_heldout.json", "bench_mtbench.json")
STRUCTURED_FILES = ("bench_structured.json", "bench_structured_heldout.json")

_BLOCK = re.compile(r"(<!-- results:([\w-]+) -->\n)(.*?)(<!-- /results:\2 -->)", re.S)
_OPENING = re.compile(r"<!-- results:([\w-]+) -->")


def load(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text())


def unfit(doc: dict) -> str | None:
    """Why a result file's figures may not go on a page, or None: its provenance (under "meta", or at
    the top level of the older files) is missing, or says the tree had uncommitted changes."""
    meta = doc.get("meta", doc)
    if not isinstance(meta, dict) or not meta.get("command") or not meta.get("commit"):
        return "no provenance: the command and commit that made it are not recorded"
    if "dirty" not in meta:
        return "no provenance: whether the tree had uncommitted changes is not recorded"
    if meta["dirty"]:
        return "made with uncommitted changes"
    return None


def refused(folder: Path) -> list[str]:
    """One line for each result file under `folder` that may not be rendered, naming it and why."""
    lines = []
    for path in sorted(folder.rglob("*.json")):
        if why := unfit(json.loads(path.read_text())):
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            lines.append(f"{shown}: {why}")
    return lines


def on_every_machine(folder: Path, name: str) -> list[str]:
    """`name` and its namesakes in the other machines' sub-folders, as paths under `folder`: the
    machine of record first."""
    others = sorted(p.relative_to(folder).as_posix() for p in folder.glob(f"*/{name}"))
    return [name, *others]


def _machine_of(doc: dict) -> dict:
    """A run's machine record: under "meta" (or at the top level of the older files), as provenance
    records it, or in the oldest files the meta itself."""
    meta = doc.get("meta", doc)
    return meta["machine"] if isinstance(meta.get("machine"), dict) else meta


def host(doc: dict) -> str:
    """The host a run was made on, as a table names it: its CPU model without trademark signs or the
    word "Processor", and its instruction set ("Intel Xeon, AVX-512 + AMX", "AMD EPYC, AVX2"); hosts
    of one model differ 2x by it. A run made before provenance summed up the instruction set still
    listed the CPU's vector flags, and the label is read from them; one that listed none says so."""
    machine = _machine_of(doc)
    model = re.sub(r"\s*(\((R|TM)\)|\bProcessor\b)", "", machine.get("cpu_model") or "?").strip()
    isa = _isa(machine)
    return f"{model}, {isa_label(isa) if isa else 'ISA not recorded'}"


def _isa(machine: dict) -> dict | None:
    """The instruction set a machine record names, or reads from its vector flags; None: neither."""
    if isinstance(machine.get("isa"), dict):
        return machine["isa"]
    if isinstance(machine.get("cpu_flags"), list):
        return instruction_set(machine["cpu_flags"])
    return None


def source(doc: dict, name: str, where_kept: str = "benchmarks/results") -> str:
    """One line saying what made a file's figures: the command, commit, host and date; and where the
    host has AMX but the recorded llama.cpp build lists no AMX kernels, that the build leaves it out."""
    meta = doc.get("meta", doc)
    commit = (meta.get("commit") or "")[:7] or meta.get("version", "?")
    machine = _machine_of(doc)
    cpus = machine.get("cpus", machine.get("cpu_count"))
    where = f"{cpus} CPUs ({host(doc)})"
    backends = meta.get("backends") or {}
    if backends.get("llama-cpp-python"):
        where += f", llama-cpp-python {backends['llama-cpp-python']}"
        build = backends.get("llama.cpp build") or ""
        if (_isa(machine) or {}).get("amx") and "CPU :" in build and "AMX" not in build:
            where += " (built without AMX)"
    command = meta.get("command", "?")
    command = shlex.join(command) if isinstance(command, list) else command
    date = f", {meta['date'][:10]}" if meta.get("date") else ""
    return f"<sub>`{where_kept}/{name}`: `{command}` at {commit}, {where}{date}</sub>"


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


def bench(folder: Path, files: tuple[str, ...] = BENCH_FILES, by_machine: bool = False) -> list[str]:
    """`auto` against `ar` per suite, whole reply first: the dev set and the held-out edits. Suites
    under a response_format add the replies that validate (both modes) and the matcher's share of
    `auto`'s time. `by_machine`: a column names the CPU each row ran on."""
    docs = [(name, load(folder, name)) for name in files]
    structured = any(s.get("replies") for _, doc in docs for s in doc["summary"])  # None: nothing to validate
    extra = " valid (ar, auto) | matcher |" if structured else ""
    lines = [
        "| suite (prompts) |"
        + (" machine |" if by_machine else "")
        + " whole reply vs ar | decode vs ar | TTFT ar / auto | acceptance | = ar (exact/tie/DIFF) |"
        + extra,
        "|---|---|---|---|---|---|" + "---|" * (extra.count("|") + by_machine),
    ]
    for _, doc in docs:
        by = {(s["suite"], s["mode"]): s for s in doc["summary"]}
        for suite in dict.fromkeys(s["suite"] for s in doc["summary"]):
            ar, auto = by.get((suite, "ar")), by.get((suite, "auto"))
            if not (ar and auto):
                continue
            v = auto["vs_ar"] or {}
            rounds = doc["meta"].get("repeats", 1)
            prompts = f"{auto['prompts']}" + (f", {rounds} rounds" if rounds > 1 else "")
            row = (
                f"| {suite} ({prompts}) |"
                + (f" {host(doc)} |" if by_machine else "")
                + f" **{auto['total_speedup_vs_ar']:.2f}x** | "
                f"{auto['speedup_vs_ar']:.2f}x | {ar['ttft_s']:.2f} / {auto['ttft_s']:.2f} s | "
                f"{auto['acceptance']:.0%} | {v.get('exact', 0)}/{v.get('tie', 0)}/{v.get('DIFF', 0)} |"
            )
            if structured:
                valid = [
                    f"{m['replies']['valid']}/{m['replies']['valid'] + m['replies']['invalid']}" for m in (ar, auto)
                ]
                row += f" {valid[0]}, {valid[1]} | {auto['constraint_share']:.1%} |"
            lines.append(row)
    curves = [line for _, doc in docs if (line := verify_curve(doc, by_machine))]
    curves += [
        f"{name}: the target read as `{target}`.<br>"
        for name, doc in docs
        for target in doc["meta"].get("targets", {}).values()
    ]
    return lines + [""] + curves + [source(doc, name) + "<br>" for name, doc in docs]


CURVE_SIZES = (1, 2, 3, 4, 6, 8, 12, 16)


def verify_curve(doc: dict, by_machine: bool = False) -> str | None:
    """What a target pass cost by the tokens it verified on the machine of a run (the bound on what
    drafting can gain there), with `ar`'s decoding speed; None for a run that did not record it.
    `by_machine`: the line names the CPU too."""
    curves = doc["meta"].get("verify_ms") or {}
    if len(curves) != 1:
        return None
    (curve,) = curves.values()
    ar = next(s for s in doc["summary"] if s["mode"] == "ar")
    sizes = " · ".join(f"{n}: {curve[str(n)]:.0f}" for n in CURVE_SIZES if str(n) in curve)
    where = f" on {host(doc)}" if by_machine else ""
    return (
        f"{ar['suite']}{where}: `ar` decoded {ar['decode_tokens_per_s']:.1f} tok/s; a target pass cost, in ms by "
        f"tokens verified, {sizes}.<br>"
    )


def structured(folder: Path) -> list[str]:
    """The structured suite and its held-out prompts, each mode under the prompt's response_format,
    on every machine that ran them."""
    return bench(folder, tuple(path for name in STRUCTURED_FILES for path in on_every_machine(folder, name)), True)


def draft_window(folder: Path) -> list[str]:
    doc = load(folder, "draft_window.json")
    windows = list(dict.fromkeys(str(s["window"]) for s in doc["summary"]))
    lines = ["| prompts | " + " | ".join(f"window {w}" for w in windows) + " |", "|---" * (len(windows) + 1) + "|"]
    for suite in dict.fromkeys(s["suite"] for s in doc["summary"]):
        mine = {str(s["window"]): s for s in doc["summary"] if s["suite"] == suite}
        first = next(iter(mine.values()))
        cells = [f"{suite} ({first['prompts']}, median {first['median_prompt_tokens']:.0f} tokens)"]
        cells += [f"{mine[w]['agreement']:.0%}" for w in windows]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + ["", source(doc, "draft_window.json")]


CEILING_FILES = ("drafting_ceiling.json", "drafting_ceiling_edits.json")  # the structured suites; the edits


def drafting_ceiling(folder: Path) -> list[str]:
    """`auto` against the oracles of benchmarks/drafting_ceiling.py, each against plain decoding: the
    text's copies with their length known, drafts of the target's own reply with K chosen by auto's
    controller, and those drafts as long as the reply (no cap); and how far `auto` is from the first
    and the last (their speed over auto's, the median over the suite's prompts), on every machine
    that ran it. A run before an oracle or the gaps existed shows none."""
    lines = [
        "| suite (prompts) | machine | `auto` vs ar | copies, length known | reply drafts, K chosen "
        "| reply drafts, perfect length | over `auto`: copies, perfect length | = ar (auto, copies, reply, perfect) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    sources = []
    for name in [path for file in CEILING_FILES for path in on_every_machine(folder, file) if (folder / path).exists()]:
        doc = load(folder, name)
        for suite in dict.fromkeys(s["suite"] for s in doc["summary"]):
            found = [
                next((s for s in doc["summary"] if (s["suite"], s["mode"]) == (suite, m)), None)
                for m in ("auto", "copies", "ceiling", "perfect-length")
            ]
            cells = [f"{suite} ({found[0]['prompts']})", host(doc)]
            cells += [
                f"**{m['whole_vs_ar']:.2f}x** whole, {m['decode_vs_ar']:.2f}x decode" if m else "not run" for m in found
            ]
            gap = next((g for g in doc.get("gaps", {}).get("suites", []) if g["suite"] == suite), {})
            cells.append(", ".join(_ceiling_gap(gap.get(m)) for m in ("copies", "perfect-length")) if gap else "-")
            cells.append(", ".join(f"{m['exact']}/{m['replies']}" if m else "-" for m in found))
            lines.append("| " + " | ".join(cells) + " |")
        sources.append(source(doc, name) + "<br>")
    return lines + [""] + sources


def _ceiling_gap(gap: dict | None) -> str:
    return f"{gap['whole']:.2f}x ({gap['decode']:.2f}x decode)" if gap else "-"


PEER_FILES = ("peer.json", "peer_files.json")  # benchmarks/peer.py: the suites in process, files as processes


def peer(folder: Path, files: tuple[str, ...] = PEER_FILES) -> list[str]:
    """edgespec's default path against the peers on the published target (benchmarks/peer.py): a row
    per host, suite and peer mode of each of `files` that a run wrote (and of their namesakes from
    other machines): whole-reply times summed per side and their ratio, the peer's over edgespec's
    (above 1: edgespec is faster)."""
    names = [path for name in files for path in on_every_machine(folder, name)]
    docs = [(name, load(folder, name)) for name in names if (folder / name).exists()]
    if not docs:
        raise FileNotFoundError(f"none of {', '.join(files)} in {folder}")
    lines = [
        "| host | suite (prompts) | peer | timed | whole reply edgespec / peer | peer / edgespec (median) "
        "| TTFT | decode | tokens | equal outputs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    setups = []
    for name, doc in docs:
        for s in doc["summary"]:

            def ratio(key: str, s: dict = s) -> str:
                return "-" if s[key] is None else f"{s[key]:.2f}x"

            lines.append(
                f"| {host(doc)} | {s['suite']} ({s['prompts']}) | {peer_mode(doc, s)} | "
                f"{'whole process' if s['timed'] == 'process' else 'call'} | "
                f"{s['edgespec_whole_s']:.1f} / {s['peer_whole_s']:.1f} s | **{ratio('whole_ratio')}** "
                f"({ratio('whole_ratio_median')}) | {ratio('ttft_ratio')} | {ratio('decode_ratio')} | "
                f"{s['edgespec_tokens']:g} / {s['peer_tokens']:g} | {s['equal']}/{s['prompts']} |"
            )
        mine, theirs = doc["meta"]["edgespec"], doc["meta"]["peer"]
        setups.append(
            f"{name}: edgespec pair `{mine['pair']}`, `--draft {mine['draft']}`, target "
            f"`{Path(mine['target']).name}` ({mine['target_layout']}); llama-cpp-python on "
            f"`{Path(theirs['path']).name}` ({theirs['layout']}); {theirs['threads']} threads each, "
            f"medians of {doc['meta']['rounds']} rounds.<br>"
        )
    return lines + [""] + setups + [source(doc, name) + "<br>" for name, doc in docs]


def peer_mode(doc: dict, summary: dict) -> str:
    """The peer a summary row measured: llama.cpp alone (all a run ran before it named its peers), or
    llama-cpp-python's prompt lookup decoding with the tokens it drafts a pass."""
    mode = summary.get("peer", "alone")
    drafts = doc["meta"]["peer"].get("modes", {}).get(mode, {}).get("num_pred_tokens")
    return "llama.cpp alone" if drafts is None else f"prompt lookup, {drafts} tokens"


def busy_machine(folder: Path) -> list[str]:
    """Decoding with cores kept busy by another process (benchmarks/busy_machine.py): each setup's
    ms per token quiet and busy, its busy speed over its quiet speed, and over llama.cpp alone's
    under the same load."""
    name = "busy_machine.json"
    doc = load(folder, name)

    def ratio(entry: dict, key: str) -> str:
        return f"{entry[key]:.2f}x" if key in entry else "-"

    lines = [
        "| setup | ms/token quiet | ms/token busy | busy speed / quiet | busy speed / llama.cpp alone busy |",
        "|---|---|---|---|---|",
    ]
    for setup, e in doc["summary"].items():
        lines.append(
            f"| {setup} | {e['quiet_ms_per_token']:.0f} | {e['busy_ms_per_token']:.0f} | "
            f"**{ratio(e, 'busy_speed_over_quiet')}** | {ratio(e, 'busy_speed_over_llama_cpp')} |"
        )
    busy = doc["meta"]["busy_cores"]
    lines += ["", f"{busy} core{'s' if busy > 1 else ''} kept busy; {doc['meta']['tokens']} tokens a reply.<br>"]
    return lines + [source(doc, name) + "<br>"]


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


QUALITY_TABLE = ROOT / "edgespec" / "data" / "layout_quality.json"  # shipped with the package


def layout_quality(folder: Path) -> list[str]:
    """The quality table edgespec ships for the built-in target's layouts (benchmarks/layout_quality.py):
    each against the published file on held-out text, best first. It is the package's data, not a
    machine's result, so it is read from the package whatever `folder` is."""
    doc = json.loads(QUALITY_TABLE.read_text())
    lines = [
        "| layout | weights | perplexity ratio (95% interval) | KL mean / p99 | top-1 vs published | qualifies |",
        "|---|---|---|---|---|---|",
    ]
    notes = []
    for entry in doc["files"].values():
        rows = sorted(entry["layouts"].items(), key=lambda kv: kv[1]["ratio_high"])
        for name, q in rows:
            lines.append(
                f"| {name} | {q['what']} | {q['ratio']:.3f} ({q['ratio_low']:.3f}-{q['ratio_high']:.3f}) | "
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


BLOCKS = {
    "bench": bench,
    "structured": structured,
    "prompt-cache": prompt_cache,
    "prompt-cache-cost": prompt_cache_cost,
    "read-chunk": read_chunk,
    "chat-read-ahead": chat_read_ahead,
    "health-latency": health_latency,
    "draft-window": draft_window,
    "drafting-ceiling": drafting_ceiling,
    "layout-quality": layout_quality,
    "peer": peer,
    "busy-machine": busy_machine,
    "suffix-index-costs": suffix_index_costs,
    "sessions": sessions,
    "static-corpus": static_corpus,
    "fim-order": fim_order,
    "editor-replay": editor_replay,
    "llama-vim": llama_vim,
}


def render_page(text: str, folder: Path = RESULTS) -> str:
    """`text` with every results block rendered again from the files in `folder`."""
    opened = _OPENING.findall(text)
    closed = [m.group(2) for m in _BLOCK.finditer(text)]
    if opened != closed:
        raise ValueError(f"unclosed results marker: {sorted(set(opened) - set(closed)) or opened}")
    unknown = [name for name in opened if name not in BLOCKS]
    if unknown:
        raise ValueError(f"unknown results block {unknown[0]!r}; known: {', '.join(BLOCKS)}")
    return _BLOCK.sub(lambda m: m.group(1) + "\n".join(BLOCKS[m.group(2)](folder)) + "\n" + m.group(4), text)


def plot(folder: Path, path: Path) -> None:
    """The bench's own plot (edgespec.bench.report.plot) of the dev set and held-out edits."""
    from edgespec.bench.report import plot as bench_plot

    docs = [load(folder, name) for name in BENCH_FILES[:2]]  # one row per suite: the dev set, the held-out edits
    rows = [SimpleNamespace(**row) for doc in docs for row in doc["rows"]]
    bench_plot(path, rows, [s for doc in docs for s in doc["summary"]])


def main(folder: Path = RESULTS) -> int:
    if refusals := refused(folder):
        for line in refusals:
            print(f"render.py: refused {line}; run it again on a committed tree", file=sys.stderr)
        return 1
    for page in PAGES:
        path = ROOT / page
        text = path.read_text()
        rendered = render_page(text, folder)
        if rendered != text:
            path.write_text(rendered)
            print(f"rendered {page}")
    plot(folder, ROOT / PLOT)
    print(f"plotted {PLOT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
