"""The bench's modes and its runs on fake models, in seconds: the mode list, interleaving, agreement
with plain decoding, repeats, and a run's JSON document and plot.

The engine here is a real `Engine` around `MarkovBackend` target and draft models whose evaluations
advance a `VirtualClock` instead of taking time, so tokens/s figures are exact.
"""

from __future__ import annotations

import json
import statistics
from types import SimpleNamespace

import pytest

from edgespec.bench import report
from edgespec.bench.modes import Mode, parse_modes, run_bench
from edgespec.bench.report import summarize, to_json
from edgespec.bench.suites import BenchPrompt
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams
from edgespec.util.errors import UsageError
from tests.bench_schema import ROW_KEYS, SUMMARY_KEYS
from tests.fakes import VirtualClock, fake_engine, simulated_time

GREEDY = SamplingParams()


# -- modes -----------------------------------------------------------------------------------------


def test_parse_modes_reads_every_kind():
    modes = parse_modes("ar,k2,ngram-k4,model-k8,heuristic,auto", "model")
    assert modes == [
        Mode("ar", "none", PolicyChoice("fixed", 0)),
        Mode("k2", "model", PolicyChoice("fixed", 2)),
        Mode("ngram-k4", "ngram", PolicyChoice("fixed", 4)),
        Mode("model-k8", "model", PolicyChoice("fixed", 8)),
        Mode("heuristic", "model", PolicyChoice("heuristic")),
        Mode("auto", "auto", PolicyChoice("auto")),
    ]
    assert parse_modes(" ar , k3 ", "ngram") == [
        Mode("ar", "none", PolicyChoice("fixed", 0)),
        Mode("k3", "ngram", PolicyChoice("fixed", 3)),
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


def test_auto_chain_is_a_bench_mode():
    assert parse_modes("auto-chain,auto", "model")[1:] == [
        Mode("auto-chain", DraftChoice.AUTO, PolicyChoice("auto-chain")),
        Mode("auto", DraftChoice.AUTO, PolicyChoice("auto")),
    ]


# -- running: interleaving and agreement with plain decoding ---------------------------------------


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


def test_run_bench_repeats_the_interleaved_round_of_each_prompt():
    engine = fake_engine()
    order = []
    modes = parse_modes("ar,k2", "model")
    rows = run_bench(
        [engine], PROMPTS[:2], modes, GREEDY, on_row=lambda r: order.append((r.id, r.repeat, r.mode)), repeats=2
    )
    assert order == [(p.id, rep, m.name) for p in PROMPTS[:2] for rep in (0, 1) for m in modes]
    assert all(r.matches_ar is True for r in rows)  # each repeat is compared with its own ar run


# -- what a run writes: JSON and plot --------------------------------------------------------------


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


def test_plot_writes_a_png(tmp_path, bench_run):
    out = tmp_path / "bench.png"
    report.plot(out, bench_run.rows, summarize(bench_run.rows))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
