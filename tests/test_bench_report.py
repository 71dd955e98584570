"""The bench's summary and how it is shown: medians of per-prompt ratios and times, the tables (whole
at 80 columns and on a pipe, whatever the number of pairs) and the plot.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from edgespec.bench import report, tables
from edgespec.bench.modes import Row
from edgespec.bench.report import summarize

# -- summary ---------------------------------------------------------------------------------------


def row(id, suite, mode, tps, tokens=100, drafted=0, accepted=0, passes=99, trace=(), matches=True):
    return Row(id, suite, mode, tokens, tps, drafted, accepted, passes, matches, None, list(trace))


HAND_ROWS = [
    # suite "a": per-prompt ratios of k2 are 1.5, 1.0 and 3.0 -> median 1.5 (a ratio of medians would be 2.0)
    row("a/0", "a", "ar", 10.0, trace=[0] * 3),
    row("a/0", "a", "k2", 15.0, drafted=20, accepted=10, passes=50, trace=[2, 2, 0]),
    row("a/1", "a", "ar", 20.0, trace=[0]),
    row("a/1", "a", "k2", 20.0, drafted=10, accepted=5, passes=50, trace=[2, 10], matches=False),
    row("a/2", "a", "ar", 5.0),
    row("a/2", "a", "k2", 15.0, drafted=10, accepted=9, passes=20, trace=[2]),
    # suite "b": one prompt
    row("b/0", "b", "ar", 8.0),
    row("b/0", "b", "k2", 4.0, drafted=40, accepted=0, passes=80, trace=[2] * 4),
]


def test_summarize_computes_medians_of_per_prompt_ratios_and_totals():
    summary = {(s["suite"], s["mode"]): s for s in summarize(HAND_ROWS)}
    assert list(summary) == [("a", "ar"), ("a", "k2"), ("b", "ar"), ("b", "k2")]
    k2 = summary["a", "k2"]
    assert k2["speedup_vs_ar"] == pytest.approx(1.5)
    assert k2["decode_tokens_per_s"] == pytest.approx(15.0)  # median of 15, 20, 15
    assert k2["acceptance"] == pytest.approx(24 / 40)
    assert k2["tokens_per_pass"] == pytest.approx((300 - 3) / 120)  # the prefill token of each of 3 prompts is no pass
    assert k2["k_histogram"] == {"0": 1, "2": 4, "10": 1}
    assert list(k2["k_histogram"]) == ["0", "2", "10"]  # numeric order, not text order
    # per pass that verified a draft (5 of the traces' 6): its nodes, and the accepted path
    assert k2["tree_size"] == pytest.approx(18 / 5) and k2["accepted_length"] == pytest.approx(24 / 5)
    assert k2["matches_ar"] == pytest.approx(2 / 3) and k2["prompts"] == 3
    ar = summary["a", "ar"]
    assert ar["speedup_vs_ar"] == pytest.approx(1.0) and ar["acceptance"] == 0.0
    assert ar["decode_tokens_per_s"] == pytest.approx(10.0)
    assert ar["k_histogram"] == {"0": 4} and ar["tokens_per_pass"] == pytest.approx(1.0)
    assert ar["tree_size"] == ar["accepted_length"] == 0.0
    assert summary["b", "k2"]["speedup_vs_ar"] == pytest.approx(0.5)
    assert summary["b", "k2"]["acceptance"] == 0.0


def timed_row(id, mode, tps, ttft, decode, target_read=None, draft_read=None):
    r = row(id, "a", mode, tps)  # 100 tokens
    r.ttft_s, r.decode_s, r.target_read_s, r.draft_read_s = ttft, decode, target_read, draft_read
    return r


def test_summarize_gives_whole_reply_speedups_and_median_times():
    # whole replies of 100 tokens: ar 10 s each, k2 5 s, 8 s and 9 s
    rows = [
        timed_row("a/0", "ar", 11.0, 1.0, 9.0, 1.0, 0.0),
        timed_row("a/0", "k2", 26.0, 1.2, 3.8, 1.0, 0.2),
        timed_row("a/1", "ar", 12.5, 2.0, 8.0, 2.0, 0.0),
        timed_row("a/1", "k2", 18.0, 2.5, 5.5, 2.0, 0.5),
        timed_row("a/2", "ar", 16.5, 4.0, 6.0, 4.0, 0.0),
        timed_row("a/2", "k2", 21.5, 4.4, 4.6, 4.0, 0.4),
        timed_row("a/0", "hf-assisted", 20.0, 1.5, 4.5),
        timed_row("a/1", "hf-assisted", 0.0, 9.0, 0.0),
    ]
    s = {x["mode"]: x for x in summarize(rows)}
    k2 = s["k2"]
    assert k2["total_speedup_vs_ar"] == pytest.approx(10 / 8)  # the median of 2.0, 1.25, 1.11
    assert k2["speedup_vs_ar"] == pytest.approx(statistics.median([26 / 11, 18 / 12.5, 21.5 / 16.5]))
    assert (k2["ttft_s"], k2["target_read_s"], k2["draft_read_s"]) == pytest.approx((2.5, 2.0, 0.4))
    assert (k2["decode_s"], k2["total_s"], k2["total_tokens_per_s"]) == pytest.approx((4.6, 8.0, 100 / 8))
    assert s["ar"]["total_speedup_vs_ar"] == pytest.approx(1.0) and s["ar"]["total_s"] == pytest.approx(10.0)
    peer = s["hf-assisted"]  # its reading is not split out; a reply its first pass made whole still has a speed
    assert peer["target_read_s"] is None and peer["draft_read_s"] is None
    assert peer["total_speedup_vs_ar"] == pytest.approx(statistics.median([10 / 6, 10 / 9]))
    assert peer["speedup_vs_ar"] == pytest.approx(20 / 11)  # a/1 decoded nothing: no decode ratio


def test_summarize_takes_the_median_of_a_prompts_repeats_before_the_ratio():
    def rep(id, mode, tps, repeat):
        r = row(id, "a", mode, tps)
        r.repeat = repeat
        return r

    rows = [
        rep("a/0", "ar", 10.0, 0),
        rep("a/0", "k2", 30.0, 0),  # one noisy round: 3x
        rep("a/0", "ar", 10.0, 1),
        rep("a/0", "k2", 12.0, 1),
        rep("a/0", "ar", 10.0, 2),
        rep("a/0", "k2", 11.0, 2),
    ]
    k2 = next(s for s in summarize(rows) if s["mode"] == "k2")
    assert k2["speedup_vs_ar"] == pytest.approx(1.2)  # median speed 12 over median 10
    assert k2["prompts"] == 1 and k2["decode_tokens_per_s"] == pytest.approx(12.0)


def test_summarize_without_ar_has_no_speedup():
    s = summarize([row("a/0", "a", "k2", 15.0, drafted=4, accepted=2, passes=3, matches=None)])
    assert s[0]["speedup_vs_ar"] is None and s[0]["matches_ar"] is None
    assert s[0]["acceptance"] == pytest.approx(0.5)


def test_summarize_skips_prompts_whose_ar_speed_is_zero():
    rows = [
        row("a/0", "a", "ar", 0.0),
        row("a/0", "a", "k2", 5.0),
        row("a/1", "a", "ar", 10.0),
        row("a/1", "a", "k2", 30.0),
    ]
    assert {s["mode"]: s["speedup_vs_ar"] for s in summarize(rows)}["k2"] == pytest.approx(3.0)


def test_summarize_skips_prompts_a_mode_had_nothing_to_time_in():
    """hf-assisted's first pass can produce a whole short reply: no decode speed, not a 0x speedup."""
    rows = [
        row("a/0", "a", "ar", 10.0),
        row("a/0", "a", "hf-assisted", 0.0, matches=None),
        row("a/1", "a", "ar", 10.0),
        row("a/1", "a", "hf-assisted", 15.0, matches=None),
        row("a/2", "a", "ar", 10.0),
        row("a/2", "a", "hf-assisted", 12.0, matches=None),
    ]
    assert {s["mode"]: s["speedup_vs_ar"] for s in summarize(rows)}["hf-assisted"] == pytest.approx(1.35)


# -- tables and plot -------------------------------------------------------------------------------


def test_table_lists_every_suite_and_mode():
    from rich.console import Console

    console = Console(record=True, width=250)
    console.print(tables.table(summarize(HAND_ROWS)))
    text = console.export_text()
    assert "1.50x" in text and "0.50x" in text and "60%" in text and "0:1 2:4 10:1" in text
    assert text.index("whole vs ar") < text.index("decode vs ar")  # what the user waits for comes first
    console.print(
        tables.table(
            summarize(
                [
                    timed_row("a/0", "ar", 11.0, 1.0, 9.0, 0.75, 0.0),
                    timed_row("a/0", "k2", 26.0, 1.25, 3.75, 0.75, 0.25),
                ]
            )
        )
    )
    times, speeds = [row.split() for row in console.export_text().splitlines() if " k2 " in row][-2:]
    assert [x for x in times if x != "│"] == ["a", "k2", "1.25", "0.75", "0.25", "3.75", "5.00", "20.0"]
    assert [x for x in speeds if x != "│"][:5] == ["a", "k2", "2.00x", "26.0", "2.36x"]
    assert "accepted path / tree size" not in text  # no auto mode: every draft was a chain of K
    auto = [replace(r, mode="auto") for r in HAND_ROWS if r.mode == "k2"] + [r for r in HAND_ROWS if r.mode == "ar"]
    console.print(tables.table(summarize(auto)))
    assert "accepted path / tree size per drafting pass: auto a 4.8/3.6, auto b 0.0/2.0" in console.export_text()


def test_plot_copes_with_ar_only(tmp_path):
    rows = [row("a/0", "a", "ar", 10.0, trace=[0, 0])]
    report.plot(tmp_path / "ar.png", rows, summarize(rows))
    assert (tmp_path / "ar.png").read_bytes()[:4] == b"\x89PNG"


# -- 80 columns and pipes ---------------------------------------------------------------------------

LONG_PAIRS = ["qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-q4_0-tuned", "llama-3.1-8b-hf-4bit"]
BENCH_MODES = ["ar", "k2", "k4", "model-k8", "heuristic", "auto"]


def several_pairs_rows(pairs: list[str]) -> list[Row]:
    """Two prompts of two suites in every default mode of each pair, every figure distinct, with K
    histograms as long as a real reply's and a sampled output that parted from ar unchecked."""
    rows = []
    for p, pair in enumerate(pairs):
        for s, suite in enumerate(("code-edit", "humaneval")):
            for m, mode in enumerate(BENCH_MODES):
                for i in range(2):
                    n = 1 + p * 100 + s * 30 + m * 4 + i
                    trace = [0] * (3 + m) + list(range(1, 2 + 2 * m)) * 3
                    r = timed_row(f"{suite}/{i}", mode, 10.0 + n * 0.37, 0.5 + n * 0.011, 4.0 + n * 0.013, 0.4, 0.05)
                    r.suite, r.pair, r.k_trace, r.drafted, r.accepted = suite, pair, trace, sum(trace), sum(trace) // 2
                    r.vs_ar = None if mode == "ar" else ("unchecked" if (mode, i) == ("heuristic", 1) else "exact")
                    rows.append(r)
    return rows


def shown_whole(text: str, summary: list[dict]) -> None:
    """No cell cut short, and every figure of every summary entry among the words shown."""
    assert "…" not in text
    words = set(text.split())
    for s in summary:
        figures = [f"{s[key]:.2f}" for key in ("ttft_s", "target_read_s", "draft_read_s", "decode_s", "total_s")]
        figures += [f"{s['total_tokens_per_s']:.1f}", f"{s['decode_tokens_per_s']:.1f}", f"{s['acceptance']:.0%}"]
        figures += [f"{s['tokens_per_pass']:.2f}", f"{s['total_speedup_vs_ar']:.2f}x", f"{s['speedup_vs_ar']:.2f}x"]
        figures += [f"{s['total_speedup_vs_first_ar']:.2f}x", f"{s['speedup_vs_first_ar']:.2f}x"]
        figures += [f"{k}:{v}" for k, v in s["k_histogram"].items()]
        assert set(figures) <= words, (s["pair"], s["suite"], s["mode"], set(figures) - words)
    assert {s["pair"] for s in summary} <= words and {s["mode"] for s in summary} <= words


@pytest.mark.parametrize("n_pairs", [2, 3])
def test_the_tables_of_several_pairs_stay_whole_at_80_columns(n_pairs):
    """Several pairs used to collapse the tables to "1…" cells at 80 columns: they stack instead."""
    from rich.console import Console

    rows = several_pairs_rows(LONG_PAIRS[:n_pairs])
    summary = summarize(rows)
    console = Console(record=True, width=80)
    console.print(tables.table(summary, rows=rows))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    shown_whole(text, summary)
    assert "unchecked)" in text and f"against {LONG_PAIRS[0]}'s ar" in text


def test_the_tables_of_several_pairs_stay_whole_on_a_pipe(monkeypatch):
    import io

    from rich.console import Console

    monkeypatch.delenv("COLUMNS", raising=False)
    rows = several_pairs_rows(LONG_PAIRS[:2])
    summary = summarize(rows)
    out = io.StringIO()
    Console(file=out).print(tables.table(summary, rows=rows))  # not a terminal: 80 columns
    shown_whole(out.getvalue(), summary)


def test_a_wide_terminal_keeps_one_table_with_a_pair_column():
    from rich.console import Console

    rows = several_pairs_rows(LONG_PAIRS[:2])
    summary = summarize(rows)
    console = Console(record=True, width=250)
    console.print(tables.table(summary, rows=rows))
    text = console.export_text()
    shown_whole(text, summary)
    assert text.count("K histogram") == 1 and f"decode vs {LONG_PAIRS[0]} ar" in " ".join(text.split())
