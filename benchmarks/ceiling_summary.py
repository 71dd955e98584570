"""The drafting ceiling's figures (benchmarks/drafting_ceiling.py): each mode against plain decoding,
and how far `auto` is from the oracles, per prompt, per suite and overall.

Speeds are tokens a second as `edgespec bench` reckons them, of the whole reply (time to first
token included) and of decoding alone, each prompt's the median of its repeats. A ratio of speeds is
a ratio of times where the replies are the same, and stays fair where a near-tie made them differ
in length.
"""

from __future__ import annotations

import statistics

from ceiling_oracles import CEILING, COPIES, PERFECT, faults

ORACLE_MODES = (CEILING, COPIES, PERFECT)
GAP_MODES = (COPIES, PERFECT)  # the oracles `auto` is measured against


def speeds(rows: list[dict]) -> dict[tuple[str, str], tuple[float, float]]:
    """(prompt id, mode) -> (whole-reply, decoding) tokens a second, the medians over its repeats."""
    out = {}
    for key in dict.fromkeys((r["id"], r["mode"]) for r in rows):
        runs = [r for r in rows if (r["id"], r["mode"]) == key]
        whole = statistics.median(len(r["tokens"]) / (r["ttft_s"] + r["decode_s"]) for r in runs)
        out[key] = whole, statistics.median(len(r["tokens"]) / r["decode_s"] for r in runs)
    return out


def summarise(rows: list[dict]) -> list[dict]:
    """Per suite and mode, the median over prompts of the mode's speed over ar's; how many replies
    were ar's exactly (a near-tie a batched pass reads otherwise may part from it, still the
    target's own reply); and for the oracles how many rows show a fault (`faults`)."""
    out = []
    ar_tokens = {r["id"]: r["tokens"] for r in rows if r["mode"] == "ar"}
    speed = speeds(rows)
    for suite in dict.fromkeys(r["suite"] for r in rows):
        mine = [r for r in rows if r["suite"] == suite]
        ids = list(dict.fromkeys(r["id"] for r in mine))
        for mode in [m for m in ("auto", *ORACLE_MODES) if any(r["mode"] == m for r in mine)]:
            replies = [r for r in mine if r["mode"] == mode]
            row = {
                "suite": suite,
                "mode": mode,
                "prompts": len(ids),
                "whole_vs_ar": statistics.median(speed[i, mode][0] / speed[i, "ar"][0] for i in ids),
                "decode_vs_ar": statistics.median(speed[i, mode][1] / speed[i, "ar"][1] for i in ids),
                "exact": sum(r["tokens"] == ar_tokens[r["id"]] for r in replies),
                "replies": len(replies),
            }
            if mode in ORACLE_MODES:
                row["faulty"] = sum(bool(faults(r)) for r in replies)
            out.append(row)
    return out


def gaps(rows: list[dict]) -> dict:
    """How far `auto` is from each oracle of GAP_MODES that ran: the oracle's speed over auto's
    (1.3: the oracle's reply came 1.3x as fast), of the whole reply and of decoding, per prompt,
    and the medians of those per suite and over every prompt ("overall")."""
    speed = speeds(rows)
    prompts = []
    for pid, suite in dict.fromkeys((r["id"], r["suite"]) for r in rows):
        if (pid, "auto") not in speed:
            continue
        entry: dict = {"id": pid, "suite": suite}
        for mode in (m for m in GAP_MODES if (pid, m) in speed):
            (whole, decode), (auto_whole, auto_decode) = speed[pid, mode], speed[pid, "auto"]
            entry[mode] = {"whole": whole / auto_whole, "decode": decode / auto_decode}
        prompts.append(entry)
    names = dict.fromkeys(p["suite"] for p in prompts)
    suites = [{"suite": s, **_medians([p for p in prompts if p["suite"] == s])} for s in names]
    return {"prompts": prompts, "suites": suites, "overall": _medians(prompts)}


def _medians(prompts: list[dict]) -> dict:
    out: dict = {"prompts": len(prompts)}
    for mode in GAP_MODES:
        mine = [p[mode] for p in prompts if mode in p]
        if mine:
            out[mode] = {part: statistics.median(m[part] for m in mine) for part in ("whole", "decode")}
    return out


def lines(summary: list[dict], gap: dict) -> list[str]:
    """The figures as the harness prints them."""
    out = []
    for s in summary:
        faulty = f", {s['faulty']} faulty" if s.get("faulty") else ""
        out.append(
            f"{s['suite']} {s['mode']:14} whole {s['whole_vs_ar']:.2f}x decode {s['decode_vs_ar']:.2f}x, "
            f"{s['exact']}/{s['replies']} replies = ar's{faulty}"
        )
    for s in [*gap["suites"], {"suite": "overall", **gap["overall"]}]:
        parts = [f"{m} {s[m]['whole']:.2f}x whole, {s[m]['decode']:.2f}x decode" for m in GAP_MODES if m in s]
        out.append(f"{s['suite']}: over auto, " + "; ".join(parts))
    return out
