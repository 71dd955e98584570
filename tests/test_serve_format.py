"""`response_format` in `edgespec serve` (edgespec/server/structured.py): every malformed or
unenforceable format is a 400 naming it before anything is queued; on the tiny GGUF pair a reply
under a schema or the JSON-object mode parses and validates, streamed and whole, and one cut by
max_tokens ends with finish_reason "length"; on the real pair (slow), the official openai client's
`parse` helper gets a parsed pydantic object back.
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pydantic
import pytest

from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import GenerateSettings
from tests.live_server import serving, serving_engine, tiny_tool_pair

PET = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "kind": {"enum": ["cat", "dog", "bird"]},
        "legs": {"type": "integer", "minimum": 0, "maximum": 8},
    },
    "required": ["name", "kind", "legs"],
    "additionalProperties": False,
}
NESTED = {
    "type": "object",
    "properties": {"pos": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
    "required": ["pos"],
    "additionalProperties": False,
}


def schema_format(schema: dict, strict: bool | None = True, name: str = "pet") -> dict:
    spec = {"name": name, "schema": schema} | ({} if strict is None else {"strict": strict})
    return {"type": "json_schema", "json_schema": spec}


@pytest.fixture(scope="module")
def live(tmp_path_factory, tiny_gguf, tiny_draft_gguf):
    pair = tiny_tool_pair(tmp_path_factory.mktemp("serve-format"), tiny_gguf, tiny_draft_gguf, context=256)
    with serving(pair, GenerateSettings(draft=DraftChoice.MODEL, policy=PolicyChoice("fixed", 3))) as live:
        yield live


def ask(live, response_format, **fields) -> httpx.Response:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "a pet"}], "max_tokens": 8}
    body |= {"response_format": response_format, **fields}
    return httpx.post(live.url + "/chat/completions", json=body, timeout=60)


def error_of(response: httpx.Response) -> dict:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and "\n" not in error["message"]
    return error


# -- refused before anything is queued ---------------------------------------------------------------


@pytest.mark.parametrize(
    "response_format, param, said",
    [
        ({"type": "xml"}, "response_format.type", "'text', 'json_object' or 'json_schema'"),
        ({"type": "json_schema"}, "response_format", "needs the field 'json_schema'"),
        ({"type": "text", "json_schema": {"name": "a", "schema": {}}}, "response_format", "goes with type"),
        ({"type": "json_object", "schema": {}}, "response_format.schema", "unknown field"),
        ({"type": "json_schema", "json_schema": {"name": "pet"}}, "response_format.json_schema.schema", "missing"),
        (schema_format(PET, name="a pet"), "response_format.json_schema.name", "underscores or dashes"),
        (schema_format(PET, name="p" * 65), "response_format.json_schema.name", "1 to 64"),
        (schema_format(PET) | {"json_schema": {"name": "p", "schema": "{}"}}, "response_format.json_schema.schema", ""),
        (schema_format(PET) | {"json_schema": {"name": "p", "schema": {}, "strict": "yes"}}, "", "bool"),
        (schema_format(PET) | {"json_schema": {"name": "p", "schema": {}, "format": "x"}}, "", "unknown field"),
        ("text", "response_format", ""),
    ],
)
def test_a_malformed_response_format_is_a_400_naming_the_field(live, generations, response_format, param, said):
    error = error_of(ask(live, response_format))
    assert error["param"].startswith(param or "response_format") and said in error["message"], error
    assert not generations


@pytest.mark.parametrize(
    "schema, said",
    [
        ({"type": "array", "items": PET}, "the root must be an object"),
        ({"anyOf": [PET, {"type": "null"}]}, "the root must be an object"),
        ({k: v for k, v in PET.items() if k != "additionalProperties"}, "at the root, 'additionalProperties'"),
        (NESTED, "at /properties/pos, 'additionalProperties'"),
        (PET | {"required": ["name"]}, "at the root, 'required' must list every property; missing 'kind', 'legs'"),
        (
            {**PET, "properties": {"all": {"type": "array", "items": {"$ref": "#/$defs/p"}}}, "required": ["all"]}
            | {"$defs": {"p": {"type": "object", "properties": {}}}},
            "at /$defs/p, 'additionalProperties'",
        ),
    ],
)
def test_strict_mode_applies_openais_rules(live, generations, schema, said):
    error = error_of(ask(live, schema_format(schema, strict=True)))
    assert error["param"] == "response_format"
    assert error["message"].startswith(f"invalid schema for response_format 'pet' (strict): {said}")
    assert not generations


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "lookup"}}])
def test_a_format_and_a_required_call_together_are_a_400(live, generations, tool_choice):
    """Both would constrain the reply: neither is dropped in silence."""
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    error = error_of(ask(live, schema_format(PET), tools=tools, tool_choice=tool_choice))
    assert error["param"] == "response_format" and "tool_choice" in error["message"]
    assert not generations


@pytest.mark.parametrize("strict", [True, False, None])
def test_a_schema_feature_the_engine_cannot_enforce_is_a_400_naming_it(live, generations, strict):
    schema = PET | {"properties": {"name": {"not": {"type": "integer"}}}, "required": ["name"]}
    error = error_of(ask(live, schema_format(schema, strict=strict)))
    assert error["param"] == "response_format" and '"not"' in error["message"], error
    assert error["message"].startswith("invalid schema for response_format 'pet': the JSON schema cannot be enforced")
    assert not generations


# -- replies under the format, on the tiny pair ---------------------------------------------------------


@pytest.mark.parametrize("strict", [True, False, None])
def test_a_reply_under_a_schema_validates(live, generations, strict):
    reply = ask(live, schema_format(PET, strict=strict), max_tokens=120, temperature=0).json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "stop"
    jsonschema.validate(json.loads(choice["message"]["content"]), PET)
    assert generations and generations[0].kind == "json_schema"


def test_without_strict_the_schema_is_enforced_as_written(live):
    """strict false: a property may be optional (strict mode's 400 without it), and the reply still
    follows the schema."""
    loose = PET | {"required": ["kind"]}
    assert error_of(ask(live, schema_format(loose, strict=True)))["param"] == "response_format"
    reply = ask(live, schema_format(loose, strict=False), max_tokens=120, temperature=0).json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "stop"
    jsonschema.validate(json.loads(choice["message"]["content"]), loose)


def test_json_object_mode_and_text(live, generations):
    client = openai.OpenAI(base_url=live.url, api_key="unused", max_retries=0, timeout=60)
    messages = [{"role": "user", "content": "a pet"}]
    reply = client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=200, temperature=0, response_format={"type": "json_object"}
    )
    text = reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop" and isinstance(json.loads(text), dict), text
    plain = client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=8, temperature=0, response_format={"type": "text"}
    )
    assert plain.choices[0].message.content
    assert [c and c.kind for c in generations] == ["json_object", None]


def test_a_streamed_reply_under_a_schema_validates(live):
    client = openai.OpenAI(base_url=live.url, api_key="unused", max_retries=0, timeout=60)
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "a pet"}],
            max_tokens=120,
            temperature=0,
            stream=True,
            response_format=schema_format(PET),
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(text), PET)


@pytest.mark.parametrize("stream", [False, True])
def test_a_document_cut_by_max_tokens_ends_with_length(live, stream):
    whole = ask(live, schema_format(PET), max_tokens=120, temperature=0).json()["choices"][0]["message"]["content"]
    client = openai.OpenAI(base_url=live.url, api_key="unused", max_retries=0, timeout=60)
    fields = dict(model="tiny", messages=[{"role": "user", "content": "a pet"}], max_tokens=5, temperature=0)
    reply = client.chat.completions.create(**fields, stream=stream, response_format=schema_format(PET))
    if stream:
        chunks = list(reply)
        text, finish = "".join(c.choices[0].delta.content or "" for c in chunks), chunks[-1].choices[0].finish_reason
    else:
        text, finish = reply.choices[0].message.content, reply.choices[0].finish_reason
    assert finish == "length" and text and whole.startswith(text) and text != whole


# -- the real pair, through the openai client's parse helper (slow) -------------------------------------


class Pet(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=12)
    kind: str
    legs: int


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=24)
    country: str = pydantic.Field(max_length=24)


@pytest.fixture(scope="module")
def real_client(real_pair_engine):
    # a fixed K, as tests/test_serve_real_pair.py serves: every reply drafts, and no calibration runs first
    settings = GenerateSettings(
        sampling=real_pair_engine.pair.sampling, draft=DraftChoice.MODEL, policy=PolicyChoice("fixed", 3)
    )
    with serving_engine(real_pair_engine, settings) as live:
        yield openai.OpenAI(base_url=live.url, api_key="unused", max_retries=0, timeout=900), real_pair_engine.pair.name


@pytest.mark.slow
def test_the_openai_parse_helper_gets_a_parsed_object(real_client):
    client, model = real_client
    messages = [{"role": "user", "content": "Describe a cat called Tom as JSON."}]
    reply = client.chat.completions.parse(
        model=model, messages=messages, response_format=Pet, max_tokens=40, temperature=0
    )
    pet = reply.choices[0].message.parsed
    assert isinstance(pet, Pet) and reply.choices[0].finish_reason == "stop", reply


@pytest.mark.slow
def test_the_real_pair_in_json_object_mode_and_streamed_under_a_schema(real_client):
    client, model = real_client
    messages = [{"role": "user", "content": "Give the capital of France as JSON."}]
    reply = client.chat.completions.create(
        model=model, messages=messages, max_tokens=40, temperature=0, response_format={"type": "json_object"}
    )
    assert isinstance(json.loads(reply.choices[0].message.content), dict)
    schema = City.model_json_schema() | {"additionalProperties": False}
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=messages,
            max_tokens=40,
            temperature=0,
            stream=True,
            response_format=schema_format(schema, name="city"),
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(text), schema)
