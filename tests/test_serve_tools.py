"""Tool calls in `edgespec serve`: the reading of calls out of a reply's text (scripted streams, cut
at every place), the request's checks (400s naming the field), constrained calls on the tiny GGUF
pair (its random weights write valid calls only because decoding is constrained), and the real
pair through the official openai client (marked slow)."""

from __future__ import annotations

import json
import random

import httpx
import jsonschema
import openai
import pytest

from edgespec.backends.chat_template import render_chat
from edgespec.constraints.guidance import ConstraintError
from edgespec.constraints.tool_calls import HERMES, call_constraint
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import GenerateSettings
from edgespec.models.config import load_registry
from edgespec.models.registry import ConfigError
from edgespec.server.schemas import ChatCompletionRequest, Delta
from edgespec.server.tool_call_parser import ToolCallParser
from edgespec.server.tool_choice import tool_plan
from tests.live_server import serving, serving_engine, tiny_tool_pair

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather now in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]
# small enough that the tiny model's random choices end soon
TINY_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "move",
            "parameters": {
                "type": "object",
                "properties": {
                    "steps": {"type": "integer", "minimum": 0, "maximum": 99},
                    "way": {"enum": ["up", "down"]},
                },
                "required": ["steps", "way"],
                "additionalProperties": False,
            },
        },
    },
    {"type": "function", "function": {"name": "stop"}},
]

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": {"a": "}"}}}\n</tool_call>'


def read(
    text: str, names=("get_weather",), parallel=True, seed: int | None = None, cuts: list[int] | None = None, plain=()
):
    """The deltas a parser sends for `text` fed in pieces (cut at `cuts`, or at random places), and
    the parser; `plain`: the tools a call in plain JSON may name ("auto")."""
    parser = ToolCallParser(HERMES, names, parallel, plain)
    if cuts is None:
        rnd = random.Random(seed)
        cuts = sorted(rnd.sample(range(1, len(text)), min(len(text) - 1, rnd.randint(0, 12))))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    deltas = [d for piece in pieces for d in parser.feed(piece)] + parser.end()
    return deltas, parser


def accumulated(deltas) -> tuple[str, list[dict]]:
    """Content and calls as a client accumulates OpenAI's deltas."""
    content, calls = "", []
    for d in deltas:
        content += d.content or ""
        for c in d.tool_calls or ():
            if c.id is not None:
                assert c.index == len(calls) and c.type == "function" and c.function.arguments == ""
                calls.append({"id": c.id, "name": c.function.name, "arguments": ""})
            else:
                assert c.function.name is None
                calls[c.index]["arguments"] += c.function.arguments
    return content, calls


# -- reading calls out of the text -------------------------------------------------------------


SAID = "I will look.\n\n" + CALL


@pytest.mark.parametrize("cut", range(1, len(SAID)))
def test_a_call_cut_anywhere_streams_as_openai_deltas(cut):
    deltas, parser = read(SAID, cuts=[cut])
    content, calls = accumulated(deltas)
    assert content == "I will look."
    assert [c["name"] for c in calls] == ["get_weather"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris", "unit": {"a": "}"}}
    assert calls[0]["id"].startswith("call_")
    assert parser.finish_reason("stop") == "tool_calls"
    message = parser.message()
    assert message.content == "I will look." and message.tool_calls[0].function.arguments == calls[0]["arguments"]


@pytest.mark.parametrize("seed", range(40))
def test_parallel_calls_in_random_pieces_read_the_same(seed):
    text = CALL + "\n" + CALL.replace("Paris", "Oslo")
    content, calls = accumulated(read(text, seed=seed)[0])
    assert content == ""
    assert [json.loads(c["arguments"])["city"] for c in calls] == ["Paris", "Oslo"]
    assert len({c["id"] for c in calls}) == 2


def test_a_reply_without_calls_is_content_as_written():
    text = "Use <tool> tags, or <tool_cal... no.\n\n  "
    for seed in range(10):
        deltas, parser = read(text, seed=seed)
        assert accumulated(deltas) == (text, []) and parser.finish_reason("stop") == "stop"
        assert parser.message().tool_calls is None


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>\nI cannot call that.</tool_call> ok",  # prose after the tag
        '<tool_call>\n{"name": "launch", "arguments": {}}\n</tool_call>',  # not a tool offered
        '<tool_call>\n{"name": "get_weather", "argument',  # the reply ended inside the head
        'Well\n<tool_call>\n{"name": 5}\n</tool_call>',  # the head is not a call's
    ],
)
def test_a_malformed_call_reaches_the_client_as_its_text(text):
    for seed in range(10):
        deltas, parser = read(text, seed=seed)
        assert accumulated(deltas) == (text, []), seed
        assert parser.finish_reason("stop") == "stop"


def test_a_call_with_its_keys_the_other_way_round_is_read_when_it_closes():
    content, calls = accumulated(
        read('<tool_call>\n{"arguments": {"city": "Rome"}, "name": "get_weather"}\n</tool_call>')[0]
    )
    assert content == "" and calls[0]["name"] == "get_weather" and json.loads(calls[0]["arguments"]) == {"city": "Rome"}


def test_without_parallel_calls_what_follows_the_first_is_dropped():
    deltas, parser = read(CALL + "\n" + CALL + "\nanything", parallel=False, seed=3)
    assert len(accumulated(deltas)[1]) == 1 and len(parser.message().tool_calls) == 1


def test_a_call_cut_by_the_length_limit_is_sent_as_far_as_it_went():
    deltas, parser = read(CALL[:70], seed=1)
    content, calls = accumulated(deltas)
    assert content == "" and calls[0]["arguments"] == CALL[49:70] == '{"city": "Paris", "un'
    assert parser.finish_reason("length") == "length"


def test_text_after_a_call_keeps_its_break_however_it_is_cut():
    text = "Looking.\n" + CALL + "\nDone, it rains."
    for cut in range(1, len(text)):
        deltas, parser = read(text, cuts=[cut])
        assert accumulated(deltas)[0] == "Looking.\nDone, it rains." == parser.message().content, cut


# -- calls in plain JSON, read under "auto" ----------------------------------------------------

FENCED = '```json\n{"name": "get_weather", "arguments": {"city": "Paris", "note": "a```b <tool_call>"}}\n```'
WEATHER_ONLY = ("get_weather",)


def read_plain(text: str, **kw):
    return read(text, plain=WEATHER_ONLY, **kw)


@pytest.mark.parametrize("cut", range(1, len("Let me check.\n\n" + FENCED + "\n")))
def test_a_fenced_call_cut_anywhere_is_read_as_the_whole_reply_is(cut):
    text = "Let me check.\n\n" + FENCED + "\n"
    deltas, parser = read_plain(text, cuts=[cut])
    content, calls = accumulated(deltas)
    assert content == "Let me check." and [c["name"] for c in calls] == ["get_weather"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris", "note": "a```b <tool_call>"}
    assert parser.finish_reason("stop") == "tool_calls"
    whole = read_plain(text, cuts=[])[1].message()
    assert parser.message().content == whole.content == "Let me check."
    assert parser.message().tool_calls[0].function == whole.tool_calls[0].function


@pytest.mark.parametrize(
    "text, cities",
    [
        (FENCED.replace("json", "") + "\n" + FENCED.replace("Paris", "Oslo"), ["Paris", "Oslo"]),
        (  # a list in one block, closed on the line of its end
            '```json\n[{"name": "get_weather", "arguments": {"city": "Paris"}},\n'
            ' {"name": "get_weather", "arguments": {"city": "Oslo"}}]```',
            ["Paris", "Oslo"],
        ),
        (' \n{"name": "get_weather", "arguments": {"city": "Rome"}}\n', ["Rome"]),  # bare, the whole reply
    ],
)
def test_plain_json_calls_in_random_pieces(text, cities):
    for seed in range(20):
        deltas, parser = read_plain(text, seed=seed)
        content, calls = accumulated(deltas)
        assert content == "" and [json.loads(c["arguments"])["city"] for c in calls] == cities, seed
        assert parser.message().content is None
        _, single = accumulated(read_plain(text, seed=seed, parallel=False)[0])
        assert [json.loads(c["arguments"])["city"] for c in single] == cities[:1]


@pytest.mark.parametrize(
    "text",
    [
        "Here:\n```python\nprint({'name': 1})\n```\nDone.",
        '```json\n{"city": "Paris"}\n```',  # JSON, not a call
        '```json\n{"name": "launch", "arguments": {}}\n```',  # a tool not offered
        '```json\n{"name": "get_weather", "arguments": {}, "id": 3}\n```',  # another key
        '```json\n{"name": "get_weather", "arguments": "Paris"}\n```',  # arguments not an object
        '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}',  # never closed
        'Use ```json\n{"name": "get_weather", "arguments": {}}\n```',  # no fence: not at a line's start
        '{"name": "get_weather", "arguments": {"city": "Paris"}} is how to call it.',  # bare, with prose
        'So:\n{"name": "get_weather", "arguments": {"city": "Paris"}}',  # bare, after prose
        "```xml\n<tool_call>\nno call\n</tool_call>\n```",
    ],
)
def test_plain_json_that_is_no_call_is_content_as_written(text):
    for seed in range(10):
        deltas, parser = read_plain(text, seed=seed)
        assert accumulated(deltas) == (text, []), seed
        assert parser.finish_reason("stop") == "stop" and parser.message().content == text


def test_text_after_a_tag_that_opens_no_call_is_read_as_text_however_it_is_cut():
    text = "<tool_call>\nLet me see.\n" + FENCED
    for cut in range(1, len(text)):
        content, calls = accumulated(read_plain(text, cuts=[cut])[0])
        assert content == "<tool_call>\nLet me see." and [c["name"] for c in calls] == ["get_weather"], cut


def test_a_code_block_streams_as_soon_as_it_cannot_be_a_call():
    parser = ToolCallParser(HERMES, WEATHER_ONLY, True, WEATHER_ONLY)
    assert parser.feed("Try:\n``") == [Delta(content="Try:")]
    assert parser.feed("`py") == [Delta(content="\n```py")]
    assert parser.feed("thon\nx = 1\n") == [Delta(content="thon\nx = 1")]
    assert parser.feed('```\n\n```json\n{"na') == [Delta(content="\n```")]  # the next may open a call
    assert parser.feed('me": "get_') == []
    assert parser.feed('time"') == [Delta(content='\n\n```json\n{"name": "get_time"')]


def test_plain_json_is_not_read_without_plain_names():
    text = "```json\n" + json.dumps({"name": "get_weather", "arguments": {}}) + "\n```"
    assert accumulated(read(text, seed=0)[0]) == (text, [])


def test_auto_reads_plain_json_calls_of_tools_that_are_not_strict():
    strict = {"type": "function", "function": {**WEATHER["function"], "name": "get_time", "strict": True}}
    body = ChatCompletionRequest.model_validate({"model": "m", "messages": ASK, "tools": [WEATHER, strict]})
    for name, read_as_call in [("get_weather", True), ("get_time", False)]:
        parser = tool_plan(body, "m", "hermes").parser
        text = "```json\n" + json.dumps({"name": name, "arguments": {"city": "Oslo"}}) + "\n```"
        parser.feed(text)
        parser.end()
        assert (parser.message().tool_calls is not None) is read_as_call, name
    required = tool_plan(body.model_copy(update={"tool_choice": "required"}), "m", "hermes").parser
    required.feed(text)
    required.end()
    assert required.message().content == text


# -- the grammar and the format's declaration ---------------------------------------------------


def test_a_schema_llguidance_cannot_enforce_is_refused_naming_the_tool_and_the_feature():
    schema = {"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}
    with pytest.raises(ConstraintError, match=r"tool 'odd'.*Unimplemented keys.*if"):
        call_constraint(HERMES, {"fine": {"type": "object"}, "odd": schema}, parallel=True)


def test_tool_format_must_be_a_known_format(tmp_path):
    path = tmp_path / "models.toml"
    path.write_text(
        'default = "p"\n[models.t]\nformat = "gguf"\npath = "/x.gguf"\n'
        '[pairs.p]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "none"\ncontext = 64\ntool_format = "xml"\n'
    )
    with pytest.raises(ConfigError, match=r'pair "p": key "tool_format": "xml" is not one of hermes'):
        load_registry(path)


def test_the_built_in_pairs_declare_hermes():
    registry = load_registry()
    assert registry.pair(None).tool_format == "hermes"
    assert registry.pair("qwen2.5-coder-1.5b-hf").tool_format == "hermes"


def test_the_template_writes_tools_and_arguments_as_json_dumps_does():
    template = (
        "{% for t in tools %}{{ t | tojson }}{% endfor %}|{{ messages[0].tool_calls[0].function.arguments | tojson }}"
    )
    tool = {"name": "a<b>&'c", "description": "é"}
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "x", "arguments": {"q": "<"}}}]}
    ]
    assert render_chat(template, messages, tools=[tool]) == json.dumps(tool, ensure_ascii=False) + '|{"q": "<"}'


# -- requests on the tiny pair ------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory, tiny_gguf, tiny_draft_gguf):
    pair = tiny_tool_pair(tmp_path_factory.mktemp("tools"), tiny_gguf, tiny_draft_gguf, context=512)
    with serving(pair, GenerateSettings(draft=DraftChoice.MODEL, policy=PolicyChoice("fixed", 3))) as live:
        yield live


@pytest.fixture
def client(live):
    return openai.OpenAI(base_url=live.url, api_key="unused", max_retries=0, timeout=60)


def chat(**fields) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": "go"}], "max_tokens": 8, **fields}


HISTORY_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "move", "arguments": '{"steps": 1, "way": "up"}'},
}


@pytest.mark.parametrize(
    "body, param, says",
    [
        (
            chat(tools=TINY_TOOLS, tool_choice={"type": "function", "function": {"name": "jump"}}),
            "tool_choice",
            "'jump'",
        ),
        (chat(tool_choice="required"), "tool_choice", "needs tools"),
        (chat(tools=TINY_TOOLS, tool_choice="sometimes"), "tool_choice", "required"),
        (chat(tools=[TINY_TOOLS[0], TINY_TOOLS[0]]), "tools", "two tools are named 'move'"),
        (chat(tools=[{"type": "function", "function": {"name": "a b"}}]), "tools.0.function.name", "pattern"),
        (chat(tools=[{"type": "retrieval"}]), "tools.0.type", "function"),
        (
            chat(
                tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}],
                tool_choice="required",
            ),
            "tools",
            "Unimplemented keys",
        ),
        (chat(messages=[{"role": "tool", "content": "3"}]), "messages.0.tool_call_id", "missing"),
        (
            chat(messages=[{"role": "user", "content": "x", "tool_calls": [HISTORY_CALL]}]),
            "messages.0.tool_calls",
            "assistant",
        ),
        (chat(messages=[{"role": "user", "content": None}]), "messages.0.content", "missing"),
        (chat(messages=[{"role": "assistant", "content": None}]), "messages.0.content", "missing"),
        (chat(parallel_tool_calls="yes"), "parallel_tool_calls", "boolean"),
    ],
)
def test_a_bad_tool_request_is_a_400_naming_the_field(live, body, param, says):
    response = httpx.post(live.url + "/chat/completions", json=body, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert says in error["message"] and "\n" not in error["message"]


def test_a_schema_enforced_only_when_required_is_not_refused_under_auto(client):
    odd = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}]
    reply = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "go"}], tools=odd, max_tokens=4
    )
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_a_strict_tool_under_auto_must_be_enforceable(live):
    odd = {"type": "function", "function": {"name": "f", "strict": True, "parameters": {"type": "object", "not": {}}}}
    response = httpx.post(live.url + "/chat/completions", json=chat(tools=[odd]), timeout=30)
    assert response.status_code == 400 and response.json()["error"]["param"] == "tools"
    assert "tool 'f'" in response.json()["error"]["message"]


def test_strict_tools_under_auto_leave_text_free_and_make_a_started_call_valid(live):
    """The grammar of "auto" with a strict tool, matched over the tiny pair's own tokens."""
    move = TINY_TOOLS[0]["function"]
    spec = call_constraint(HERMES, {"move": move["parameters"], "stop": {"type": "object"}}, True, after_text=True)
    call = '<tool_call>\n{"name": "move", "arguments": {"steps": 3, "way": "up"}}\n</tool_call>'
    engine = live.worker.engine

    def matched(text: str) -> tuple[bool, bool]:  # (every token allowed, a whole reply)
        matcher, ids = engine.constraint(spec), engine.target.tokenize(text, special=False)
        allowed = matcher.allowed_prefix(ids) == len(ids)
        return allowed, allowed and all(matcher.advance(t) for t in ids) and matcher.accepting()

    for text, verdict in [
        ("Just text, <tool> and all.", (True, True)),
        ("Moving.\n" + call, (True, True)),
        (call + "\n" + call.replace("move", "stop").replace('"steps": 3, "way": "up"', ""), (True, True)),
        ("Moving.\n<tool_call>\nnot a call", (False, False)),
        (call.replace("up", "left"), (False, False)),
        ("Moving.\n" + call[:40], (True, False)),
    ]:
        assert live.worker.engine_thread.call(matched, text) == verdict, text


def test_tools_on_a_pair_without_a_format_are_a_400(tiny_gguf, tmp_path):
    path = tmp_path / "models.toml"
    path.write_text(
        f'default = "plain"\n[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
        '[pairs.plain]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "none"\ncontext = 256\n'
    )
    with serving(load_registry(path).pair("plain"), GenerateSettings()) as live:
        for body, param in [
            ({**chat(tools=TINY_TOOLS), "model": "plain"}, "tools"),
            (
                {
                    **chat(),
                    "model": "plain",
                    "messages": [{"role": "assistant", "content": None, "tool_calls": [HISTORY_CALL]}],
                },
                "messages.0",
            ),
        ]:
            error = httpx.post(live.url + "/chat/completions", json=body, timeout=30).json()["error"]
            assert error["param"] == param and "tool_format" in error["message"]
        ok = httpx.post(live.url + "/chat/completions", json={**chat(tools=[]), "model": "plain"}, timeout=30)
        assert ok.status_code == 200


def _valid_call(call) -> None:
    tool = next(t for t in TINY_TOOLS if t["function"]["name"] == call.function.name)
    schema = tool["function"].get("parameters", {"type": "object", "additionalProperties": False})
    jsonschema.validate(json.loads(call.function.arguments), schema)


def test_required_makes_even_random_weights_call_a_tool_validly(client):
    reply = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "go"}], tools=TINY_TOOLS, tool_choice="required",
        parallel_tool_calls=False, max_tokens=120,
    )  # fmt: skip
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert len(choice.message.tool_calls) == 1 and choice.message.tool_calls[0].id.startswith("call_")
    _valid_call(choice.message.tool_calls[0])


def test_a_named_tool_is_the_one_called_and_streams_as_deltas(client):
    stream = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "go"}], tools=TINY_TOOLS, max_tokens=120, stream=True,
        tool_choice={"type": "function", "function": {"name": "move"}}, parallel_tool_calls=False,
    )  # fmt: skip
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    content, calls = accumulated(deltas)
    assert not content and [c["name"] for c in calls] == ["move"]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    jsonschema.validate(json.loads(calls[0]["arguments"]), TINY_TOOLS[0]["function"]["parameters"])


def test_a_history_with_calls_and_their_results_is_answered(client):
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [HISTORY_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "moved"},
    ]
    reply = client.chat.completions.create(
        model="tiny", messages=messages, tools=TINY_TOOLS, tool_choice="none", max_tokens=4
    )
    assert reply.choices[0].finish_reason in ("stop", "length") and reply.choices[0].message.tool_calls is None


# -- the real pair, through the openai client -----------------------------------------------------


@pytest.fixture(scope="module")
def real(real_pair_engine):
    pair = real_pair_engine.pair
    with serving_engine(real_pair_engine, GenerateSettings(sampling=pair.sampling)) as live:
        yield openai.OpenAI(base_url=live.url, api_key="unused", max_retries=0, timeout=900), pair.name


@pytest.mark.slow
def test_real_pair_required_and_named_calls_validate_streamed_and_not(real):
    """Asked for, the calls are constrained: they come in the markup and validate."""
    client, model = real
    named = {"type": "function", "function": {"name": "get_weather"}}
    reply = client.chat.completions.create(
        model=model, messages=ASK, tools=[WEATHER], tool_choice=named, max_tokens=40, temperature=0
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    stream = client.chat.completions.create(
        model=model, messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=40, temperature=0, stream=True
    )
    chunks = list(stream)
    content, calls = accumulated([c.choices[0].delta for c in chunks if c.choices])
    assert not content and [c["name"] for c in calls] == ["get_weather"]
    jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER["function"]["parameters"])
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.slow
def test_real_pair_calls_under_auto_streamed_and_not(real):
    """Unconstrained, the 1.5B coder writes its call as a fenced JSON block, not in its
    template's markup (seen here): "auto" reads that as the call."""
    client, model = real
    reply = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER], max_tokens=48, temperature=0)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message.content
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] == "Paris"
    stream = client.chat.completions.create(
        model=model, messages=ASK, tools=[WEATHER], max_tokens=48, temperature=0, stream=True
    )
    chunks = list(stream)
    content, calls = accumulated([c.choices[0].delta for c in chunks if c.choices])
    assert (content or None) == choice.message.content and chunks[-1].choices[0].finish_reason == "tool_calls"
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", call.function.arguments)]


@pytest.mark.slow
def test_real_pair_answers_a_history_with_a_call_and_its_result(real):
    client, model = real
    call = {"id": "call_7", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_7", "content": '{"celsius": 21, "sky": "clear"}'},
    ]
    reply = client.chat.completions.create(
        model=model, messages=messages, tools=[WEATHER], tool_choice="none", max_tokens=16, temperature=0
    )
    message = reply.choices[0].message
    assert message.tool_calls is None and message.content and "<tool_call>" not in message.content
