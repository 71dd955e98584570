"""`serve`'s app tried by a machine: generated requests, well formed and not, over a fake engine.

Hypothesis builds each request from the request models' fields (right values, wrong types, missing
and unknown fields, huge numbers, NaN and Infinity as JSON writes them, text with lone surrogates),
or sends bytes that are not JSON, with odd content types and methods, to every path the app
serves and some it does not; some go to the app with `--api-key`, with keys right, wrong or not
ASCII. The rule: never a 5xx, every error in OpenAI's shape
(`{"error": {"message", "type", "param", "code"}}`, a one-line message), every success a body of
its endpoint's kind (streamed: events ending in `[DONE]`), and `/health` answers afterwards. The
run is derandomized, so CI sends the same requests every time.
"""

from __future__ import annotations

import json
import math

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.engine.engine_thread import EngineThread
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.server.app import create_app
from edgespec.server.engine_worker import EngineWorker
from tests.fakes import MarkovBackend

REQUESTS = 1100  # generated requests; at least 1,000 must be sent
N_CTX = 96  # short replies keep 1,100 requests quick; long prompts meet the context limit


LOCAL = "http://localhost"  # the Host a client of a keyless server sends (TestClient's own is refused)


@pytest.fixture(scope="module")
def clients():
    """The app as `serve` runs it, without and with `--api-key sekret`, over one fake engine."""
    pair = PairConfig(
        "fake", "llamacpp", ModelSpec("fake-target", "gguf"), ModelSpec("fake-draft", "gguf"), "model", N_CTX
    )
    engine = Engine(pair, MarkovBackend(seed=21, n_ctx=N_CTX), MarkovBackend(seed=21, noise=1.0, n_ctx=N_CTX))
    worker = EngineWorker(engine, EngineThread(), queue_size=4)
    try:
        with (
            TestClient(create_app(worker, GenerateSettings()), LOCAL, raise_server_exceptions=False) as open_client,
            TestClient(
                create_app(worker, GenerateSettings(), api_key="sekret"), LOCAL, raise_server_exceptions=False
            ) as keyed_client,
        ):
            yield open_client, keyed_client
    finally:
        worker.close()


# -- what is sent ----------------------------------------------------------------------------------

# Text with what clients and attackers send: any code point, lone surrogates included.
text = st.text(st.characters(codec=None), max_size=12) | st.sampled_from(["", "a\ud800b", "\udfff", "<|im_end|>"])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([0, 1, -1, 2**63, 2**64])
    | st.floats(allow_nan=True, allow_infinity=True)
    | text
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3), max_leaves=6
)


def unit(low_open: bool = False) -> st.SearchStrategy:
    return st.floats(0, 1, exclude_min=low_open) | st.sampled_from([1, 0.5] if low_open else [0, 1, 0.5])


roles = st.sampled_from(["system", "developer", "user", "user", "assistant"])
parts = st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": text}), min_size=1, max_size=2)
message = st.fixed_dictionaries({"role": roles, "content": text | parts})
# Each field's good values (text may still hold a surrogate); `spoiled` puts bad ones in.
shared = {
    "max_tokens": st.integers(1, 12) | st.just(2**31),
    "max_completion_tokens": st.integers(1, 12),
    "temperature": st.floats(0, 3) | st.just(0),
    "top_p": unit(low_open=True),
    "top_k": st.integers(0, 2**70),
    "min_p": unit(),
    "seed": st.integers(0, 2**64 - 1),
    "stop": text.filter(bool) | st.lists(text.filter(bool), max_size=4),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans()}),
    "edgespec": st.fixed_dictionaries({}, optional={"sources": st.booleans()}),
    "n": st.just(1),
    "logprobs": st.just(False),
    "presence_penalty": st.just(0),
    "logit_bias": st.just({}),
    "user": text,
}
bodies = {
    "/v1/chat/completions": st.fixed_dictionaries(
        {"model": st.just("fake"), "messages": st.lists(message, min_size=1, max_size=3)},
        optional={
            **shared,
            "tools": st.just([]),
            "tool_choice": st.just("none"),
            "response_format": st.just({"type": "text"}),
            "top_logprobs": st.just(0),
        },
    ),
    "/v1/completions": st.fixed_dictionaries(
        {"model": st.just("fake"), "prompt": text.filter(bool) | st.lists(text.filter(bool), min_size=1, max_size=1)},
        optional={**shared, "echo": st.just(False), "suffix": st.just(""), "best_of": st.just(1)},
    ),
}
# Values that are nearly right, for any field: out of range, empty, the wrong role, too many.
near_misses = st.sampled_from(
    [
        0,
        -1,
        2,
        2**64,
        math.nan,
        -math.inf,
        "",
        [],
        {},
        [""],
        ["a", "b"],
        "1",
        True,
        "robot",
        [{"role": "robot", "content": "x"}],
        [{"role": "user"}],
        {"sources": 1},
        [{"type": "image_url", "image_url": "x"}],
        ["s"] * 17,
    ]
)


def body_bytes(body: object, ascii_only: bool) -> bytes:
    """JSON as Python writes it: NaN and Infinity as bare words; surrogates escaped, or (not ASCII)
    written raw, which is not UTF-8."""
    return json.dumps(body, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


@st.composite
def spoiled(draw, body: dict) -> dict:
    """The body with one field left out, or set to any JSON value (an unknown name included)."""
    name = draw(st.sampled_from(sorted({*body, *shared, "model", "colour"})))
    if name in body and draw(st.booleans()):
        return {k: v for k, v in body.items() if k != name}
    return {**body, name: draw(near_misses | json_values)}


@st.composite
def requests(draw) -> tuple[str, str, dict, bytes, bool]:
    """(method, path, headers, body), and whether the app wants an API key: a body of the endpoint's
    fields, as is or spoiled in one field, sent as JSON or cut short; or any JSON value or bytes,
    with any content type, method and key, to any path."""
    if draw(st.integers(0, 8)) == 4:
        keys = st.sampled_from(
            [
                b"Bearer sekret",
                b"Bearer wrong",
                b"bearer  sekret ",
                b"Basic sekret",
                b"Bearer",
                b"",
                b"Bearer \xff\xfe",
                "Bearer s\u00e9kret".encode("latin-1"),
            ]
        )
        method, path, headers, raw, _ = draw(requests())
        return method, path, {**headers, "authorization": draw(keys)}, raw, True
    # One in n, by a value in the middle: Hypothesis draws a range's ends more often than the rest.
    if draw(st.integers(0, 6)) == 3:
        method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]))
        path = draw(
            st.sampled_from(
                ["/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/v1/", "/v1/embeddings"]
            )
            | st.text(st.characters(codec="ascii", categories=["L", "N", "P"]), max_size=8).map("/{}".format)
        )
        raw = draw(st.binary(max_size=24) | st.builds(body_bytes, json_values, st.booleans()))
        content_type = draw(
            st.sampled_from(
                [
                    None,
                    "application/json",
                    "text/plain",
                    "multipart/form-data",
                    "application/x-www-form-urlencoded",
                    "application/json; charset=latin-1",
                ]
            )
        )
        return method, path, {} if content_type is None else {"content-type": content_type}, raw, False
    path = draw(st.sampled_from(sorted(bodies)))
    body = draw(bodies[path])
    if draw(st.booleans()):
        body = draw(spoiled(body))
    raw = body_bytes(body, draw(st.integers(0, 10)) != 5)
    if draw(st.integers(0, 10)) == 5:
        raw = raw[: draw(st.integers(0, len(raw)))]
    return "POST", path, {"content-type": "application/json"}, raw, False


# -- what must come back ---------------------------------------------------------------------------


FIELD_CODES = {"invalid_value", "unknown_parameter", "missing_required_parameter", "unsupported_parameter"}


def strict_json(text: str) -> object:
    """JSON as clients parse it: NaN and Infinity are not JSON, and a reply must not hold them."""

    def refuse(word: str):
        raise AssertionError(f"{word} in {text}")

    return json.loads(text, parse_constant=refuse)


def assert_openai_error(error: object) -> None:
    assert isinstance(error, dict) and set(error) == {"error"}, error
    detail = error["error"]
    assert isinstance(detail, dict) and set(detail) == {"message", "type", "param", "code"}, detail
    assert isinstance(detail["message"], str) and detail["message"] and "\n" not in detail["message"], detail
    assert isinstance(detail["type"], str) and detail["type"], detail
    assert detail["param"] is None or isinstance(detail["param"], str) and detail["param"], detail
    if detail["param"] and detail["code"] in FIELD_CODES:  # a problem with one field names it
        assert detail["param"].split(".")[0] in detail["message"], detail
    assert "None" not in detail["message"], detail  # a field named from nothing
    assert detail["code"] is None or isinstance(detail["code"], str), detail


def assert_events(text: str) -> None:
    """Server-sent events: each a JSON chunk of a reply or an OpenAI-shaped error, then `[DONE]`."""
    data = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    assert data and data[-1] == "[DONE]", text
    for item in map(strict_json, data[:-1]):
        if "error" in item:
            assert_openai_error(item)
        else:
            assert item["object"] in ("chat.completion.chunk", "text_completion"), item


def check(response, path: str) -> None:
    assert response.status_code < 500, (response.status_code, response.text)
    if response.status_code >= 400:
        assert_openai_error(strict_json(response.text))
    elif response.headers["content-type"].startswith("text/event-stream"):
        assert_events(response.text)
    else:
        reply = strict_json(response.text)
        kinds = {"/v1/chat/completions": "chat.completion", "/v1/completions": "text_completion", "/v1/models": "list"}
        if path == "/health":
            assert reply["status"] == "ok"
        else:
            assert reply["object"] == kinds[path], reply


@pytest.mark.heavy
def test_no_generated_request_gets_a_5xx_or_an_error_out_of_shape(clients):
    sent = 0

    @settings(
        max_examples=REQUESTS,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(requests())
    def one(request):
        nonlocal sent
        method, path, headers, raw, keyed = request
        sent += 1
        check(clients[keyed].request(method, path, headers=headers, content=raw), path)

    one()
    print(f"{sent} generated requests")
    assert sent >= 1000
    for client in clients:
        assert client.get("/health").json() == {"status": "ok", "model": "fake"}
