"""`edgespec serve` on the built-in Qwen2.5-Coder pair, through the official `openai` client: greedy
output over the API is `edgespec run`'s, and a repeated long prefix (an editor resending the same
file) is read from the KV cache instead of being evaluated again.

The greedy comparison runs first, on a fresh server: both sides then start with empty caches and
fresh controllers. (On real weights a reused cache changes batch shapes, and with them the logits'
last bits; see tests/test_real_pair.py.)
"""

from __future__ import annotations

import time
from pathlib import Path

import openai
import pytest

from edgespec.engine import GenerateSettings, find_pair
from tests.live_server import serving
from tests.test_real_pair import needs_pair

pytestmark = [pytest.mark.slow, needs_pair]

PROMPT = "Write a Python function that checks whether a number is prime."


@pytest.fixture(scope="module")
def live():
    pair = find_pair()
    with serving(pair, GenerateSettings(sampling=pair.sampling)) as live:  # `edgespec serve`'s defaults
        yield live


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=live.url, api_key="unused", max_retries=0, timeout=900)


@pytest.fixture(scope="module")
def model(live):
    return live.worker.engine.pair.name


def test_text_completion(client, model):
    reply = client.completions.create(model=model, prompt="def fibonacci(n):", max_tokens=12, temperature=0)
    assert reply.choices[0].text.strip() and reply.usage.completion_tokens == 12


def _first_token(client, model, messages) -> tuple[float, float, int]:
    """(engine TTFT, client TTFT, prompt tokens) of a one-token streamed reply."""
    start = time.perf_counter()
    chunks, client_ttft = [], None
    for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=1, stream=True,
                                                stream_options={"include_usage": True}):
        if client_ttft is None and chunk.choices and chunk.choices[0].delta.content:
            client_ttft = time.perf_counter() - start
        chunks.append(chunk)
    return chunks[-1].model_extra["metrics"]["ttft_s"], client_ttft, chunks[-1].usage.prompt_tokens


def test_a_repeated_long_prefix_is_read_from_the_cache(client, model):
    source = (Path(__file__).parents[1] / "edgespec" / "decoding" / "controller.py").read_text()[:7800]

    def ask(question: str) -> list[dict]:
        return [{"role": "system", "content": "You review Python code."},
                {"role": "user", "content": f"{source}\n\n{question}"}]

    cold, cold_client, n = _first_token(client, model, ask("What does Rate do?"))
    warm, warm_client, _ = _first_token(client, model, ask("What does best_k return?"))
    assert 1800 <= n <= 2400, n
    print(f"\nprefix of {n} tokens: TTFT {cold:.3f} s -> {warm:.3f} s ({cold / warm:.1f}x); "
          f"at the client {cold_client:.3f} s -> {warm_client:.3f} s")
    assert cold / warm >= 5
