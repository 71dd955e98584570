"""The blocks of decoding speed (benchmarks/render.py): the bench suites with each run's verify
curve, the structured suites on every machine, the draft model's window, the drafting ceiling, the
peers, and decoding on a busy machine."""

from __future__ import annotations

from pathlib import Path

from render_sources import host, load, on_every_machine, source

BENCH_FILES = ("bench_dev.json", "bench_heldout.json", "bench_mtbench.json")
STRUCTURED_FILES = ("bench_structured.json", "bench_structured_heldout.json")


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


def verify_steps(folder: Path) -> list[str]:
    """What verifying 8 and 16 tokens cost in plain steps (a pass's time over a one-token pass's),
    per host, over every run under `folder` that recorded a verify curve: how much a copy taken
    whole can gain on each machine measured. A sentence, for the prose that argues from it."""
    steps: dict[str, list[tuple[float, float]]] = {}
    names = []
    for path in sorted(folder.rglob("*.json")):
        doc = load(folder, path.relative_to(folder).as_posix())
        for curve in (doc.get("meta", {}).get("verify_ms") or {}).values():
            if not {"1", "8", "16"} <= curve.keys():
                continue
            steps.setdefault(host(doc), []).append((curve["8"] / curve["1"], curve["16"] / curve["1"]))
            names.append(f"`{path.relative_to(folder).as_posix()}`")
    lines = []
    for where, found in steps.items():
        eight, sixteen = sorted(s for s, _ in found), sorted(s for _, s in found)
        lines.append(
            f"{where} ({len(found)} runs): verifying 8 tokens cost {_span(eight)} plain steps (one-token passes), "
            f"16 tokens {_span(sixteen)}; a 16-token copy taken whole goes "
            f"{_span([16 / s for s in reversed(sixteen)])}x as fast as plain decoding.<br>"
        )
    return lines + [f"<sub>`meta.verify_ms` of {', '.join(names)} in `benchmarks/results`</sub>"]


def _span(values: list[float]) -> str:
    """A sorted list's range at one decimal, or its one value."""
    low, high = f"{values[0]:.1f}", f"{values[-1]:.1f}"
    return low if low == high else f"{low}-{high}"


def busy_threads(folder: Path) -> list[str]:
    """Plain decoding with a core kept busy, fixed threads against the count measured per pass and
    llama.cpp alone (benchmarks/busy_machine.py): a sentence, for the prose that argues from it."""
    name = "busy_machine.json"
    doc = load(folder, name)
    s, meta = doc["summary"], doc["meta"]
    setups = (s["ar-fixed"], s["ar-adaptive"], s["llama.cpp"])
    busy = meta["busy_cores"]
    return [
        f"On {host(doc)} ({meta['machine']['cpus']} CPUs) with {busy} core{'s' * (busy > 1)} kept busy, plain "
        f"decoding took {setups[0]['busy_ms_per_token']:.0f} ms a token on fixed threads (one per physical core), "
        f"{setups[1]['busy_ms_per_token']:.0f} with the count measured per pass, and llama.cpp alone "
        f"{setups[2]['busy_ms_per_token']:.0f}; on the quiet machine "
        + ", ".join(f"{e['quiet_ms_per_token']:.0f}" for e in setups)
        + " ms.<br>",
        source(doc, name),
    ]


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


CEILING_FILES = (  # the structured suites; the held-out edits; one long reply, regenerated; the sessions
    "drafting_ceiling.json",
    "drafting_ceiling_edits.json",
    "drafting_ceiling_regenerate.json",
    "drafting_ceiling_sessions.json",
)


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


# benchmarks/peer.py: the suites in process (mtbench alone, with more prompts), files as processes,
# an agent's SEARCH/REPLACE edits
PEER_FILES = ("peer.json", "peer_mtbench.json", "peer_files.json", "peer_search_replace.json")


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
        "| TTFT | decode | tokens | equal outputs | peer / edgespec, equal outputs only |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
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
                f"{s['edgespec_tokens']:g} / {s['peer_tokens']:g} | {s['equal']}/{s['prompts']} | "
                f"{_equal_only(doc, s)} |"
            )
        mine, theirs = doc["meta"]["edgespec"], doc["meta"]["peer"]
        setups.append(
            f"{name}: edgespec pair `{mine['pair']}`, `--draft {mine['draft']}`, target "
            f"`{Path(mine['target']).name}` ({mine['target_layout']}); llama-cpp-python on "
            f"`{Path(theirs['path']).name}` ({theirs['layout']}); {theirs['threads']} threads each, "
            f"medians of {doc['meta']['rounds']} rounds.<br>"
        )
    return lines + [""] + setups + [source(doc, name) + "<br>" for name, doc in docs]


def _equal_only(doc: dict, summary: dict) -> str:
    """The peer's whole-reply time over edgespec's, summed over the suite's prompts where both wrote
    the same reply in every round: the only ratio that is a speedup when replies part (a reply
    that parted early can be far shorter or longer). Runs before peer modes kept one peer, "peer"."""
    side = summary.get("peer", "alone")
    mine = theirs = 0.0
    for p in doc.get("prompts", []):
        peer = p.get(side, p.get("peer"))
        if p["suite"] == summary["suite"] and peer.get("equal", p.get("equal")):
            mine, theirs = mine + p["edgespec"]["whole_s"], theirs + peer["whole_s"]
    return f"{theirs / mine:.2f}x" if mine else "-"


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
