"""benchmarks/drafting_ceiling.py measures what perfect drafts would gain: drafts of the target's own
reply must then be taken whole, under a constraint too, and change nothing in the reply; the text's
own copies, cut where the reply parts from them, likewise; and its summary must compare each mode
with plain decoding of the same prompts."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.bench.suites import BenchPrompt
from edgespec.constraints.guidance import ConstraintSpec
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.controller import make_policy
from edgespec.decoding.policy.plan import KSetting
from edgespec.engine.engine import Engine
from edgespec.models.registry import ModelSpec, PairConfig

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("drafting_ceiling", ROOT / "benchmarks" / "drafting_ceiling.py")
ceiling = sys.modules["drafting_ceiling"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ceiling)

WORDS = {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 3, "maxItems": 3}
PROMPTS = [
    BenchPrompt("t/0", "t", "completion", 40, prompt="hello there the"),
    BenchPrompt("t/1", "t", "completion", 40, prompt="in the", constraint=ConstraintSpec.json_schema(WORDS)),
]


@pytest.fixture(scope="module")
def engine(tiny_gguf_factory) -> Iterator[Engine]:
    pair = PairConfig("tiny", "llamacpp", ModelSpec("t", "gguf"), None, "ngram", 512)
    engine = Engine(pair, LlamaCppBackend(tiny_gguf_factory(seed=0), 512, threads=1))
    yield engine
    engine.close()


def test_drafts_of_the_target_s_own_reply_are_taken_whole_and_change_nothing(engine):
    policy = make_policy(KSetting("auto"), DraftChoice.NGRAM, engine.costs)
    rows = []
    for prompt in PROMPTS:
        ar = ceiling.run(engine, prompt, "ar", None, policy)
        perfect = ceiling.run(engine, prompt, ceiling.CEILING, ar["tokens"], policy)
        assert perfect["tokens"] == ar["tokens"] and len(ar["tokens"]) > 8
        # a text that has parted from the reply gets no drafts: the drafter knows no more than that
        drafter, ids = ceiling.ReplyDrafter(3, ar["tokens"]), [0, 0, 0]
        assert drafter.propose(ids + ar["tokens"][:2], 4).ids == ar["tokens"][2:6]
        assert drafter.propose(ids + [ar["tokens"][0] + 1], 4).ids == []
        assert perfect["target_passes"] < ar["target_passes"] / 2
        copies = ceiling.run(engine, prompt, ceiling.COPIES, ar["tokens"], policy)
        assert copies["tokens"] == ar["tokens"]
        assert perfect["target_passes"] <= copies["target_passes"] <= ar["target_passes"]
        rows += [ar, perfect, copies, ceiling.run(engine, prompt, "auto", None, policy)]
    summary = ceiling.summarise(rows)
    assert [(s["suite"], s["mode"], s["prompts"], s["replies"]) for s in summary] == [
        ("t", "auto", 2, 2),
        ("t", ceiling.CEILING, 2, 2),
        ("t", ceiling.COPIES, 2, 2),
    ]
    assert summary[1]["exact"] == 2 and summary[2]["exact"] == 2
    assert all(s["whole_vs_ar"] > 0 and s["decode_vs_ar"] > 0 for s in summary)


def test_the_copy_oracle_drafts_the_branch_the_reply_takes_as_far_as_it_takes_it():
    prompt = [1, 2, 3, 1, 2, 4, 5, 1, 2]  # after [1, 2]: 4 (the latest occurrence) or 3
    assert ceiling.CopyOracle(len(prompt), [4, 5, 1, 2]).propose(prompt, 8).ids == [4, 5, 1, 2]
    assert ceiling.CopyOracle(len(prompt), [4, 5, 9]).propose(prompt, 8).ids == [4, 5]
    assert ceiling.CopyOracle(len(prompt), [3, 1, 2, 4, 7]).propose(prompt, 8).ids == [3, 1, 2, 4]
    assert ceiling.CopyOracle(len(prompt), [3, 1, 2, 4, 7]).propose(prompt, 2).ids == [3, 1]
    assert ceiling.CopyOracle(len(prompt), [6, 1]).propose(prompt, 8).ids == []  # no copy offers 6
    assert ceiling.CopyOracle(len(prompt), [4, 5]).propose([*prompt, 3], 8).ids == []  # parted from the reply
