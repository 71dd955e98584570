"""scripts/tree_headroom.py: the replay's arithmetic on a reply written by hand, the teacher-forced
pass against step-by-step greedy decoding, and the whole script on the tiny pair."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.decoding.costs import CostModel

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "tree_headroom.py"
_spec = importlib.util.spec_from_file_location("tree_headroom", SCRIPT)
th = sys.modules["tree_headroom"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(th)

T, F = True, False


def _reply() -> "th.Reply":
    """10 tokens in 10 s; one draft-model round of K = 4 from position 0 that missed at 2, where the
    draft's second choice was right and its top-1 then ran right for 2 more tokens."""
    return th.Reply(tokens=10, decode_s=10.0, rounds=[(0, 4, 2)],
                    top1=[T, T, F, T, T, F, T, T, T, T], top2=[F, F, T, F, F, F, F, F, F, F],
                    confidence=[0.9, 0.8, 0.4, 0.9, 0.9, 0.5, 0.9, 0.9, 0.9, 0.9])


def _costs() -> CostModel:
    costs = CostModel()
    for n in range(1, 17):
        costs.observe_verify(n, 0.1 * n)  # 0.1 s more per verified token
    costs.observe_draft(1, 0.05)
    return costs


def test_a_right_second_choice_adds_itself_and_the_run_after_it_up_to_the_depth():
    reply = _reply()
    assert reply.run_after(2) == 2
    assert th.oracle(reply, 1, None) == pytest.approx(10 / 9)  # the alternative, a leaf
    assert th.oracle(reply, 2, None) == pytest.approx(10 / 8)  # + 1 of its continuation
    assert th.oracle(reply, 8, None) == pytest.approx(10 / 7)  # + the whole run of 2
    # the top-2 tree of the chain's depth (4) reaches position 3, two past what the chain kept
    assert th.top2_tree_free(reply) == pytest.approx(10 / 8)


def test_priced_branches_pay_verification_and_the_continuation_drafted_after_the_chain():
    reply, costs = _reply(), _costs()
    # depth 2: 2 more tokens for 0.2 s more verification, and 0.05 s more when drafted after the chain
    assert th.oracle(reply, 2, costs) == pytest.approx(10 / (10 - 2 + 0.2))
    assert th.oracle(reply, 2, costs, batched=False) == pytest.approx(10 / (10 - 2 + 0.25))
    # a round the chain kept whole costs the oracle nothing, but the least-confident rule pays for it
    whole = th.Reply(10, 10.0, [(0, 4, 4)], [T] * 10, [F] * 10, [0.5] * 10)
    assert th.oracle(whole, 2, costs) == pytest.approx(1.0)
    assert th.least_confident(whole, 2, costs, below=0.6) == pytest.approx(10 / 10.2)
    assert th.least_confident(whole, 2, costs, below=0.4) == pytest.approx(1.0)  # confident enough: no branch
    # the least confident chain token (0.4 at position 2) is where the chain missed: it gains as the oracle does
    assert th.least_confident(reply, 2, costs, below=0.6) == pytest.approx(th.oracle(reply, 2, costs))


def test_the_teacher_forced_pass_agrees_with_step_by_step_greedy_decoding(tiny_gguf, monkeypatch):
    monkeypatch.setattr(th, "CHUNK", 5)  # several chunks in 20 tokens
    backend = LlamaCppBackend(tiny_gguf, 256, threads=1)
    try:
        prompt = backend.tokenize("def add(a, b):", special=False)
        logits, reply = backend.eval(prompt, 1), []
        for _ in range(20):
            reply.append(int(np.argmax(logits[-1])))
            logits = backend.eval([reply[-1]], 1)
        top, p1 = th.draft_choices(backend, prompt, reply)
        assert top.shape == (20, 2) and top[:, 0].tolist() == reply
        assert np.all(top[:, 1] != top[:, 0]) and np.all((0.0 < p1) & (p1 <= 1.0))
    finally:
        backend.close()


def test_the_script_on_the_tiny_pair(tiny_gguf, tiny_draft_gguf, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    config = tmp_path / "models.toml"
    config.write_text(f'[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
                      f'[models.d]\nformat = "gguf"\npath = "{tiny_draft_gguf}"\n'
                      '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 256\n')
    suite = tmp_path / "s.jsonl"
    suite.write_text("".join(json.dumps({"id": f"c/{i}", "suite": "code", "mode": "completion", "prompt": p,
                                         "max_tokens": 40}) + "\n"
                             for i, p in enumerate(["def add(a, b):", "for i in range(", "import os\n"])))
    out = tmp_path / "h.json"
    assert th.main(["-m", "tiny", "--config", str(config), "--suite", str(suite), "--suites", "code",
                    "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert 0 <= doc["second_choice_right"] <= doc["missed"] <= doc["rounds"]
    assert len(doc["rows"]) == 6 and all(len(v) == len(th.DEPTHS) for v in list(doc["rows"].values())[1:])
    assert min(doc["rows"]["oracle branch at the miss, free"]) >= 1.0  # free tokens never slow a reply
    assert "3 prompts" in capsys.readouterr().out


def test_a_pair_without_a_draft_model_is_one_line(tiny_gguf, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    config = tmp_path / "models.toml"
    config.write_text(f'[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
                      '[pairs.solo]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "ngram"\ncontext = 256\n')
    assert th.main(["-m", "solo", "--config", str(config)]) == 2
    assert capsys.readouterr().err == "tree_headroom: error: pair 'solo' has no draft model\n"
    assert th.main(["-m", "nowhere", "--config", str(config)]) == 2  # an unknown pair: edgespec's own message
    assert capsys.readouterr().err.count("\n") == 1
