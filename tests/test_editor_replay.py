"""benchmarks/editor_replay.py against `edgespec serve` on a tiny GGUF with fill-in-the-middle
tokens: the session part sends llama.vim's requests (a quick suggestion streamed, its follow-up, the
ring's background reads) and reads back each one's figures; the comparison asks two servers for the
same whole suggestion at each pause (here both are the tiny server: its `/infill` and its
`/v1/completions`); the summaries and targets are computed from the records."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import GenerateSettings
from edgespec.models.config import load_registry
from tests.live_server import ngram_pair_toml, serving

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import editor_replay  # noqa: E402
from editor_servers import InfillText  # noqa: E402
from editor_session import function_body  # noqa: E402

SMALL = "import math\n\n\ndef area(w, h):\n    if w < 0 or h < 0:\n        raise ValueError(w)\n    return w * h\n"


@pytest.fixture(scope="module")
def fim_gguf(tiny_gguf_factory) -> Path:
    return tiny_gguf_factory(n_vocab_extra=8, fim=True)


@pytest.fixture(scope="module")
def live(tmp_path_factory, fim_gguf):
    config = ngram_pair_toml(tmp_path_factory.mktemp("replay"), fim_gguf)
    settings = GenerateSettings(draft=DraftChoice.NGRAM, policy=PolicyChoice("fixed", 3))
    with serving(load_registry(config).pair("tiny"), settings) as live:
        yield live


@pytest.fixture
def small(tmp_path) -> Path:
    """A file whose prompts fit the tiny model's context (the peer's raw prompt is never cut)."""
    path = tmp_path / "area.py"
    path.write_text(SMALL)
    return path


def test_the_session_sends_llama_vims_requests_and_reads_their_figures(live, small):
    edit = function_body(small, "area", max_lines=3)
    with httpx.Client() as client:
        rows = editor_replay.session(client, live.root, edit, every=3, limit=5)
    assert all(r["status"] == 200 for r in rows), [r.get("error") for r in rows]
    assert {r["request"] for r in rows} >= {"quick", "follow", "ring"}
    quick = [r for r in rows if r["request"] == "quick"]
    assert all(isinstance(r["prompt_n"], int) and isinstance(r["tokens_cached"], int) for r in quick)
    assert all(r["first_s"] is None or r["first_s"] <= r["whole_s"] for r in quick)
    summary = editor_replay.summarise_session(rows)
    assert summary["quick"]["n"] == len(quick) and summary["errors"] == 0
    assert summary["keystroke_on_the_line"]["n"] == sum(bool(r.get("same_line")) for r in quick)


def test_the_peer_is_given_the_prompt_serve_builds_as_text(live, fim_gguf):
    body = {"input_prefix": "def f(x):\n", "prompt": "    ret", "input_suffix": "\n\ny = 2\n", "n_predict": 4}
    body["input_extra"] = [{"filename": "a.py", "text": "x = 1\n"}]
    text, n = InfillText(fim_gguf, 512, "psm").text(body)
    assert text == (
        "<|repo_name|>myproject\n<|file_sep|>a.py\nx = 1\n<|file_sep|>filename\n"
        "<|fim_prefix|>def f(x):\n    ret<|fim_suffix|>\n\ny = 2\n<|fim_middle|>"
    )
    text, n = InfillText(fim_gguf, 512, None).text(body)  # serve's own order
    served = httpx.post(live.root + "/completion", json={"prompt": text, "n_predict": 4, "temperature": 0}).json()
    assert served["tokens_evaluated"] == n  # the same tokens, read back from the text
    infill = httpx.post(live.root + "/infill", json=body | {"temperature": 0}).json()
    assert infill["content"] == served["content"]


def test_the_comparison_asks_both_sides_at_every_pause(live, small, fim_gguf):
    edit = function_body(small, "area", max_lines=2)
    prompt = InfillText(fim_gguf, 512, None)
    with httpx.Client() as client:
        roots = {"edgespec": live.root, "peer": live.root}  # serve's /v1/completions takes no llama_cpp fields
        rows = editor_replay.compare(client, roots, edit, (3, 3, 8), prompt, peer_extra={})
    rows = [r | {"file": edit.name} for r in rows]
    assert [r["request"] for r in rows] == ["edgespec", "peer", "peer", "edgespec", "edgespec", "peer"]
    assert all(r["status"] == 200 and r["first_s"] is not None for r in rows), [r.get("error") for r in rows]
    summary = editor_replay.summarise_compare(rows)
    assert summary["pauses"] == 3 and summary["peer_over_edgespec_whole"] > 0
    targets = editor_replay.targets(editor_replay.summarise_session([]), summary)
    assert len(targets) == 3 and all(set(t) == {"value", "met"} for t in targets.values())
