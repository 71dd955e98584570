"""`edgespec bench`'s own logic on fake models, in seconds: the suite format, the mode list,
interleaving, agreement with plain decoding, the per-prompt ratios, the JSON schema and the plot.

The engine here is a real `Engine` around `MarkovBackend` target and draft models whose evaluations
advance a `VirtualClock` instead of taking time, so tokens/s figures are exact.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from dataclasses import replace
from importlib.resources import files
from pathlib import Path
from types import SimpleNamespace

import pytest

from edgespec.bench import report, suites
from edgespec.bench.modes import Mode, Row, parse_modes, run_bench
from edgespec.bench.report import summarize, to_json
from edgespec.bench.suites import BenchPrompt, load_suite
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.controller import LONGEST_DRAFT
from edgespec.decoding.policy.plan import KSetting
from edgespec.decoding.sampling import SamplingParams
from edgespec.util.errors import UsageError
from edgespec.util.text_check import MAX_TOKEN_BYTES
from tests.fakes import VirtualClock, fake_engine, simulated_time

DEV_SET = Path("/work/shared/bench/dev.jsonl")
SHIPPED = Path(str(files("edgespec") / "data" / "dev.jsonl"))
GREEDY = SamplingParams()

ROW_KEYS = {
    "id",
    "suite",
    "mode",
    "tokens",
    "decode_tokens_per_s",
    "drafted",
    "accepted",
    "target_passes",
    "matches_ar",
    "prompt_tokens",
    "target_read_tokens",
    "ttft_s",
    "target_read_s",
    "draft_read_s",
    "decode_s",
    "total_s",
    "total_tokens_per_s",
}
SUMMARY_KEYS = {
    "suite",
    "mode",
    "decode_tokens_per_s",
    "speedup_vs_ar",
    "acceptance",
    "tokens_per_pass",
    "k_histogram",
    "total_tokens_per_s",
    "total_speedup_vs_ar",
    "ttft_s",
    "target_read_s",
    "draft_read_s",
    "decode_s",
    "total_s",
}

# -- the suite file ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", [SHIPPED, DEV_SET], ids=["shipped", "shared"])
def test_load_suite_reads_the_dev_set(path):
    if not path.exists():
        pytest.skip(f"{path} is not on this machine")
    prompts = load_suite(path)
    assert len(prompts) == sum(1 for line in path.read_text().splitlines() if line.strip())
    assert {p.suite for p in prompts} == {"humaneval", "mtbench", "code-edit"}
    for p in prompts:
        assert p.max_tokens > 0 and p.id
        if p.mode == "completion":
            assert isinstance(p.prompt, str) and p.prompt and p.messages is None
        else:
            assert p.mode == "chat" and p.prompt is None
            assert p.messages and all({"role", "content"} <= set(m) for m in p.messages)
    first = prompts[0]
    assert (first.id, first.suite, first.mode, first.max_tokens) == ("HumanEval/0", "humaneval", "completion", 256)
    assert first.prompt.startswith("from typing import List")
    assert {p.mode for p in prompts if p.suite == "code-edit"} == {"chat"}


def test_the_shipped_suite_is_the_dev_set():
    if not DEV_SET.exists():
        pytest.skip(f"{DEV_SET} is not on this machine")
    assert load_suite(SHIPPED) == load_suite(DEV_SET)


GOOD_COMPLETION = '{"id": "a/1", "suite": "a", "mode": "completion", "prompt": "def f():", "max_tokens": 12}'
GOOD_CHAT = '{"id": "b/1", "suite": "b", "mode": "chat", "messages": [{"role": "user", "content": "hi"}]}'


def write_suite(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "suite.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_load_suite_skips_blank_lines_and_defaults_max_tokens(tmp_path):
    prompts = load_suite(write_suite(tmp_path, GOOD_COMPLETION, "", "   ", GOOD_CHAT))
    assert [p.id for p in prompts] == ["a/1", "b/1"]
    assert prompts[0] == BenchPrompt("a/1", "a", "completion", 12, prompt="def f():")
    assert prompts[1].max_tokens == 256 and prompts[1].messages == ({"role": "user", "content": "hi"},)


@pytest.mark.parametrize(
    "bad",
    [
        "{not json",
        "[1, 2]",
        "null",
        '"a string"',
        '{"suite": "a", "mode": "completion", "prompt": "x"}',  # no id
        '{"id": "a/2", "mode": "completion", "prompt": "x"}',  # no suite
        '{"id": "a/2", "suite": "a", "prompt": "x"}',  # no mode
        '{"id": "a/2", "suite": "a", "mode": "infill", "prompt": "x"}',
        '{"id": "a/2", "suite": "a", "mode": "completion", "messages": []}',  # completion without prompt
        '{"id": "a/2", "suite": "a", "mode": "chat", "prompt": "x"}',  # chat without messages
        '{"id": "a/2", "suite": "a", "mode": "completion", "prompt": "x", "max_tokens": "many"}',
    ],
)
def test_load_suite_rejects_a_bad_line_in_one_line_naming_file_and_line(tmp_path, bad):
    path = write_suite(tmp_path, GOOD_COMPLETION, "", bad, GOOD_CHAT)
    with pytest.raises(UsageError) as e:
        load_suite(path)
    message = str(e.value)
    assert message.startswith(f"{path}:3: ") and "\n" not in message


@pytest.mark.parametrize(
    "bad",
    [
        '{"id": "a/2", "suite": "a", "mode": "chat", "messages": "hello"}',
        '{"id": "a/2", "suite": "a", "mode": "chat", "messages": [{"role": "user"}]}',
        '{"id": "a/2", "suite": "a", "mode": "completion", "prompt": 42}',
        '{"id": "a/2", "suite": "a", "mode": "completion", "prompt": "x", "max_tokens": 0}',
    ],
)
def test_load_suite_rejects_wrongly_typed_fields(tmp_path, bad):
    with pytest.raises(UsageError, match=r":2: "):
        load_suite(write_suite(tmp_path, GOOD_COMPLETION, bad))


@pytest.mark.parametrize(
    "bad, field",
    [
        ('{"id": "a/2", "suite": "a", "mode": "completion", "prompt": ""}', "prompt"),
        ('{"id": "a/2", "suite": "a", "mode": "completion", "prompt": " \\n"}', "prompt"),
        (
            '{"id": "a/2", "suite": "a", "mode": "chat", "messages": [{"role": "user", "content": ""}]}',
            "messages[0].content",
        ),
        ('{"id": "a/2", "suite": "a", "mode": "chat", "messages": []}', "messages"),
        (
            '{"id": "a/2", "suite": "a", "mode": "chat", "messages": [{"role": "robot", "content": "x"}]}',
            "messages[0].role",
        ),
        ('{"id": "a/2", "suite": "a", "mode": "completion", "prompt": "x\\ud800"}', "prompt"),
        (
            '{"id": "a/2", "suite": "a", "mode": "chat", "messages": [{"role": "system", "content": "\\udfff"}, '
            '{"role": "user", "content": "hi"}]}',
            "messages[0].content",
        ),
        ('{"id": "a/2", "suite": "a\\ud800", "mode": "completion", "prompt": "x"}', "suite"),
        ('{"id": "a/2", "suite": "a", "mode": "completion", "prompt": "x", "max_tokens": true}', "max_tokens"),
    ],
)
def test_load_suite_names_the_line_and_the_field_a_model_would_fail_on(tmp_path, bad, field):
    """What the tokenizer, the chat template or the decoder would refuse after the pair loaded."""
    path = write_suite(tmp_path, GOOD_COMPLETION, bad)
    with pytest.raises(UsageError) as e:
        load_suite(path)
    assert str(e.value).startswith(f"{path}:2: {field}: ") and "\n" not in str(e.value)


def test_load_suite_refuses_a_prompt_no_context_of_the_pairs_can_hold(tmp_path):
    fits = json.dumps({"id": "a", "suite": "a", "mode": "completion", "prompt": "x" * (4 * MAX_TOKEN_BYTES)})
    too_long = json.dumps(
        {
            "id": "b",
            "suite": "a",
            "mode": "chat",
            "messages": [{"role": "user", "content": "x" * (4 * MAX_TOKEN_BYTES)}, {"role": "user", "content": "y"}],
        }
    )
    assert len(load_suite(write_suite(tmp_path, fits), context=4)) == 1
    path = write_suite(tmp_path, fits, too_long)
    with pytest.raises(UsageError) as e:
        load_suite(path, context=4)
    assert str(e.value) == (
        f"{path}:2: the chat text is {4 * MAX_TOKEN_BYTES + 1:,} bytes, more than the pair's "
        "context of 4 tokens can hold"
    )


def test_load_suite_reads_no_further_than_its_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(suites, "SUITE_BYTES", len(GOOD_COMPLETION))
    path = write_suite(tmp_path, GOOD_COMPLETION, GOOD_CHAT)
    with pytest.raises(UsageError, match=f"^suite file {path} is larger than {len(GOOD_COMPLETION)} bytes$"):
        load_suite(path)


def test_load_suite_rejects_a_line_nested_too_deeply(tmp_path):
    """json's decoder recurses per level: a RecursionError, not a ValueError (found by generated suites)."""
    with pytest.raises(UsageError, match=r":2: not JSON \(nested too deeply\)$"):
        load_suite(write_suite(tmp_path, GOOD_COMPLETION, "[" * 5000))


def test_load_suite_rejects_a_missing_or_empty_file(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        load_suite(tmp_path / "nope.jsonl")
    with pytest.raises(UsageError, match="no prompts"):
        load_suite(write_suite(tmp_path, "", " "))


def test_select_takes_the_first_n_of_each_suite_and_named_suites():
    prompts = [BenchPrompt(f"{s}/{i}", s, "completion", 8, prompt="x") for s in ("a", "b") for i in range(3)]
    assert [p.id for p in suites.select(prompts, 2, None)] == ["a/0", "a/1", "b/0", "b/1"]
    assert [p.id for p in suites.select(prompts, None, "b")] == ["b/0", "b/1", "b/2"]
    assert [p.id for p in suites.select(prompts, 1, " b , a ")] == ["a/0", "b/0"]
    with pytest.raises(UsageError, match="c"):
        suites.select(prompts, None, "a,c")


# -- modes ------------------------------------------------------------------------------------


def test_parse_modes_reads_every_kind():
    modes = parse_modes("ar,k2,ngram-k4,model-k8,heuristic,auto", "model")
    assert modes == [
        Mode("ar", "none", KSetting("fixed", 0)),
        Mode("k2", "model", KSetting("fixed", 2)),
        Mode("ngram-k4", "ngram", KSetting("fixed", 4)),
        Mode("model-k8", "model", KSetting("fixed", 8)),
        Mode("heuristic", "model", KSetting("heuristic")),
        Mode("auto", "auto", KSetting("auto")),
    ]
    assert parse_modes(" ar , k3 ", "ngram") == [
        Mode("ar", "none", KSetting("fixed", 0)),
        Mode("k3", "ngram", KSetting("fixed", 3)),
    ]


def test_parse_modes_puts_plain_decoding_first_when_missing():
    assert [m.name for m in parse_modes("k2,auto", "ngram")] == ["ar", "k2", "auto"]


@pytest.mark.parametrize("spec", ["k", "kx", "k-2", "turbo", "ngram-heuristic", "draft-k2", "AR", "k2,fast"])
def test_parse_modes_rejects_unknown_modes(spec):
    with pytest.raises(UsageError, match="mode"):
        parse_modes(spec, "model")


@pytest.mark.parametrize(
    "spec",
    ["k" + "1" * 5000, "k\u0663", "ngram-k" + "9" * 4301],
    ids=["5000 digits", "an Arabic-Indic digit", "4301 digits"],
)
def test_parse_modes_rejects_a_k_that_is_not_a_few_ascii_digits(spec):
    """int() refuses over 4,300 digits with a ValueError (found by generated flags) and reads Arabic-Indic digits."""
    with pytest.raises(UsageError, match="unknown bench mode"):
        parse_modes(spec, "model")


@pytest.mark.parametrize("spec", ["", " , "])
def test_parse_modes_rejects_an_empty_list(spec):
    with pytest.raises(UsageError):
        parse_modes(spec, "model")


# -- running: interleaving and agreement with plain decoding -----------------------------------


PROMPTS = [
    BenchPrompt("c/0", "code", "completion", 30, prompt="def add(a, b):\n    return a + b\n\ndef add("),
    BenchPrompt("c/1", "code", "completion", 24, prompt="for i in range(10): print(i)\nfor i in range("),
    # long enough for the draft model's reading of the prompt to pay for itself (a 20-token reply need not)
    BenchPrompt("t/0", "talk", "chat", 48, messages=({"role": "user", "content": "tell me a story"},)),
]


@pytest.fixture(scope="module")
def bench_run():
    """One bench over PROMPTS in every kind of mode, on a flat (GPU-like) cost curve."""
    clock = VirtualClock()
    engine = fake_engine(clock, verify=lambda n: 0.010, draft_step=0.001, noise=0.3)
    modes = parse_modes("ar,k2,ngram-k4,model-k8,heuristic,auto", "model")
    order = []
    with simulated_time(clock):
        rows = run_bench([engine], PROMPTS, modes, GREEDY, on_row=lambda row: order.append((row.id, row.mode)))
    return SimpleNamespace(engine=engine, modes=modes, rows=rows, order=order)


def test_run_bench_interleaves_modes_per_prompt(bench_run):
    expected = [(p.id, m.name) for p in PROMPTS for m in bench_run.modes]
    assert bench_run.order == expected
    assert [(r.id, r.mode) for r in bench_run.rows] == expected


def test_run_bench_greedy_outputs_of_every_mode_match_ar(bench_run):
    for row in bench_run.rows:
        assert row.matches_ar is True and row.first_divergence is None, (row.id, row.mode)
    by_prompt = {}
    for row in bench_run.rows:
        by_prompt.setdefault(row.id, set()).add(tuple(row.output_ids))
    assert all(len(outputs) == 1 for outputs in by_prompt.values())


def test_run_bench_rows_carry_the_engine_figures(bench_run):
    limits = {"ar": 0, "k2": 2, "ngram-k4": 4, "model-k8": 8, "heuristic": 16, "auto": 16}
    for p in PROMPTS:
        rows = {r.mode: r for r in bench_run.rows if r.id == p.id}
        for mode, r in rows.items():
            assert r.suite == p.suite and r.tokens == p.max_tokens  # the fake never emits an end token
            assert r.target_passes == len(r.k_trace) and r.drafted == sum(r.k_trace)
            assert 0 <= r.accepted <= r.drafted and max(r.k_trace) <= limits[mode]
            assert r.decode_tokens_per_s > 0
        assert rows["ar"].drafted == 0 and set(rows["ar"].k_trace) == {0}
        # simulated time: plain decoding is one 10 ms pass per token after the first
        assert rows["ar"].decode_tokens_per_s == pytest.approx(1 / 0.010)  # tokens after the first, per second
        assert rows["model-k8"].accepted > 0
        # on a flat curve with a good cheap draft, drafting beats plain decoding
        assert rows["auto"].decode_tokens_per_s > 1.3 * rows["ar"].decode_tokens_per_s


def test_every_measured_generation_starts_cold(bench_run):
    """Every mode runs on the same engine: without emptying its caches, each mode after a prompt's
    first would find that prompt already read (one token evaluated) and time almost no reading."""
    for r in bench_run.rows:
        assert r.prompt_tokens > 1 and r.target_read_tokens == r.prompt_tokens, (r.id, r.mode)


def test_run_bench_rows_split_the_whole_reply(bench_run):
    for r in bench_run.rows:
        # simulated time: the target reads a whole prompt in one 10 ms pass; the draft model 1 ms a token
        assert r.target_read_s == pytest.approx(0.010), (r.id, r.mode)
        assert r.ttft_s == pytest.approx(r.target_read_s)  # no drafter reads before the first token
        if r.mode in ("ar", "ngram-k4"):  # the draft model never runs
            assert r.draft_read_s == 0.0
        else:  # it reads the prompt and the first token at its first draft
            assert r.draft_read_s == pytest.approx(0.001 * (r.prompt_tokens + 1))
        assert r.total_s == r.ttft_s + r.decode_s and r.total_tokens_per_s == pytest.approx(r.tokens / r.total_s)


def test_run_bench_flags_outputs_that_differ_from_ar():
    engine = fake_engine(noise=0.5)
    prompts = [BenchPrompt("x", "s", "completion", 24, prompt="abc abc abc")]
    sampled = SamplingParams(temperature=1.0, seed=1)
    modes = parse_modes("ar,k3", "model")
    rows = run_bench([engine], prompts, modes, sampled)
    ar, k3 = rows
    assert ar.matches_ar is True
    # sampled: the same seed draws differently once drafts are verified (the outputs are equal in law)
    assert k3.matches_ar is False
    i = k3.first_divergence
    assert k3.output_ids[:i] == ar.output_ids[:i] and k3.output_ids[i] != ar.output_ids[i]


def test_every_mode_is_compared_with_ar_whatever_the_order_given():
    engine = fake_engine()
    rows = run_bench([engine], PROMPTS[:1], parse_modes("k2,ar", "model"), GREEDY)
    assert all(r.matches_ar is not None for r in rows)


# -- summary, JSON, table, plot -----------------------------------------------------------------


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


def test_run_bench_repeats_the_interleaved_round_of_each_prompt():
    engine = fake_engine()
    order = []
    modes = parse_modes("ar,k2", "model")
    rows = run_bench(
        [engine], PROMPTS[:2], modes, GREEDY, on_row=lambda r: order.append((r.id, r.repeat, r.mode)), repeats=2
    )
    assert order == [(p.id, rep, m.name) for p in PROMPTS[:2] for rep in (0, 1) for m in modes]
    assert all(r.matches_ar is True for r in rows)  # each repeat is compared with its own ar run


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


def test_to_json_has_the_documented_schema(bench_run):
    summary = summarize(bench_run.rows)
    doc = json.loads(json.dumps(to_json(bench_run.rows, summary, {"pair": "fake"})))
    assert doc["meta"] == {"pair": "fake"}
    assert len(doc["rows"]) == len(PROMPTS) * len(bench_run.modes)
    for r in doc["rows"]:
        assert ROW_KEYS <= set(r) and "output_ids" not in r and "rounds" not in r
        assert isinstance(r["tokens"], int) and isinstance(r["matches_ar"], bool)
    assert {(s["suite"], s["mode"]) for s in doc["summary"]} == {
        (p.suite, m.name) for p in PROMPTS for m in bench_run.modes
    }
    for s in doc["summary"]:
        assert SUMMARY_KEYS <= set(s)
        assert all(isinstance(k, str) and isinstance(v, int) for k, v in s["k_histogram"].items())
    auto = next(s for s in doc["summary"] if s["suite"] == "code" and s["mode"] == "auto")
    per_prompt = [
        r["decode_tokens_per_s"] / a["decode_tokens_per_s"]
        for r in doc["rows"]
        if r["mode"] == "auto" and r["suite"] == "code"
        for a in doc["rows"]
        if a["mode"] == "ar" and a["id"] == r["id"]
    ]
    assert auto["speedup_vs_ar"] == pytest.approx(statistics.median(per_prompt))


def test_table_lists_every_suite_and_mode():
    from rich.console import Console

    console = Console(record=True, width=250)
    console.print(report.table(summarize(HAND_ROWS)))
    text = console.export_text()
    assert "1.50x" in text and "0.50x" in text and "60%" in text and "0:1 2:4 10:1" in text
    assert text.index("whole vs ar") < text.index("decode vs ar")  # what the user waits for comes first
    console.print(
        report.table(
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
    console.print(report.table(summarize(auto)))
    assert "accepted path / tree size per drafting pass: auto a 4.8/3.6, auto b 0.0/2.0" in console.export_text()


def test_auto_chain_is_a_bench_mode():
    assert parse_modes("auto-chain,auto", "model")[1:] == [
        Mode("auto-chain", DraftChoice.AUTO, KSetting("auto-chain")),
        Mode("auto", DraftChoice.AUTO, KSetting("auto")),
    ]


def test_plot_writes_a_png(tmp_path, bench_run):
    out = tmp_path / "bench.png"
    report.plot(out, bench_run.rows, summarize(bench_run.rows))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_copes_with_ar_only(tmp_path):
    rows = [row("a/0", "a", "ar", 10.0, trace=[0, 0])]
    report.plot(tmp_path / "ar.png", rows, summarize(rows))
    assert (tmp_path / "ar.png").read_bytes()[:4] == b"\x89PNG"


# -- the command --------------------------------------------------------------------------------


@pytest.fixture
def cli_env(tiny_cli_home, monkeypatch):
    """The tiny pair in a user models.toml, an empty store, and a two-suite JSONL file."""
    tmp_path = tiny_cli_home
    lines = [
        {"id": "c/0", "suite": "code", "mode": "completion", "prompt": "def add(a, b):", "max_tokens": 12},
        {"id": "c/1", "suite": "code", "mode": "completion", "prompt": "for i in range(", "max_tokens": 12},
        {"id": "c/2", "suite": "code", "mode": "completion", "prompt": "import os\n", "max_tokens": 12},
        {
            "id": "t/0",
            "suite": "talk",
            "mode": "chat",
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 12,
        },
    ]
    (tmp_path / "tiny.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _bench_command():
    from edgespec.cli import main as cli

    if "bench" not in cli.main.commands:
        pytest.skip("the `edgespec bench` command is not there yet")
    return cli


@pytest.mark.subprocess
def test_bench_command_writes_json_and_plot(cli_env):
    from click.testing import CliRunner

    cli = _bench_command()
    r = CliRunner().invoke(
        cli.main,
        [
            "bench",
            "--suite",
            "tiny.jsonl",
            "--modes",
            "ar,k2,auto",
            "--json",
            "out.json",
            "--plot",
            "out.png",
            "--limit",
            "2",
            "--repeats",
            "2",
        ],
    )
    assert r.exit_code == 0, (r.output, r.exception)
    doc = json.loads((cli_env / "out.json").read_text())
    rows = doc["rows"]
    assert doc["meta"]["repeats"] == 2
    # what made the figures: the command, the code and the machine
    assert {"command", "version", "machine", "date"} <= set(doc["meta"]) and doc["meta"]["machine"]["cpus"] >= 1
    # and what a verify pass cost there, by its length: auto measured it (every size it may draft)
    (curve,) = doc["meta"]["verify_ms"].values()
    assert set(curve) == {str(n) for n in range(1, LONGEST_DRAFT + 2)} and all(ms > 0 for ms in curve.values())
    checkout = Path(cli.__file__).resolve().parents[2]
    if (checkout / ".git").exists():
        head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
        assert doc["meta"]["commit"] == head.stdout.strip()
    # --limit 2 takes two prompts of each suite; every prompt runs every mode, interleaved, twice
    assert [(x["id"], x["repeat"], x["mode"]) for x in rows] == [
        (i, rep, m) for i in ("c/0", "c/1", "t/0") for rep in (0, 1) for m in ("ar", "k2", "auto")
    ]
    for x in rows:
        assert ROW_KEYS <= set(x)
        assert 0 < x["tokens"] <= 12 and x["target_passes"] > 0
    assert {(s["suite"], s["mode"]) for s in doc["summary"]} == {
        (s, m) for s in ("code", "talk") for m in ("ar", "k2", "auto")
    }
    for s in doc["summary"]:
        assert SUMMARY_KEYS <= set(s) and s["speedup_vs_ar"] is not None and s["total_speedup_vs_ar"] is not None
    for x in rows:  # each run starts cold, and its times add up
        assert x["target_read_tokens"] == x["prompt_tokens"] > 0
        assert x["ttft_s"] >= x["target_read_s"] > 0 and x["total_s"] == pytest.approx(x["ttft_s"] + x["decode_s"])
    assert (cli_env / "out.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "TTFT" in r.stdout and "edgespec bench" in r.stdout  # the tables


def test_bench_command_reports_a_bad_suite_in_one_line(cli_env):
    from click.testing import CliRunner

    cli = _bench_command()
    (cli_env / "bad.jsonl").write_text('{"id": "x"}\n')
    r = CliRunner().invoke(cli.main, ["bench", "--suite", "bad.jsonl", "--modes", "ar"])
    assert r.exit_code == 2
    assert "bad.jsonl:1" in r.stderr and "Traceback" not in r.stderr
    r = CliRunner().invoke(cli.main, ["bench", "--suite", "tiny.jsonl", "--modes", "ar,turbo"])
    assert r.exit_code == 2 and "turbo" in r.stderr


@pytest.mark.subprocess
def test_bench_command_strict_passes_and_explains_every_parting(cli_env):
    from click.testing import CliRunner

    cli = _bench_command()
    r = CliRunner().invoke(
        cli.main, ["bench", "--suite", "tiny.jsonl", "--modes", "ar,k3,ngram-k2", "--strict", "--json", "out.json"]
    )
    assert r.exit_code == 0, (r.output, r.exception)
    assert "exact / parted at a near-tie" in r.stdout and "noise floor of the target" in r.stdout
    doc = json.loads((cli_env / "out.json").read_text())
    (floor,) = doc["meta"]["noise_floors"].values()
    assert set(floor) == {str(n) for n in range(2, 17)}
    for x in doc["rows"]:
        if x["mode"] == "ar":
            assert x["vs_ar"] is None and x["parting"] is None
        elif x["vs_ar"] == "exact":
            assert x["matches_ar"] is True and x["parting"] is None
        else:
            assert x["vs_ar"] == "tie" and x["parting"]["position"] == x["first_divergence"]
            assert {"gap_batched", "gap_single", "batch", "floor", "token", "ar_token"} <= set(x["parting"])
    for s in doc["summary"]:
        assert s["mode"] == "ar" or sum(s["vs_ar"].values()) == s["prompts"] and s["vs_ar"]["DIFF"] == 0


@pytest.mark.subprocess
def test_bench_command_strict_fails_in_one_line_on_a_broken_verification(cli_env, monkeypatch):
    from click.testing import CliRunner

    from edgespec.decoding import decoder

    def accept_every_draft(logits, draft_ids, parents):
        return list(range(len(draft_ids))), int(logits[len(draft_ids)].argmax())

    cli = _bench_command()
    monkeypatch.setattr(decoder, "verify_greedy", accept_every_draft)
    r = CliRunner().invoke(cli.main, ["bench", "--suite", "tiny.jsonl", "--modes", "ar,k3", "--strict"])
    assert r.exit_code == 1
    assert "edgespec bench" in r.stdout  # the table still comes first
    # (the progress display leaves a newline; the loaded models' layouts come first)
    (line,) = [line for line in r.stderr.splitlines() if line.strip() and "weight tensors repacked" not in line]
    assert line.startswith("edgespec: error: ") and "DIFF" in line and "c/0 k3 at token" in line


def test_bench_command_strict_is_for_greedy_runs(cli_env):
    from click.testing import CliRunner

    cli = _bench_command()
    r = CliRunner().invoke(cli.main, ["bench", "--suite", "tiny.jsonl", "--strict", "--temperature", "0.7"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "--strict" in r.stderr  # before anything loads
