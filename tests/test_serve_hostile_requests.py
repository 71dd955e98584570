"""Requests built to hurt `edgespec serve`: a body at the size cap with tens of thousands of tools,
and JSON nested deeper than anything reads (issue 38, classes 7 and 4). Each must be answered, in
OpenAI's shape, while the server goes on answering everyone else."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from edgespec.constraints import response_format
from edgespec.constraints import tool_calls as constraints_tool_calls
from edgespec.constraints.tool_calls import HERMES
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import GenerateSettings
from edgespec.server import openai_errors, request_body, schema_base
from edgespec.server.app import MAX_BODY_BYTES
from edgespec.server.schemas import ChatCompletionRequest
from edgespec.server.tool_call_parser import ToolCallParser
from edgespec.server.tool_schemas import FunctionDefinition, Tool
from edgespec.util.json_depth import MAX_DEPTH
from tests.live_server import serving, tiny_tool_pair

JSON = {"content-type": "application/json"}
TIMEOUT = httpx.Timeout(60.0)
STOP_TOOL = [{"type": "function", "function": {"name": "stop"}}]


@pytest.fixture(scope="module")
def live(tmp_path_factory, tiny_gguf, tiny_draft_gguf):
    pair = tiny_tool_pair(tmp_path_factory.mktemp("hostile"), tiny_gguf, tiny_draft_gguf, context=512)
    with serving(pair, GenerateSettings(draft=DraftChoice.MODEL, policy=PolicyChoice("fixed", 3))) as live:
        yield live


def chat(**fields) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": "go"}], "max_tokens": 4, **fields}


def post(live, body: dict | bytes) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body)
    return httpx.post(live.url + "/chat/completions", content=content, headers=JSON, timeout=TIMEOUT)


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"] and "\n" not in error["message"]
    return error


# -- class 7: one request must not stall the server --------------------------------------------------

LAST_TOOL = "the last tool, whose check waits for /health"


def answered_while_checked(live, body: bytes, monkeypatch, module, name: str, starts_wait) -> httpx.Response:
    """Send `body` and, once the request's check reaches `module.name` with arguments for which
    `starts_wait(*args)` is true, hold that call until a /health sent meanwhile is answered; assert
    that /health was. Only checks that leave the event loop free let it answer: on the loop, the
    wait gives up unanswered (at 20 s) and the assertion fails. No duration is measured. The
    request's own response is returned."""
    checking, health_answered = threading.Event(), threading.Event()
    answered_while_checking: list[bool] = []
    real = getattr(module, name)

    def waits_for_health(*args, **kwargs):
        if not checking.is_set() and starts_wait(*args):
            checking.set()
            answered_while_checking.append(health_answered.wait(timeout=20))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, waits_for_health)
    with ThreadPoolExecutor(1) as pool:
        big = pool.submit(post, live, body)
        assert checking.wait(timeout=60), "the request's check never got there"
        health = httpx.get(live.root + "/health", timeout=TIMEOUT)
        health_answered.set()
        reply = big.result(timeout=120)
    assert health.status_code == 200
    assert answered_while_checking == [True], "/health was not answered while the request was checked"
    return reply


def _at_the_cap(tools: list[dict], **fields) -> bytes:
    body = json.dumps(chat(tools=tools, **fields)).encode()
    assert 0.9 * MAX_BODY_BYTES < len(body) <= MAX_BODY_BYTES
    return body


def test_health_answers_while_a_request_at_the_body_cap_is_checked(live, monkeypatch):
    """20,000 distinct tools in a body at the cap (issue 38: /health blocked 7.7 s at 1.1 MB, the
    checks ran on the event loop); the check of the last tool's description waits for /health."""
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "d" * 125}} for i in range(19_999)]
    tools.append({"type": "function", "function": {"name": "last", "description": LAST_TOOL}})
    body = _at_the_cap(tools, tool_choice="none")
    reply = answered_while_checked(
        live, body, monkeypatch, schema_base, "text_problem", lambda text, *_: text == LAST_TOOL
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["finish_reason"] in ("stop", "length")


def test_health_answers_while_the_errors_of_a_request_at_the_body_cap_are_read(live, monkeypatch):
    """80,000 tools with a bad name each: pydantic's 80,000 errors were read into the one 400 on the
    event loop; reading them waits for /health."""
    body = _at_the_cap([{"type": "function", "function": {"name": "a b"}}] * 80_000)
    reply = answered_while_checked(live, body, monkeypatch, openai_errors, "_param", lambda error: True)
    assert error_of(reply, 400)["param"] == "tools.0.function.name"


# What a constraint is compiled whole for before queueing (guidance.check, the grammar engine's
# matcher built and stepped): seconds for these two, in the same worker thread as the body's checks.
HUGE_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "huge",
        "schema": {"type": "object", "properties": {f"property_{i:05d}": {"type": "string"} for i in range(12_000)}},
    },
}


@pytest.mark.heavy
def test_health_answers_while_20000_required_tools_are_compiled(live, monkeypatch):
    """20,000 distinct tools under tool_choice "required": the one grammar of a call to any of them
    is past the grammar engine's limits. Compiling it waits for /health, and the request is a 400
    naming the tools, not a 500 of the engine's panic."""
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "d" * 125}} for i in range(20_000)]
    body = _at_the_cap(tools, tool_choice="required")
    reply = answered_while_checked(live, body, monkeypatch, constraints_tool_calls, "check", _whole_grammar)
    assert error_of(reply, 400)["param"] == "tools"


def _whole_grammar(spec) -> bool:
    """The check of the grammar of a call to any tool (each tool's parameters are checked before)."""
    return spec.kind == "lark"


@pytest.mark.heavy
def test_health_answers_while_a_schema_of_12000_properties_is_compiled(live, monkeypatch):
    """A response_format of 12,000 properties: past the grammar engine's symbol table, which it finds
    only when it builds the matcher. Building it waits for /health; the request is a 400."""
    body = json.dumps(chat(response_format=HUGE_FORMAT)).encode()
    reply = answered_while_checked(live, body, monkeypatch, response_format, "check", lambda spec: True)
    error = error_of(reply, 400)
    assert error["param"] == "response_format" and "beyond what the grammar engine can build" in error["message"]


class CountedName(str):
    """A tool name that counts how often it is compared with another."""

    comparisons = 0

    def __eq__(self, other: object) -> bool:
        CountedName.comparisons += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_tool_names_are_told_apart_in_one_pass():
    """The duplicate check compared every name with every other (`names.count`): 20,000 tools
    took seconds, a body at the cap about two minutes. Now the comparisons grow with the number
    of tools, not its square."""
    n = 2_000
    tools = [
        Tool.model_construct(type="function", function=FunctionDefinition.model_construct(name=CountedName(f"t{i}")))
        for i in range(n)
    ]
    CountedName.comparisons = 0
    ChatCompletionRequest.model_validate(chat(tools=tools))
    assert CountedName.comparisons <= n


# -- class 4: nesting deeper than anything reads --------------------------------------------------


def _history(arguments: str) -> list[dict]:
    call = {"id": "call_1", "type": "function", "function": {"name": "stop", "arguments": arguments}}
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "stopped"},
    ]


DEEP_ARGUMENTS = ["[" * 100_000, "[" * 5_000 + "]" * 5_000, "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)]


@pytest.mark.parametrize("arguments", DEEP_ARGUMENTS, ids=["100k-open", "valid-5000", "valid-over-bound"])
def test_history_arguments_too_deep_to_read_pass_as_text(live, arguments):
    """docs/serve.md: arguments that are not JSON pass to the template as text. Before, these
    were a 500 with a RecursionError traceback in the log."""
    request = ChatCompletionRequest.model_validate(chat(messages=_history(arguments), tools=STOP_TOOL))
    assert request.chat_messages()[1]["tool_calls"][0]["function"]["arguments"] == arguments
    reply = post(live, chat(messages=_history(arguments), tools=STOP_TOOL))
    assert reply.status_code == 200, reply.text


def test_history_arguments_within_the_bound_are_read_as_json():
    nested = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    request = ChatCompletionRequest.model_validate(chat(messages=_history(nested), tools=STOP_TOOL))
    assert request.chat_messages()[1]["tool_calls"][0]["function"]["arguments"] == json.loads(nested)


def _nested_schema(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000,
        chat(response_format={"type": "json_schema", "json_schema": {"name": "deep", "schema": _nested_schema(300)}}),
        chat(tools=[{"type": "function", "function": {"name": "deep", "parameters": _nested_schema(300)}}]),
    ],
    ids=["open-brackets", "response-format", "tool-parameters"],
)
def test_a_body_nested_too_deeply_is_a_400_saying_so(live, body):
    """Before: a generic "error parsing the body", llguidance's own limit, or (tool parameters under
    "auto", which nothing compiles) a 200 that rendered them into the prompt."""
    error = error_of(post(live, body), 400)
    assert error["message"] == f"the body is nested more than {MAX_DEPTH} levels deep"
    assert error["type"] == "invalid_request_error"


def test_the_server_answers_after_hostile_requests(live):
    reply = post(live, chat())
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] is not None


@pytest.mark.parametrize("arguments", ["[" * 5_000 + "]" * 5_000, "[" * 100_000], ids=["valid-5000", "100k-open"])
def test_a_reply_whose_json_is_too_deep_to_read_is_content_as_written(arguments):
    """A model's reply is read for plain JSON calls under "auto"; JSON too deep to read is no call
    (before: a RecursionError on the event loop, mid-stream)."""
    text = '{"name": "get_weather", "arguments": ' + arguments + "}"
    parser = ToolCallParser(HERMES, ["get_weather"], True, ["get_weather"])
    deltas = parser.feed(text) + parser.end()
    assert "".join(d.content or "" for d in deltas) == text
    assert not any(d.tool_calls for d in deltas)


def test_a_long_list_checked_in_slices_keeps_each_errors_place(live):
    """A list longer than a slice is validated a slice per call (one call holds Python's lock); an
    error past the first slices is located as in the whole list, and the first field's error is the
    one said, as when the body is validated in one call."""
    tools = [{"type": "function", "function": {"name": f"tool_{i}"}} for i in range(3 * request_body.SLICE)]
    bad = 2 * request_body.SLICE + 7
    tools[bad]["function"]["name"] = "a b"
    assert error_of(post(live, chat(tools=tools)), 400)["param"] == f"tools.{bad}.function.name"
    assert error_of(post(live, chat(tools=tools, temperature="hot")), 400)["param"] == "temperature"
