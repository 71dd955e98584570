"""The bench's results: per pair, suite and mode medians and speedups (`summarize`), the JSON
document and the plot; `tables` shows the summary on a terminal or a pipe."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import asdict
from operator import attrgetter
from pathlib import Path

from edgespec.bench.modes import EXACT, UNCHECKED, Row
from edgespec.quality.divergence import DIFF, TIE
from edgespec.util.errors import UsageError
from edgespec.util.output_files import check_writable


def summarize(rows: Iterable[Row]) -> list[dict]:
    """Per pair, suite and mode: median tokens/s of the decoding and of the whole reply, the median
    per-prompt speedups of both vs the pair's own ar (and, with several pairs, vs the first pair's
    ar), median times (first token, the target's and the draft model's reading, decoding, whole
    reply), acceptance, tokens per pass, K histogram, the share of outputs identical to ar, and of
    replies under a response_format, how many parsed and validated against it (`replies`) and the
    share of their time the constraint's matcher took (`constraint_share`). A
    prompt's figure in a mode is the median of its repeats; each median time is taken on its own, so
    they need not add up."""
    rows = list(rows)
    speed = _prompt_medians(rows, lambda r: r.decode_tokens_per_s)
    whole = _prompt_medians(rows, lambda r: r.total_tokens_per_s)
    times = {
        name: _prompt_medians(rows, attrgetter(name))
        for name in ("ttft_s", "target_read_s", "draft_read_s", "decode_s", "total_s")
    }
    pairs = list(dict.fromkeys(r.pair for r in rows))
    out = []
    for pair, suite, mode in dict.fromkeys((r.pair, r.suite, r.mode) for r in rows):
        group = [r for r in rows if r.pair == pair and r.suite == suite and r.mode == mode]
        ids = list(dict.fromkeys(r.id for r in group))
        hist: dict[str, int] = {}
        for r in group:
            for k in r.k_trace:
                hist[str(k)] = hist.get(str(k), 0) + 1
        drafted = sum(r.drafted for r in group)
        passes = sum(r.target_passes for r in group)
        drafting = sum(1 for r in group for k in r.k_trace if k)  # passes that verified a draft
        matched = [m for m in (r.matches_ar for r in group) if m is not None]
        verdicts = [r.vs_ar for r in group if r.vs_ar is not None]
        constrained = [r for r in group if r.valid is not None]  # replies under a response_format
        checked = [v for v in (r.valid for r in constrained) if v is not None]  # all of them
        constrained_s = sum(r.total_s for r in constrained)
        entry = {
            "pair": pair,
            "suite": suite,
            "mode": mode,
            "prompts": len(ids),
            "decode_tokens_per_s": _median_of(speed, pair, suite, ids, mode),
            "total_tokens_per_s": _median_of(whole, pair, suite, ids, mode),
            "total_speedup_vs_ar": _median_ratio(whole, pair, suite, ids, mode, pair),
            "speedup_vs_ar": _median_ratio(speed, pair, suite, ids, mode, pair),
            **{name: _median_of(t, pair, suite, ids, mode) for name, t in times.items()},
            "acceptance": sum(r.accepted for r in group) / drafted if drafted else 0.0,
            "tokens_per_pass": sum(max(r.tokens - 1, 0) for r in group) / passes if passes else 0.0,
            # per pass that verified a draft: its nodes (a chain's K) and the accepted path's length
            "tree_size": sum(k for r in group for k in r.k_trace) / drafting if drafting else 0.0,
            "accepted_length": sum(r.accepted for r in group) / drafting if drafting else 0.0,
            "k_histogram": dict(sorted(hist.items(), key=lambda kv: int(kv[0]))),
            "matches_ar": sum(matched) / len(matched) if matched else None,
            "vs_ar": {v: verdicts.count(v) for v in (EXACT, TIE, DIFF, UNCHECKED)} if verdicts else None,
            "replies": {"valid": sum(checked), "invalid": checked.count(False)} if checked else None,
            # the constraint's matcher (masks, following drafts): its share of the constrained replies' time
            "constraint_share": sum(r.constraint_s for r in constrained) / constrained_s if constrained_s else None,
        }
        if len(pairs) > 1:
            entry["total_speedup_vs_first_ar"] = _median_ratio(whole, pair, suite, ids, mode, pairs[0])
            entry["speedup_vs_first_ar"] = _median_ratio(speed, pair, suite, ids, mode, pairs[0])
        out.append(entry)
    return out


def _prompt_medians(rows: list[Row], figure: Callable[[Row], float | None]) -> dict[tuple, float]:
    """(pair, suite, prompt id, mode) -> the median of `figure` over that prompt's repeats; a
    figure the mode does not give (None) is left out."""
    values: dict[tuple, list[float]] = {}
    for r in rows:
        value = figure(r)
        if value is not None:
            values.setdefault((r.pair, r.suite, r.id, r.mode), []).append(value)
    return {key: statistics.median(v) for key, v in values.items()}


def _median_of(medians: dict[tuple, float], pair: str, suite: str, ids: list[str], mode: str) -> float | None:
    """The median over the prompts `ids` of their figures in `mode` (None: no prompt has one)."""
    values = [medians[key] for id in ids if (key := (pair, suite, id, mode)) in medians]
    return statistics.median(values) if values else None


def _median_ratio(
    speeds: dict[tuple, float], pair: str, suite: str, ids: list[str], mode: str, ar_pair: str
) -> float | None:
    """Median of per-prompt speed in `mode` over `ar_pair`'s ar. A speed of 0 is no speed: that run
    had nothing to time (a one-token reply's decoding; or `hf-assisted` whose first pass, which
    also reads the prompt, produced the whole reply), so its prompt has no ratio."""
    ratios = [
        v / ar
        for id in ids
        if (v := speeds.get((pair, suite, id, mode))) and (ar := speeds.get((ar_pair, suite, id, "ar")))
    ]
    return statistics.median(ratios) if ratios else None


def to_json(rows: list[Row], summary: list[dict], meta: dict) -> dict:
    return {
        "meta": meta,
        "rows": [
            {
                **{k: v for k, v in asdict(r).items() if k not in ("output_ids", "rounds")},
                "total_s": r.total_s,
                "total_tokens_per_s": r.total_tokens_per_s,
            }
            for r in rows
        ],
        "summary": summary,
    }


def verify_ms(curve: dict[int, float]) -> dict[str, float]:
    """A quiet verify curve (`CostModel.quiet_curve`) as result files record it: ms by tokens
    verified, to three significant figures (a tiny model's pass takes well under a tenth of a ms)."""
    return {str(n): float(f"{seconds * 1000:.3g}") for n, seconds in sorted(curve.items())}


def check_plot_path(path: Path) -> None:
    """Refuse, before the bench runs, a plot path that cannot be written or whose suffix names no
    image format matplotlib writes."""
    from matplotlib.figure import Figure  # matplotlib takes about 0.5 s to import: only with --plot

    check_writable(path, "--plot")
    formats = Figure().canvas.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        raise UsageError(f"--plot {path}: the name must end in one of {', '.join('.' + f for f in sorted(formats))}")


def plot(path: Path, rows: list[Row], summary: list[dict]) -> None:
    """Whole-reply speedup per suite and mode (bars), and K over time for the `auto` generation that drafted most."""
    import matplotlib  # about 0.5 s to import: only with --plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): pyplot takes its backend when imported

    suites = list(dict.fromkeys(s["suite"] for s in summary))
    pairs = list(dict.fromkeys(s["pair"] for s in summary))
    series = [(p, m) for p, m in dict.fromkeys((s["pair"], s["mode"]) for s in summary) if m != "ar"]
    modes = [m for _, m in series]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(len(series), 1)
    for i, (pair, mode) in enumerate(series):
        vals = [
            next(
                (
                    s["total_speedup_vs_ar"] or 0
                    for s in summary
                    if s["pair"] == pair and s["suite"] == su and s["mode"] == mode
                ),
                0,
            )
            for su in suites
        ]
        ax1.bar(
            [j + i * width for j in range(len(suites))], vals, width, label=f"{pair} {mode}" if len(pairs) > 1 else mode
        )
    ax1.axhline(1.0, color="black", linewidth=0.8)
    ax1.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(suites))], suites)
    ax1.set_ylabel("whole reply (first token + decoding) speed vs plain\n(median of per-prompt ratios)")
    if series:
        ax1.legend(fontsize=8)
    trace_mode = "auto" if any(r.mode == "auto" for r in rows) else (modes[0] if modes else "ar")
    candidates = [r for r in rows if r.mode == trace_mode]
    if candidates:
        r = max(candidates, key=lambda r: (r.drafted, len(r.k_trace)))
        ax2.step(range(len(r.k_trace)), r.k_trace, where="post")
        ax2.set_title(f"K per target pass: {trace_mode}, {r.id}", fontsize=9)
        ax2.set_xlabel("target pass")
        ax2.set_ylabel("K (0 = plain step)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
