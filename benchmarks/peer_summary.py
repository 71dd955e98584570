"""benchmarks/peer.py's figures from its rows: per prompt each side's medians over rounds, per suite
and peer the peer's time over edgespec's (above 1: edgespec is faster), and the lines it prints.

A row is one timed reply of one side ("edgespec", or a peer mode such as "alone" or "lookup2") in one
round; a peer's row says where its output first parted from edgespec's of the same round (None:
equal), and a drafting peer's row how many tokens its drafter proposed."""

from __future__ import annotations

import statistics

EDGESPEC = "edgespec"
FIGURES = ("whole_s", "ttft_s", "decode_s", "tokens")


def ratio(peer: float, mine: float) -> float | None:
    """The peer's time over edgespec's (above 1: edgespec is faster); None where edgespec's is nothing."""
    return peer / mine if mine > 0 else None


def peers_of(rows: list[dict]) -> list[str]:
    """The peer modes the rows hold, in the order they first ran."""
    return [side for side in dict.fromkeys(r["side"] for r in rows) if side != EDGESPEC]


def per_prompt(rows: list[dict]) -> list[dict]:
    """Per prompt, each side's medians over rounds (and a drafting peer's proposed tokens), and for
    each peer whether its output equalled edgespec's in every round, else where they first parted,
    the earliest over rounds (tokens for a call, characters of the text's UTF-8 for a process)."""
    prompts = []
    for key in dict.fromkeys((r["suite"], r["id"]) for r in rows):
        mine = [r for r in rows if (r["suite"], r["id"]) == key]
        entry = {"suite": key[0], "id": key[1], "timed": mine[0]["timed"], "prompt_tokens": mine[0]["prompt_tokens"]}
        for side in [EDGESPEC, *peers_of(rows)]:
            runs = [r for r in mine if r["side"] == side]
            figures = FIGURES + (("drafted",) if runs and "drafted" in runs[0] else ())
            entry[side] = {k: statistics.median(r[k] for r in runs) for k in figures}
            if side != EDGESPEC:
                parted = [r["first_difference"] for r in runs if r["first_difference"] is not None]
                entry[side] |= {"equal": not parted, "first_difference": min(parted) if parted else None}
        prompts.append(entry)
    return prompts


def per_suite(prompts: list[dict], peer: str) -> list[dict]:
    """Per suite, against one peer: both sides' summed whole-reply times, the peer's summed time over
    edgespec's and the median of the per-prompt ratios, the same of the first token and of decoding,
    tokens each side generated and the prompts with equal outputs."""
    suites = []
    for suite in dict.fromkeys(p["suite"] for p in prompts):
        mine = [p for p in prompts if p["suite"] == suite]

        def summed(key: str, mine: list[dict] = mine) -> float | None:
            return ratio(sum(p[peer][key] for p in mine), sum(p[EDGESPEC][key] for p in mine))

        each = [r for p in mine if (r := ratio(p[peer]["whole_s"], p[EDGESPEC]["whole_s"])) is not None]
        equal = sum(p[peer]["equal"] for p in mine)
        suites.append(
            {
                "suite": suite,
                "peer": peer,
                "timed": mine[0]["timed"],
                "prompts": len(mine),
                "prompt_tokens": [p["prompt_tokens"] for p in mine],
                "edgespec_whole_s": sum(p[EDGESPEC]["whole_s"] for p in mine),
                "peer_whole_s": sum(p[peer]["whole_s"] for p in mine),
                "edgespec_tokens": sum(p[EDGESPEC]["tokens"] for p in mine),
                "peer_tokens": sum(p[peer]["tokens"] for p in mine),
                "peer_drafted": sum(p[peer].get("drafted", 0) for p in mine),
                "whole_ratio": summed("whole_s"),
                "whole_ratio_median": statistics.median(each) if each else None,
                "ttft_ratio": summed("ttft_s"),
                "decode_ratio": summed("decode_s"),
                "equal": equal,
                "equal_share": equal / len(mine),
                "first_differences": sorted(p[peer]["first_difference"] for p in mine if not p[peer]["equal"]),
            }
        )
    return suites


def summarise(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The prompts' medians (`per_prompt`) and a summary per peer and suite (`per_suite`), peer by peer."""
    prompts = per_prompt(rows)
    return prompts, [s for peer in peers_of(rows) for s in per_suite(prompts, peer)]


def times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(suites: list[dict]) -> list[str]:
    """The summary as printed on stdout: one line per suite and peer, each ratio the peer's time over
    edgespec's (above 1: edgespec is faster)."""
    lines = [
        "suite (prompts) | peer | timed | whole s edgespec / peer | whole ratio (median) | TTFT | decode | tokens | "
        "equal"
    ]
    for s in suites:
        parted = (
            f" (first differences at {', '.join(map(str, s['first_differences']))})" if s["first_differences"] else ""
        )
        lines.append(
            f"{s['suite']} ({s['prompts']}) | {s['peer']} | {s['timed']} | {s['edgespec_whole_s']:.1f} / "
            f"{s['peer_whole_s']:.1f} | {times(s['whole_ratio'])} ({times(s['whole_ratio_median'])}) | "
            f"{times(s['ttft_ratio'])} | {times(s['decode_ratio'])} | {s['edgespec_tokens']:g} / "
            f"{s['peer_tokens']:g} | {s['equal']}/{s['prompts']}{parted}"
        )
    return lines
