"""Editors' requests to `edgespec serve` on a tiny GGUF with fill-in-the-middle tokens: llama.cpp's
`/infill` and `/completion` (the shapes llama.vim, llama.vscode and Continue send), `suffix` on
/v1/completions, and requests that only read (`n_predict: 0`, `max_tokens: 0`), which leave the
prompt in the cache for the next request and yield to any request that generates."""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import GenerateSettings
from edgespec.models.config import load_registry
from tests.live_server import ngram_pair_toml, serving

TIMEOUT = httpx.Timeout(60.0)
SETTINGS = GenerateSettings(draft=DraftChoice.NGRAM, policy=PolicyChoice("fixed", 3))
PREFIX = "def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    "
SUFFIX = "\n\n\ndef diagonal(w, h):\n    pass\n"
EXTRA = [{"filename": "shapes/util.py", "text": "def half(x):\n    return x / 2\n" * 2}]
# what llama.vim asks for (autoload/llama.vim): the suggestion and its figures, flattened
VIM_FIELDS = ["content", "timings/prompt_n", "timings/prompt_ms", "timings/predicted_n", "truncated", "tokens_cached"]


@pytest.fixture(scope="module")
def fim_gguf(tiny_gguf_factory):
    return tiny_gguf_factory(n_vocab_extra=8, fim=True)


@pytest.fixture(scope="module")
def live(tmp_path_factory, fim_gguf):
    config = ngram_pair_toml(tmp_path_factory.mktemp("infill"), fim_gguf)
    with serving(load_registry(config).pair("tiny"), SETTINGS, queue_size=4) as live:
        yield live


def post(live, path: str, body: dict) -> httpx.Response:
    return httpx.post(live.root + path, json=body, timeout=TIMEOUT)


def infill(**fields) -> dict:
    return {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 12, "temperature": 0, **fields}


def raw_fim(prefix: str, suffix: str, extra: list[dict]) -> str:
    """The repository-level prompt as Qwen2.5-Coder documents it, written out by hand, in the
    default order (`psm-near`): the suffix past the line after the cursor comes as a chunk of the
    current file before the prefix."""
    files = "".join(f"<|file_sep|>{f['filename']}\n{f['text']}" for f in extra)
    first, second, far = suffix.split("\n", 2)
    return (
        f"<|repo_name|>myproject\n{files}<|file_sep|>filename\n{far}<|file_sep|>filename\n"
        f"<|fim_prefix|>{prefix}<|fim_suffix|>{first}\n{second}\n<|fim_middle|>"
    )


def test_infill_fills_the_documented_prompt_and_answers_as_llama_cpp_does(live):
    r = post(live, "/infill", infill(input_extra=EXTRA))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["stop"] is True and body["stop_type"] in ("eos", "limit")
    assert body["tokens_predicted"] == body["timings"]["predicted_n"] > 0
    assert body["timings"]["prompt_n"] + body["tokens_cached"] == body["tokens_evaluated"]
    same = post(live, "/completion", {"prompt": raw_fim(PREFIX, SUFFIX, EXTRA), "n_predict": 12, "temperature": 0})
    assert same.status_code == 200, same.text
    assert same.json()["content"] == body["content"]


def test_response_fields_are_flattened_by_path_as_llama_vim_reads_them(live):
    body = post(live, "/infill", infill(response_fields=VIM_FIELDS)).json()
    assert sorted(body) == sorted(VIM_FIELDS)
    assert isinstance(body["timings/prompt_n"], int) and body["truncated"] is False


def test_a_suffix_on_v1_completions_fills_the_middle_alike(live):
    r = post(live, "/v1/completions", {"model": "tiny", "prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 12})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == post(live, "/infill", infill()).json()["content"]


def test_a_streamed_infill_sends_the_same_text_then_a_last_piece_with_the_figures(live):
    with httpx.stream("POST", live.root + "/infill", json=infill(stream=True), timeout=TIMEOUT) as r:
        assert r.status_code == 200
        pieces = [json.loads(line.removeprefix("data: ")) for line in r.iter_lines() if line.startswith("data: ")]
    assert all(p["stop"] is False for p in pieces[:-1]) and pieces[-1]["stop"] is True
    assert "timings" in pieces[-1]
    assert "".join(p["content"] for p in pieces) == post(live, "/infill", infill()).json()["content"]


def test_a_read_only_request_leaves_its_chunks_for_the_next_request(live):
    ring = infill(input_prefix="", input_suffix="", input_extra=EXTRA * 3, n_predict=0, response_fields=[""])
    r = post(live, "/infill", ring)
    assert r.status_code == 200 and r.json() == {}  # llama.vim asks for nothing back
    body = post(live, "/infill", infill(input_extra=EXTRA * 3)).json()
    # the ring's tokens up to the last whole read chunk before the prefix were read already
    assert body["tokens_cached"] >= 128


def test_max_tokens_0_reads_and_says_what_it_read(live):
    prompt = "def f(x):\n    return x + 1\n" * 12
    r = post(live, "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["text"] == "" and body["usage"]["completion_tokens"] == 0
    read = body["read_ahead"]
    assert read["ready_tokens"] % 128 == 0 and read["ready_tokens"] > 0 and read["stopped"] is False
    again = post(live, "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 4}).json()
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == read["ready_tokens"]
    chat = {"model": "tiny", "messages": [{"role": "user", "content": prompt}], "max_completion_tokens": 0}
    assert post(live, "/v1/chat/completions", chat).json()["choices"][0]["message"]["content"] == ""


def test_a_read_yields_to_a_request_that_generates(live):
    target = live.worker.engine.target
    evaluate, first_chunk = target.eval, threading.Event()

    def slow(tokens, n_logits):  # each read chunk takes a while, so the read is still going
        if len(tokens) >= 64:
            first_chunk.set()
            time.sleep(0.3)
        return evaluate(tokens, n_logits)

    target.eval = slow
    try:
        prompt = "class Point:\n    x: int\n    y: int\n" * 14  # several read chunks
        with ThreadPoolExecutor(2) as pool:
            read = pool.submit(post, live, "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 0})
            assert first_chunk.wait(30)
            reply = post(live, "/v1/completions", {"model": "tiny", "prompt": "def g():", "max_tokens": 4})
            figures = read.result().json()["read_ahead"]
    finally:
        target.eval = evaluate
    assert reply.status_code == 200
    assert figures["stopped"] is True and figures["read_tokens"] < len(target.tokenize(prompt)) - 128


@pytest.mark.parametrize(
    "field, value",
    [("dry_multiplier", 0.5), ("repeat_penalty", 1.1), ("n_probs", 3), ("id_slot", 2), ("samplers", ["xtc"])],
)
def test_a_field_edgespec_does_not_apply_is_refused_by_name(live, field, value):
    r = post(live, "/infill", infill(**{field: value}))
    assert r.status_code == 400 and field in r.text


def test_the_fields_editors_send_with_their_neutral_values_are_taken(live):
    neutral = dict(repeat_penalty=1.0, presence_penalty=0, frequency_penalty=0, mirostat=0, typical_p=1.0)
    vim = dict(id_slot=0, samplers=["top_k", "top_p", "infill"], top_k=40, top_p=0.9, cache_prompt=True)
    r = post(live, "/infill", infill(t_max_prompt_ms=500, t_max_predict_ms=1000, n_indent=4, **neutral, **vim))
    assert r.status_code == 200, r.text


def test_a_target_without_fill_in_the_middle_tokens_is_a_400(tmp_path, tiny_gguf):
    with serving(load_registry(ngram_pair_toml(tmp_path, tiny_gguf)).pair("tiny"), SETTINGS) as live:
        r = post(live, "/infill", infill())
    assert r.status_code == 400 and "fill-in-the-middle" in r.json()["error"]["message"]


def test_llama_vims_own_bodies_are_answered_as_it_reads_them(live):
    """The bodies llama.vim posts (autoload/llama.vim): `model` always sent, "" by default; each ring
    chunk with the `time` it was picked (Vim's reltime()); and a reply it takes only where the raw
    text matches `"content"\\s*:"` (compact JSON, as llama.cpp writes it)."""
    chunks = [{"text": c["text"], "time": [1733351234, 512000], "filename": c["filename"]} for c in EXTRA]
    ring = {"id_slot": 0, "input_prefix": "", "input_suffix": "", "input_extra": chunks, "prompt": "", "n_predict": 0}
    ring |= {"temperature": 0.0, "samplers": [], "stream": False, "cache_prompt": True, "t_max_prompt_ms": 1}
    ring |= {"t_max_predict_ms": 1, "response_fields": [""], "model": ""}
    r = post(live, "/infill", ring)
    assert r.status_code == 200, r.text
    quick = infill(input_extra=chunks, prompt="", n_predict=128, stop=[], n_indent=4, top_k=40, top_p=0.9, model="")
    quick |= {"samplers": ["top_k", "top_p", "infill"], "stream": False, "cache_prompt": True, "id_slot": 0}
    quick |= {"t_max_prompt_ms": 500, "t_max_predict_ms": 250, "response_fields": VIM_FIELDS}
    r = post(live, "/infill", quick)
    assert r.status_code == 200, r.text
    assert re.match(r"^\s*\{", r.text) and re.search(r'"content"\s*:"', r.text)
