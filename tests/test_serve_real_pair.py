"""`edgespec serve` on the built-in Qwen2.5-Coder pair, through the official `openai` client: every
token of a greedy reply over the API is the target's argmax, and a repeated long prefix (an editor
resending the same file) is read from the KV cache instead of being evaluated again.

Greedy output is checked against the target's own logits, not against another run's text: a
server's earlier requests leave another cache history, which changes batch shapes and with them
the logits' last bits, so two exact runs may part at a near-tie (see edgespec/quality/divergence.py). A
token is the argmax when no other token's logit beats it by more than the noise floor allows.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import openai
import pytest

from edgespec.backends.llamacpp import READ_CHUNK
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import GenerateSettings
from tests.live_server import serving_engine

pytestmark = pytest.mark.slow

PROMPT = "Write a Python function that checks whether a number is prime."


@pytest.fixture(scope="module")
def live(real_pair_engine):
    """`edgespec serve --draft model --k 3`: every reply drafts with the draft model, so every reply
    has speculative tokens to check (`auto` may rightly decode a short reply plainly)."""
    pair = real_pair_engine.pair
    settings = GenerateSettings(sampling=pair.sampling, draft=DraftChoice.MODEL, policy=PolicyChoice("fixed", 3))
    with serving_engine(real_pair_engine, settings) as live:
        yield live


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=live.url, api_key="unused", max_retries=0, timeout=900)


@pytest.fixture(scope="module")
def model(live):
    return live.worker.engine.pair.name


def test_every_greedy_token_over_the_api_is_the_targets_argmax(live, client, model):
    messages = [{"role": "user", "content": PROMPT}]
    reply = client.chat.completions.create(
        model=model, messages=messages, max_tokens=48, temperature=0, extra_body={"edgespec": {"sources": True}}
    )
    tokens = reply.model_extra["edgespec"]["tokens"]
    ids = [t["id"] for t in tokens]
    assert len(ids) == reply.usage.completion_tokens == 48
    assert {t["source"] for t in tokens} - {"target"}, "no drafted token survived: nothing speculative was checked"
    engine = live.worker.engine

    def logits_of_the_reply():  # on the engine thread, which owns the backend
        floor = engine.noise_floor().max  # first: measuring it evaluates, and eval's logits are a view
        engine.target.truncate(0)
        return engine.target.eval(engine.chat_tokens(messages) + ids[:-1], len(ids)).copy(), floor

    logits, floor = live.worker.engine_thread.call(logits_of_the_reply)
    shortfall = logits.max(axis=1) - logits[np.arange(len(ids)), ids]
    # twice the floor: the reply's logits and these fresh ones may each be off by it
    assert shortfall.max() <= 2 * floor, (shortfall.argmax(), shortfall.max(), floor)


def test_text_completion(client, model):
    reply = client.completions.create(model=model, prompt="def fibonacci(n):", max_tokens=12, temperature=0)
    assert reply.choices[0].text.strip() and reply.usage.completion_tokens == 12


def _first_token(client, model, messages) -> tuple[float, float, int, int]:
    """(engine TTFT, client TTFT, prompt tokens, of them read from the cache) of a one-token
    streamed reply."""
    start = time.perf_counter()
    chunks, client_ttft = [], None
    for chunk in client.chat.completions.create(
        model=model, messages=messages, max_tokens=1, stream=True, stream_options={"include_usage": True}
    ):
        if client_ttft is None and chunk.choices and chunk.choices[0].delta.content:
            client_ttft = time.perf_counter() - start
        chunks.append(chunk)
    usage = chunks[-1].usage
    return (
        chunks[-1].model_extra["metrics"]["ttft_s"],
        client_ttft,
        usage.prompt_tokens,
        usage.prompt_tokens_details.cached_tokens,
    )


def test_a_repeated_long_prefix_is_read_from_the_cache(client, model):
    source = (Path(__file__).parents[1] / "edgespec" / "decoding" / "policy" / "controller.py").read_text()[:7800]

    def ask(question: str) -> list[dict]:
        return [
            {"role": "system", "content": "You review Python code."},
            {"role": "user", "content": f"{source}\n\n{question}"},
        ]

    cold, cold_client, n, _ = _first_token(client, model, ask("What does Rate do?"))
    warm, warm_client, _, cached = _first_token(client, model, ask("What does best_k return?"))
    assert 1800 <= n <= 2400, n
    print(
        f"\nprefix of {n} tokens: TTFT {cold:.3f} s -> {warm:.3f} s ({cold / warm:.1f}x); "
        f"at the client {cold_client:.3f} s -> {warm_client:.3f} s"
    )
    # what the second request did not read again (the speed-up varies with the machine's load;
    # the README's figure is measured)
    assert cached >= n - 32 - READ_CHUNK, (cached, n)  # whole read chunks only (docs/run.md)


def test_a_request_sent_again_gets_the_same_reply(client, model):
    """An agent resending a byte-identical greedy request: the server reuses what the first one read,
    and the reply opens, and goes on, as the first did."""
    source = "".join(
        (Path(__file__).parents[1] / "edgespec" / "util" / "atomic_file.py").read_text().splitlines(True)[:22]
    )
    messages = [{"role": "user", "content": f"{source}\n\nRename the function to something better."}]
    replies = [
        client.chat.completions.create(model=model, messages=messages, max_tokens=16, temperature=0) for _ in range(2)
    ]
    assert replies[1].usage.prompt_tokens_details.cached_tokens > 0
    assert replies[0].choices[0].message.content == replies[1].choices[0].message.content
