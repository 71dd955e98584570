"""Requests built to hurt `edgespec serve`: JSON nested deeper than anything reads (issue 38,
class 4). Each must be answered, in OpenAI's shape, while the server goes on answering everyone
else."""

from __future__ import annotations

import json

import httpx
import pytest

from edgespec.constraints.tool_calls import HERMES
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.plan import KSetting
from edgespec.engine.engine import GenerateSettings
from edgespec.server.schemas import ChatCompletionRequest
from edgespec.server.tool_calls import ToolCallParser
from edgespec.util.json_depth import MAX_DEPTH
from tests.live_server import serving, tiny_tool_pair

JSON = {"content-type": "application/json"}
TIMEOUT = httpx.Timeout(60.0)
STOP_TOOL = [{"type": "function", "function": {"name": "stop"}}]


@pytest.fixture(scope="module")
def live(tmp_path_factory, tiny_gguf, tiny_draft_gguf):
    pair = tiny_tool_pair(tmp_path_factory.mktemp("hostile"), tiny_gguf, tiny_draft_gguf, context=512)
    with serving(pair, GenerateSettings(draft=DraftChoice.MODEL, k=KSetting("fixed", 3))) as live:
        yield live


def chat(**fields) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": "go"}], "max_tokens": 4, **fields}


def post(live, body: dict | bytes) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body)
    return httpx.post(live.url + "/chat/completions", content=content, headers=JSON, timeout=TIMEOUT)


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
