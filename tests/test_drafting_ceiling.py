"""benchmarks/drafting_ceiling.py measures what perfect drafts would gain. Its oracles must draft the
reply of their own run and change nothing in it, under a constraint too: drafts of the target's own
reply taken whole; the text's own copies cut where the reply parts from them; and drafts as long as
the reply, each pass taken whole, so a reply takes the fewest passes there are. An oracle that
drafts anything else must show as faulty; one whose reply parts from its source runs again on its
own reply until it repeats. Every mode runs at the one thread count the harness fixed, and the
summary compares each mode with plain decoding and `auto` with the oracles."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.bench.suites import BenchPrompt
from edgespec.constraints.guidance import ConstraintSpec
from edgespec.decoding.costs.measuring import LONGEST_DENSE_DRAFT
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.controller import make_policy
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import Engine
from edgespec.models.registry import ModelSpec, PairConfig

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("drafting_ceiling", ROOT / "benchmarks" / "drafting_ceiling.py")
ceiling = sys.modules["drafting_ceiling"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ceiling)
_spec = importlib.util.spec_from_file_location("render", ROOT / "benchmarks" / "render.py")
render = sys.modules["render"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render)

WORDS = {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 3, "maxItems": 3}
PROMPTS = [
    BenchPrompt("t/0", "t", "completion", 60, prompt="hello there the"),
    BenchPrompt("t/1", "t", "completion", 40, prompt="in the", constraint=ConstraintSpec.json_schema(WORDS)),
]


@pytest.fixture(scope="module")
def engine(tiny_gguf_factory) -> Iterator[Engine]:
    pair = PairConfig("tiny", "llamacpp", ModelSpec("t", "gguf"), None, "ngram", 512)
    engine = Engine(pair, LlamaCppBackend(tiny_gguf_factory(seed=0), 512, threads=1))
    yield engine
    engine.close()


class ShiftedReply(ceiling.ReplyDrafter):
    """A broken oracle: it proposes the reply one token late (the token it should have drafted
    first is left out)."""

    def _ahead(self, context, k):
        return super()._ahead(context, k + 1)[1:]


def test_every_oracle_drafts_its_own_reply_and_changes_nothing(engine):
    policy = make_policy(PolicyChoice("auto"), DraftChoice.NGRAM, engine.costs)
    assert ceiling.fix_threads(engine, 2) == 2 and engine.threads is None
    rows = []
    for prompt in PROMPTS:
        ar = ceiling.run(engine, prompt, "ar", None, policy)
        auto = ceiling.run(engine, prompt, "auto", None, policy)
        oracles = {m: ceiling.run(engine, prompt, m, ar["tokens"], policy) for m in ceiling.ORACLES}
        assert len(ar["tokens"]) > 8 and all(o["tokens"] == ar["tokens"] for o in oracles.values())
        assert all(r["threads"] == 2 for r in [ar, auto, *oracles.values()])  # one count, whoever ran before
        perfect, reply, copies = oracles[ceiling.PERFECT], oracles[ceiling.CEILING], oracles[ceiling.COPIES]
        assert ceiling.faults(perfect) == [] and perfect["target_passes"] == perfect["ideal_passes"] == 1
        assert perfect["longest_pass"] > LONGEST_DENSE_DRAFT  # the whole reply after the first token, in one pass
        if prompt.constraint is None:  # auto's cap bounds what it drafts after any forced text: the passes timed
            assert reply["longest_pass"] <= max(engine.costs.reach(), LONGEST_DENSE_DRAFT + 1)
        assert perfect["target_passes"] <= reply["target_passes"] < ar["target_passes"] / 2
        assert reply["target_passes"] <= copies["target_passes"] <= ar["target_passes"]
        rows += [ar, auto, *oracles.values()]
    ceiling.fix_threads(engine, 1)
    summary = ceiling.summarise(rows)
    assert [(s["mode"], s["prompts"], s["replies"], s.get("faulty")) for s in summary] == [
        ("auto", 2, 2, None),
        (ceiling.CEILING, 2, 2, 0),
        (ceiling.COPIES, 2, 2, 0),
        (ceiling.PERFECT, 2, 2, 0),
    ]
    assert all(s["exact"] == 2 and s["whole_vs_ar"] > 0 and s["decode_vs_ar"] > 0 for s in summary[1:])
    gaps = ceiling.gaps(rows)
    assert [p["id"] for p in gaps["prompts"]] == ["t/0", "t/1"] and gaps["overall"]["prompts"] == 2
    assert set(gaps["overall"]) == {"prompts", ceiling.COPIES, ceiling.PERFECT}
    assert all(g > 0 for p in gaps["prompts"] for m in (ceiling.COPIES, ceiling.PERFECT) for g in p[m].values())


@pytest.mark.parametrize("longest", [3, 7])
def test_a_perfect_length_run_takes_the_fewest_passes_and_a_broken_oracle_does_not(engine, longest):
    prompt = PROMPTS[0]
    ar = ceiling.run(engine, prompt, "ar", None, None)
    n = len(ceiling.modes.prompt_ids(engine, prompt))

    def oracle(drafter_class):
        return ceiling.oracle_run(
            engine, prompt, ceiling.PERFECT, drafter_class(n, ar["tokens"]), ceiling.LongestRun(longest)
        )

    perfect, broken = oracle(ceiling.ReplyDrafter), oracle(ShiftedReply)
    assert perfect["tokens"] == broken["tokens"] == ar["tokens"]  # verification keeps a broken oracle lossless
    given = len(ar["tokens"]) - 1 + (len(ar["tokens"]) < prompt.max_tokens)  # after the first token; an end too
    assert perfect["target_passes"] == perfect["ideal_passes"] == -(-given // (longest + 1))
    assert perfect["longest_pass"] == longest and ceiling.faults(perfect) == []
    assert broken["target_passes"] > broken["ideal_passes"] and ceiling.faults(broken)


def test_an_oracle_runs_again_on_its_own_reply_until_it_repeats(engine):
    prompt = PROMPTS[0]
    ar = ceiling.run(engine, prompt, "ar", None, None)
    source = [*ar["tokens"][:5], ar["tokens"][5] + 1, *ar["tokens"][6:]]  # another mode's reply, parted at 5
    row = ceiling.iterate(lambda s: ceiling.run(engine, prompt, ceiling.PERFECT, s, None), source)
    assert (row["iterations"], row["converged"], row["tokens"]) == (2, True, ar["tokens"])
    assert ceiling.faults(row) == []
    # the first run parted where its source did and knew nothing past it: passes one token each
    first = ceiling.run(engine, prompt, ceiling.PERFECT, source, None)
    assert first["tokens"] == ar["tokens"] and ceiling.faults(first)


def test_interleaved_rounds_run_every_mode_and_each_oracle_from_its_own_last_reply(engine):
    ceiling.fix_threads(engine, 1)
    rows = ceiling.rounds(engine, [PROMPTS[:1]], repeats=2, most=3)
    assert [r["mode"] for r in rows] == [*ceiling.ORDER, *ceiling.ORDER[1:], ceiling.ORDER[0]]
    oracle_rows = [r for r in rows if r["mode"] in ceiling.ORACLES]
    assert all(r["converged"] and r["iterations"] == 1 and not ceiling.faults(r) for r in oracle_rows)
    assert {r["threads"] for r in rows} == {1} and len({tuple(r["tokens"]) for r in rows}) == 1


def test_the_ideal_counts_every_pass_whole_but_where_a_constraint_s_forced_text_was_refused():
    whole = [(7, 7, 0), (7, 7, 2), (3, 3, 0)]  # 8 + 8 + 4 tokens at 7 a pass: 3 passes
    assert ceiling.ideal_passes(whole, 7) == 3 and ceiling.ideal_passes(whole, 15) == 2
    assert ceiling.ideal_passes([(1, 0, 0)] * 20, 7) == 3  # 20 one-token passes: 3 would do
    refused = [(7, 1, 2), (7, 7, 0), (3, 3, 0)]  # the decoder cut the first pass: 2 + 12 tokens
    assert ceiling.ideal_passes(refused, 7) == 1 + 2


def test_iterating_stops_at_a_repeat_or_gives_up_and_says_so():
    replies = iter([[1, 2], [1, 3], [1, 3]])
    row = ceiling.iterate(lambda source: {"tokens": next(replies)}, [1, 2, 9])
    assert (row["iterations"], row["converged"], row["tokens"]) == (3, True, [1, 3])
    flipping = ceiling.iterate(lambda source: {"tokens": [1, 2] if source == [1, 3] else [1, 3]}, [1, 2], most=4)
    assert (flipping["iterations"], flipping["converged"]) == (4, False)
    assert ceiling.faults(flipping) == ["its reply still changed after 4 runs"]


def test_the_copy_oracle_drafts_the_branch_the_reply_takes_as_far_as_it_takes_it():
    prompt = [1, 2, 3, 1, 2, 4, 5, 1, 2]  # after [1, 2]: 4 (the latest occurrence) or 3
    assert ceiling.CopyOracle(len(prompt), [4, 5, 1, 2]).propose(prompt, 8).ids == [4, 5, 1, 2]
    assert ceiling.CopyOracle(len(prompt), [4, 5, 9]).propose(prompt, 8).ids == [4, 5]
    assert ceiling.CopyOracle(len(prompt), [3, 1, 2, 4, 7]).propose(prompt, 8).ids == [3, 1, 2, 4]
    assert ceiling.CopyOracle(len(prompt), [3, 1, 2, 4, 7]).propose(prompt, 2).ids == [3, 1]
    assert ceiling.CopyOracle(len(prompt), [6, 1]).propose(prompt, 8).ids == []  # no copy offers 6
    assert ceiling.CopyOracle(len(prompt), [4, 5]).propose([*prompt, 3], 8).ids == []  # parted from the reply
    drafter = ceiling.ReplyDrafter(len(prompt), [4, 5, 1, 2])
    assert drafter.propose([*prompt, 4], 2).ids == [5, 1] and drafter.propose([*prompt, 5], 2).ids == []


def _timed(pid, mode, decode_s, n=100, ttft_s=1.0, **more):
    return {"id": pid, "suite": "s", "mode": mode, "tokens": [0] * n, "ttft_s": ttft_s, "decode_s": decode_s, **more}


def test_the_result_says_how_far_auto_is_from_the_oracles_per_prompt_and_overall(tmp_path):
    ideal = {"converged": True, "iterations": 1, "ideal_passes": 1, "target_passes": 1}
    rows = [
        *(_timed(p, "ar", 4.0) for p in ("a", "b", "c")),
        *(_timed(p, "auto", t) for p, t in (("a", 2.0), ("b", 3.0), ("c", 4.0))),
        *(_timed(p, ceiling.COPIES, 2.0, converged=True, iterations=1) for p in ("a", "b", "c")),
        *(_timed(p, ceiling.PERFECT, 1.0, **ideal) for p in ("a", "b")),
        _timed("c", ceiling.PERFECT, 1.0, **{**ideal, "target_passes": 9}),  # a pass that was not taken whole
    ]
    gaps = ceiling.gaps(rows)
    a = gaps["prompts"][0]
    assert (a["id"], a[ceiling.COPIES]["decode"], a[ceiling.PERFECT]["decode"]) == ("a", 1.0, 2.0)
    assert a[ceiling.PERFECT]["whole"] == pytest.approx(3.0 / 2.0)  # 1 s to the first token in both
    assert gaps["overall"][ceiling.COPIES]["decode"] == 1.5 and gaps["overall"][ceiling.PERFECT]["decode"] == 3.0
    assert gaps["suites"] == [{"suite": "s", **gaps["overall"]}]
    summary = ceiling.summarise(rows)
    assert [(s["mode"], s.get("faulty")) for s in summary] == [
        ("auto", None),
        (ceiling.COPIES, 0),
        (ceiling.PERFECT, 1),
    ]
    meta = {
        "command": "x",
        "commit": "0" * 40,
        "dirty": False,
        "machine": {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2"]},
    }
    doc = {"meta": meta, "rows": rows, "summary": summary, "gaps": gaps}
    (tmp_path / "drafting_ceiling.json").write_text(json.dumps(doc))
    (row,) = [line for line in render.drafting_ceiling(tmp_path) if line.startswith("| s (3)")]
    assert "AMD EPYC, AVX2" in row and "1.33x (1.50x decode), 2.00x (3.00x decode)" in row


@pytest.mark.parametrize(
    "argv",
    [
        ["--suite", "no-such-suite.jsonl"],
        ["--suite", "suites/regenerate.jsonl", "--pair", "x"],
        ["--sessions", "edgespec/data/session_suite.jsonl", "--parts", "nope"],
    ],
)
def test_a_suite_or_pair_it_cannot_use_is_one_line_before_any_model_loads(argv):
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "drafting_ceiling.py"
    done = subprocess.run(
        [sys.executable, str(script), *argv], capture_output=True, text=True, cwd=script.parent.parent, timeout=120
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("drafting_ceiling.py: ")


def test_a_session_s_later_call_quotes_plain_decoding_s_reply_to_the_earlier_one(engine, tmp_path):
    ceiling.fix_threads(engine, 1)
    calls = [
        {"messages": [{"role": "user", "content": "hello there the"}], "max_tokens": 24},
        {"messages": [{"role": "user", "content": ["again: ", {"reply_of": 0}]}], "max_tokens": 24},
    ]
    line = {"id": "heldout/s", "part": "heldout", "kind": "regenerate", "calls": calls}
    (tmp_path / "s.jsonl").write_text(json.dumps(line) + "\n")
    session_calls = ceiling.SessionCalls(ceiling.load_sessions(tmp_path / "s.jsonl"))
    replies = {}

    def record(prompt, ids):
        replies[prompt.id] = ceiling.text(engine, ids)
        session_calls.record(prompt, replies[prompt.id])

    rows = ceiling.rounds(engine, [[], session_calls], repeats=2, most=3, record=record)
    first, second = list(session_calls)
    assert second.messages == ({"role": "user", "content": "again: " + replies[first.id]},)
    assert replies[first.id] and list(replies) == [first.id, second.id]  # recorded once, in the first round
    assert [(r["id"], r["suite"]) for r in rows if r["mode"] == "ar"] == [
        (first.id, "session-heldout"),
        (second.id, "session-heldout"),
    ] * 2
    assert len(rows) == 2 * 2 * len(ceiling.ORDER)
