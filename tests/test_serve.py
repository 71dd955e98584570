"""`edgespec serve` on the tiny GGUF pair: a live server on 127.0.0.1 at a free port, driven by the
official `openai` client (streamed and not) and by raw HTTP for every bad input.

The module's server drafts with the tiny draft model at a fixed K = 3, so replies hold every token
origin (draft, correction, bonus, and target for the first token). Tests that need a slow engine
(a disconnect, the queue bound) slow its target down for their own duration.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from types import SimpleNamespace

import httpx
import openai
import psutil
import pytest

from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Summary
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import GenerateSettings
from edgespec.models.config import load_registry
from edgespec.server.app import MAX_BODY_BYTES, create_app
from tests.live_server import HELLO, serving, serving_app, tiny_models_toml

TIMEOUT = httpx.Timeout(30.0)


@pytest.fixture(scope="module")
def config(tmp_path_factory, tiny_gguf, tiny_draft_gguf):
    return tiny_models_toml(tmp_path_factory.mktemp("serve"), tiny_gguf, tiny_draft_gguf)


SETTINGS = GenerateSettings(draft=DraftChoice.MODEL, policy=PolicyChoice("fixed", 3))


@pytest.fixture(scope="module")
def live(config):
    with serving(load_registry(config).pair("tiny"), SETTINGS, queue_size=2) as live:
        yield live


@pytest.fixture
def client(live):
    return openai.OpenAI(base_url=live.url, api_key="unused", max_retries=0, timeout=30)


def post(live, path: str, **kwargs) -> httpx.Response:
    return httpx.post(live.url + path, **{"timeout": TIMEOUT, **kwargs})


def chat(**fields) -> dict:
    return {"model": "tiny", "messages": HELLO, "max_tokens": 8, **fields}


def error_of(response: httpx.Response, status: int) -> dict:
    """The OpenAI-shaped error of a response that must have `status`; its message is one line."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and "\n" not in error["message"] and "Traceback" not in error["message"]
    return error


def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


@contextmanager
def slow_engine(live, per_eval_s: float):
    """Every target pass takes at least `per_eval_s` while the block runs (set and undone on the
    engine thread, which is the only one using the target)."""
    target = live.worker.engine.target

    def slowly(name):
        real = getattr(target, name)

        def slow(*args):
            time.sleep(per_eval_s)
            return real(*args)

        return slow

    for name in ("eval", "eval_tree"):  # prefill and verify passes
        live.worker.engine_thread.call(setattr, target, name, slowly(name))
    try:
        yield
    finally:
        for name in ("eval", "eval_tree"):
            live.worker.engine_thread.call(delattr, target, name)


@contextmanager
def recorded_summaries(live):
    """The Summary of every generation that ends while the block runs."""
    engine, summaries = live.worker.engine, []
    real = engine.generate_tokens

    def recording(*args, **kwargs):
        for event in real(*args, **kwargs):
            if isinstance(event, Summary):
                summaries.append(event)
            yield event

    engine.generate_tokens = recording
    try:
        yield summaries
    finally:
        del engine.generate_tokens


# -- the openai client, streamed and not -----------------------------------------------------------


def test_models_and_health(live, client):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert httpx.get(live.root + "/health", timeout=TIMEOUT).json()["status"] == "ok"


def test_chat_reply_with_usage_and_speculative_metrics(live, client):
    reply = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=16, temperature=0)
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    prompt_tokens = live.worker.engine_thread.call(live.worker.engine.count_tokens, HELLO)
    assert reply.usage.prompt_tokens == prompt_tokens
    assert 0 < reply.usage.completion_tokens <= 16
    spec = reply.model_extra["metrics"]["speculative_decoding"]
    assert spec["num_draft_tokens"] > 0 and spec["num_spec_steps"] > 0
    assert spec["mean_acceptance_length"] == pytest.approx(
        1 + spec["num_accepted_draft_tokens"] / spec["num_spec_steps"]
    )
    assert sum(spec["acceptance_histogram"]) == spec["num_spec_steps"]
    assert sum(a * n for a, n in enumerate(spec["acceptance_histogram"])) == spec["num_accepted_draft_tokens"]
    assert sum(spec["k_histogram"].values()) == spec["target_passes"]
    assert reply.model_extra["metrics"]["ttft_s"] > 0


def test_streamed_chat_equals_the_whole_reply(client):
    whole = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=24, temperature=0)
    chunks = list(
        client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=24, temperature=0, stream=True)
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert "metrics" in chunks[-1].model_extra and "usage" not in chunks[-1].model_extra


def test_text_completion_streamed_and_not(client):
    whole = client.completions.create(model="tiny", prompt="def add(a, b):", max_tokens=12, temperature=0)
    assert whole.object == "text_completion" and whole.usage.completion_tokens > 0
    parts = list(
        client.completions.create(
            model="tiny",
            prompt="def add(a, b):",
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].text for c in parts if c.choices) == whole.choices[0].text
    assert parts[-1].choices == [] and parts[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_sampled_reply_is_reproducible_with_a_seed(client):
    def sample(seed):
        return (
            client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=12, temperature=1.0, seed=seed)
            .choices[0]
            .message.content
        )

    assert sample(5) == sample(5)


def test_every_token_origin_adds_up_to_the_usage(client):
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=HELLO,
            max_tokens=40,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"edgespec": {"sources": True}},
        )
    )
    tokens = [t for c in chunks if c.model_extra.get("edgespec") for t in c.model_extra["edgespec"]["tokens"]]
    last = chunks[-1]
    assert last.usage.completion_tokens == len(tokens)
    assert last.usage.total_tokens == last.usage.prompt_tokens + len(tokens)
    by_source = {}
    for t in tokens:
        by_source[t["source"]] = by_source.get(t["source"], 0) + 1
    assert by_source == last.model_extra["metrics"]["sources"]
    assert {"target", "draft"} <= set(by_source) and {"correction", "bonus"} & set(by_source)
    assert "".join(t["text"] for t in tokens) == "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_whole_reply_lists_token_origins_on_request(client):
    reply = client.chat.completions.create(
        model="tiny", messages=HELLO, max_tokens=10, extra_body={"edgespec": {"sources": True}}
    )
    tokens = reply.model_extra["edgespec"]["tokens"]
    assert len(tokens) == reply.usage.completion_tokens
    assert "".join(t["text"] for t in tokens) == reply.choices[0].message.content
    plain = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=10)
    assert "edgespec" not in plain.model_extra


def test_stop_strings_cut_the_text_streamed_and_not(client):
    prompt = "def add(a, b):"
    full = client.completions.create(model="tiny", prompt=prompt, max_tokens=30, temperature=0).choices[0].text
    stop = next(full[i : i + 2] for i in range(4, len(full) - 2) if "\ufffd" not in full[i : i + 2])
    expected = full[: full.find(stop)]
    cut = client.completions.create(model="tiny", prompt=prompt, max_tokens=30, temperature=0, stop=[stop, "never"])
    assert cut.choices[0].text == expected and cut.choices[0].finish_reason == "stop"
    parts = list(
        client.completions.create(model="tiny", prompt=prompt, max_tokens=30, temperature=0, stop=stop, stream=True)
    )
    assert "".join(p.choices[0].text for p in parts) == expected
    assert parts[-1].choices[0].finish_reason == "stop"


# -- bad input, raw HTTP ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, param",
    [
        (chat(temperature="hot"), "temperature"),
        (chat(temperature=-1), "temperature"),
        (chat(max_tokens=-1), "max_tokens"),
        (chat(max_tokens=2.5), "max_tokens"),
        (chat(top_p=0), "top_p"),
        (chat(messages=[]), "messages"),
        (chat(messages=[{"role": "robot", "content": "hi"}]), "messages.0.role"),
        (chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]), None),
        (chat(stop=""), None),
        (chat(stream="yes"), "stream"),
        ({"model": "tiny", "max_tokens": 4}, "messages"),
        ({"messages": HELLO}, "model"),
        (chat(colour="blue"), "colour"),
        (chat(n=2), "n"),
        (chat(logprobs=True), "logprobs"),
        (chat(tools=[{"type": "function", "function": {"name": "f"}}]), "tools"),
        (chat(edgespec={"source": True}), "edgespec.source"),
    ],
)
def test_a_bad_chat_request_is_a_400_naming_the_field(live, body, param):
    error = error_of(post(live, "/chat/completions", json=body), 400)
    assert error["type"] == "invalid_request_error"
    if param:
        assert error["param"] == param and param.split(".")[0] in error["message"]


@pytest.mark.parametrize(
    "path, body, param",
    [
        ("/chat/completions", chat(messages=[*HELLO, {"role": "user", "content": "a\ud800b"}]), "messages.1.content"),
        (
            "/chat/completions",
            chat(messages=[{"role": "system", "content": [{"type": "text", "text": "\udfff"}]}, *HELLO]),
            "messages.0.content.0.text",
        ),
        ("/chat/completions", chat(stop=["ok", "x\udc00"]), "stop.1"),
        ("/completions", {"model": "tiny", "prompt": "a\ud800b"}, "prompt"),
        ("/completions", {"model": "tiny", "prompt": ["\ud800"]}, "prompt.0"),
        ("/completions", {"model": "tiny", "prompt": "a", "stop": "\ud800"}, "stop"),
    ],
)
def test_text_that_is_not_valid_unicode_is_a_400_naming_the_field(live, path, body, param):
    """JSON can escape a lone surrogate, which no tokenizer reads: the client's mistake, not the engine's."""
    raw = json.dumps(body)  # escaped as \ud800: httpx's own encoder refuses it
    error = error_of(post(live, path, content=raw, headers={"content-type": "application/json"}), 400)
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"].startswith(f"{param} is not valid Unicode (a lone surrogate U+")


def test_a_body_that_is_empty_or_not_an_object_and_odd_field_names(live):
    for raw in (b"", b"null", b"[1]", b"3"):
        message = error_of(post(live, "/completions", content=raw, headers={"content-type": "application/json"}), 400)[
            "message"
        ]
        assert message == "the body must be a JSON object sent with 'Content-Type: application/json'"
    for name in ("a-b", "list[x]"):  # named like pydantic's union members
        error = error_of(post(live, "/completions", json={"model": "tiny", "prompt": "a", name: 1}), 400)
        assert error["param"] == name and error["message"] == f"unknown field {name!r}: edgespec does not support it"
    raw = '{"model": "tiny", "prompt": "a", "\\ud800": 1}'
    error = error_of(post(live, "/completions", content=raw, headers={"content-type": "application/json"}), 400)
    assert error["message"] == "a field name is not valid Unicode"


def test_bad_completion_requests(live):
    assert error_of(post(live, "/completions", json={"model": "tiny", "prompt": ["a", "b"]}), 400)["param"] == "prompt"
    assert (
        error_of(post(live, "/completions", json={"model": "tiny", "prompt": "a", "echo": True}), 400)["param"]
        == "echo"
    )
    assert "empty" in error_of(post(live, "/completions", json={"model": "tiny", "prompt": ""}), 400)["message"]


def test_malformed_json_and_a_body_that_is_not_json(live):
    assert (
        "not valid JSON"
        in error_of(
            post(live, "/chat/completions", content=b'{"model": "tiny",', headers={"content-type": "application/json"}),
            400,
        )["message"]
    )
    assert "Content-Type" in error_of(post(live, "/chat/completions", content=json.dumps(chat())), 400)["message"]
    assert error_of(post(live, "/chat/completions", json=[1, 2]), 400)


def test_unknown_model_is_a_404(live):
    error = error_of(post(live, "/chat/completions", json=chat(model="gpt-4o")), 404)
    assert error["code"] == "model_not_found" and "tiny" in error["message"]


def test_unknown_endpoint_is_a_404_in_openai_shape(live):
    assert error_of(httpx.get(live.url + "/embeddings", timeout=TIMEOUT), 404)


def test_a_prompt_longer_than_the_context_is_a_400(live, client):
    long = [{"role": "user", "content": "word " * 400}]
    error = error_of(post(live, "/chat/completions", json=chat(messages=long)), 400)
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages" and "256" in error["message"]
    assert client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4).choices[0].message.content


def test_a_body_over_the_cap_is_refused(live, client):
    """Starlette's body limit answers in plain text (see edgespec.server.openai_errors)."""
    huge = chat(messages=[{"role": "user", "content": "x" * MAX_BODY_BYTES}])
    response = post(live, "/chat/completions", json=huge)
    assert response.status_code == 413 and response.text == "Content Too Large"
    assert client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4).choices[0].message.content


def test_an_engine_failure_is_a_500_and_the_server_keeps_serving(live, client):
    engine = live.worker.engine

    def broken(*args, **kwargs):
        raise RuntimeError("the backend fell over\nsecond line")

    engine.generate_tokens = broken
    try:
        error = error_of(post(live, "/chat/completions", json=chat()), 500)
    finally:
        del engine.generate_tokens
    assert error["type"] == "server_error" and "fell over" in error["message"]
    assert client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4).choices[0].message.content


def test_a_failure_mid_stream_is_an_error_event(live, client):
    engine = live.worker.engine
    real = engine.generate_tokens

    def failing_part_way(*args, **kwargs):
        for i, event in enumerate(real(*args, **kwargs)):
            if i == 4:
                raise RuntimeError("lost the GPU")
            yield event

    engine.generate_tokens = failing_part_way
    try:
        with pytest.raises(openai.APIError, match="lost the GPU"):
            list(client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=30, stream=True))
    finally:
        del engine.generate_tokens
    assert client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4).choices[0].message.content


def test_api_key(live):
    with serving_app(live.worker, SETTINGS, api_key="sekret") as keyed:
        missing = error_of(post(keyed, "/chat/completions", json=chat()), 401)
        assert missing["code"] == "invalid_api_key" and "Authorization" in missing["message"]
        wrong = error_of(post(keyed, "/chat/completions", json=chat(), headers={"Authorization": "Bearer nope"}), 401)
        assert wrong["message"] == "wrong API key"
        assert error_of(
            post(keyed, "/chat/completions", content=b"{", headers={"content-type": "application/json"}), 401
        )
        assert httpx.get(keyed.root + "/health", timeout=TIMEOUT).status_code == 200
        good = openai.OpenAI(base_url=keyed.url, api_key="sekret", max_retries=0)
        assert good.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4).choices[0].message.content


# -- disconnects and the queue bound ---------------------------------------------------------------


def test_a_client_that_leaves_mid_stream_cancels_its_generation(live, client):
    with slow_engine(live, 0.02), recorded_summaries(live) as summaries:
        with httpx.stream(
            "POST", live.url + "/chat/completions", json=chat(max_tokens=200, stream=True), timeout=TIMEOUT
        ) as response:
            data = 0
            for line in response.iter_lines():
                data += line.startswith("data:")
                if data == 3:
                    break
        wait_until(lambda: summaries)
    assert summaries and summaries[0].stop_reason == "cancelled" and summaries[0].tokens < 200
    reply = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=6)
    assert reply.choices[0].message.content and reply.usage.completion_tokens > 0


def test_a_server_that_stops_ends_the_replies_in_flight_with_a_503(config):
    """What `serve` does on SIGINT / SIGTERM / SIGHUP (EngineWorker.stop, from the server's
    shutdown): the reply being generated, not streamed, and a request still waiting both get an
    OpenAI-shaped 503 at once, and a new request is refused with it. (The streamed case, with
    the signal itself, runs in tests/test_interrupts.py.)"""
    with serving(load_registry(config).pair("tiny"), SETTINGS) as own, slow_engine(own, 0.02):
        body = chat(max_tokens=200)
        with ThreadPoolExecutor(2) as pool:
            running = pool.submit(post, own, "/chat/completions", json=body)
            wait_until(lambda: own.worker._jobs)
            waiting = pool.submit(post, own, "/chat/completions", json=body)
            wait_until(lambda: len(own.worker._jobs) == 2)
            own.worker.stop()
            replies = [running.result(), waiting.result(), post(own, "/chat/completions", json=body)]
    for reply in replies:
        assert error_of(reply, 503)["code"] == "server_stopping"


def test_a_client_that_leaves_while_sending_its_body_is_let_go_without_an_error():
    """The app reads the body itself (to check it off the event loop): a client that goes away
    part way through is answered as one that left (499), not as a failure with a traceback."""
    served = SimpleNamespace(engine=SimpleNamespace(pair=SimpleNamespace(name="tiny", tool_format=None)))
    app = create_app(served, SETTINGS)
    incoming = [{"type": "http.request", "body": b'{"model": ', "more_body": True}, {"type": "http.disconnect"}]
    sent: list[dict] = []

    async def receive() -> dict:
        return incoming.pop(0)

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    asyncio.run(app(scope, receive, send))  # an error would be raised here, as uvicorn would log it
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 499


def test_a_client_that_leaves_while_queued_is_skipped(live):
    with slow_engine(live, 0.02), recorded_summaries(live) as summaries:
        first = threading.Thread(target=post, args=(live, "/chat/completions"), kwargs={"json": chat(max_tokens=40)})
        first.start()
        wait_until(lambda: live.worker._jobs)  # the first holds the engine for 40 slow passes
        with pytest.raises(httpx.ReadTimeout):
            post(live, "/chat/completions", json=chat(max_tokens=40), timeout=httpx.Timeout(5, read=0.2))
        first.join(timeout=30)
        wait_until(lambda: not live.worker._jobs)
    assert len(summaries) == 1 and summaries[0].stop_reason != "cancelled"


def _stream_one(url: str, prompt: str) -> dict:
    """One streaming request: its status, Retry-After, and what its chunks say."""
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 12,
        "stream": True,
        "stream_options": {"include_usage": True},
        "edgespec": {"sources": True},
    }
    with httpx.stream("POST", url + "/chat/completions", json=body, timeout=TIMEOUT) as r:
        if r.status_code != 200:
            r.read()
            return {"status": r.status_code, "retry_after": r.headers.get("retry-after"), "error": r.json()}
        lines = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    chunks = [json.loads(line) for line in lines[:-1]]
    return {
        "status": 200,
        "done": lines[-1] == "[DONE]",
        "ids": {c["id"] for c in chunks},
        "usage": chunks[-1]["usage"],
        "tokens": sum(len(c["edgespec"]["tokens"]) for c in chunks if "edgespec" in c),
    }


def _burst(live, prompts: list[str]) -> list[dict]:
    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(lambda p: _stream_one(live.url, p), prompts, timeout=60))


def test_sixteen_clients_each_complete_or_get_503_with_retry_after(live):
    prompts = [f"question {'x' * i}" for i in range(16)]  # distinct lengths tell the replies apart
    counts = {
        p: live.worker.engine_thread.call(live.worker.engine.count_tokens, [{"role": "user", "content": p}])
        for p in prompts
    }
    process = psutil.Process()
    with slow_engine(live, 0.03):
        rss = []
        for _ in range(2):
            results = _burst(live, prompts)
            rss.append(process.memory_info().rss)
            ok = [(p, r) for p, r in zip(prompts, results, strict=False) if r["status"] == 200]
            busy = [r for r in results if r["status"] == 503]
            assert len(ok) + len(busy) == 16 and ok and busy  # the module's server has --queue 2
            for r in busy:
                assert int(r["retry_after"]) >= 1 and r["error"]["error"]["code"] == "queue_full"
            for prompt, r in ok:  # each stream is its own request's, whole
                assert r["done"] and len(r["ids"]) == 1
                assert r["usage"]["prompt_tokens"] == counts[prompt]
                assert r["usage"]["completion_tokens"] == r["tokens"] > 0
            assert len({next(iter(r["ids"])) for _, r in ok}) == len(ok)
    assert rss[1] - rss[0] < 20 * 2**20, "memory grew across a second burst"
