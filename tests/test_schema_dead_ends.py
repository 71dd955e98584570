"""Schemas that lead nowhere, are too large to build, or nest too deep (issue 38, classes 1, 2 and
4): `run --json-schema` refuses them in one line with exit 2 before loading (the pair named here
has no model file, so an error about the schema is the only one that can come first), and `serve`
with a 400 before anything is queued, for `response_format` and for a tool's parameters. A reply
that reaches a dead end all the same (the checks are patched out to reach one) is an error, exit 1
or an OpenAI-shaped error, never a success with a cut document or a call's markup as content.
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import openai
import pytest

from edgespec.constraints import guidance, response_format, tool_calls
from edgespec.constraints.guidance import ConstraintError, ConstraintSpec, GuidanceMatcher, check, grammar_of
from edgespec.decoding.constraint import ConstraintDeadEnd
from edgespec.decoding.decoder import SpeculativeDecoder
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.policy.simple_policies import FixedK
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import GenerateSettings
from tests.fakes import MarkovBackend
from tests.live_server import serving, tiny_tool_pair
from tests.tiny_cli import invoke, one_line_error

SELF_REF = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}
NODE = {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}, "required": ["next"]}
REQUIRED_SELF = {"$defs": {"node": NODE}, "$ref": "#/$defs/node"}
# an object that must hold a property, each of its own kind: no check before decoding can see it
# (minProperties is not modelled), but llguidance's matcher finds it after the `{` it forces
ENDLESS = {"type": "object", "properties": {"a": {"$ref": "#"}}, "minProperties": 1, "additionalProperties": False}
NOWHERE = [
    (SELF_REF, "no finite document satisfies the JSON schema: #/$defs/a allows none"),
    (REQUIRED_SELF, "no finite document satisfies the JSON schema: #/$defs/node allows none"),
    ({"type": "object", "properties": {"a": False}, "required": ["a"]}, "#/properties/a allows none"),
    ({"type": "array", "items": SELF_REF["$defs"]["a"], "minItems": 1} | {"$defs": SELF_REF["$defs"]}, "#/$defs/a"),
    (False, "the schema is false"),
    (ENDLESS, "the JSON schema leads nowhere"),
    ({"type": "integer", "minimum": 5, "maximum": 3}, "minimum (5) is greater than maximum (3)"),
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "Unsatisfiable schema: incompatible types"),
]
# 1.1 MB: past the grammar engine's symbol table, which it finds only when it builds the matcher
# (seconds of work: the tests that send it are heavy)
HUGE = {
    "type": "object",
    "properties": {f"property_{i:05d}": {"type": "string", "description": "x" * 40} for i in range(12_000)},
}


def deep_text(levels: int) -> str:
    return '{"type": "array", "items": ' * levels + "{}" + "}" * levels


def deep(levels: int) -> dict:
    schema: dict = {}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


# -- before loading: run --json-schema --------------------------------------------------------------


@pytest.mark.parametrize("schema, said", NOWHERE)
def test_run_refuses_a_schema_that_leads_nowhere_before_loading(tiny_cli_home, schema, said):
    path = tiny_cli_home / "schema.json"
    path.write_text(json.dumps(schema))
    line = one_line_error(invoke("run", "x", "-m", "missing", "--json-schema", str(path)), 2)
    assert line.startswith("edgespec: error: --json-schema: ") and said in line


@pytest.mark.parametrize(
    "text, said",
    [(deep_text(10_000), "deeper than 100 levels"), pytest.param(json.dumps(HUGE), "beyond", marks=pytest.mark.heavy)],
)
def test_run_refuses_a_schema_too_deep_or_too_large_to_build_before_loading(tiny_cli_home, text, said):
    path = tiny_cli_home / "schema.json"
    path.write_text(text)
    line = one_line_error(invoke("run", "x", "-m", "missing", "--json-schema", str(path)), 2)
    assert line.startswith("edgespec: error: --json-schema: ") and said in line


def test_brackets_in_a_string_left_open_are_text_not_depth():
    """The depth scan reads an unterminated string as a string to the end, in one pass."""
    with pytest.raises(ConstraintError, match="it is not JSON: Unterminated string"):
        check(ConstraintSpec("json_schema", '{"a": "' + "[" * 500))


def test_a_schema_of_true_is_any_document_and_a_schema_with_finite_documents_compiles():
    check(ConstraintSpec("json_schema", "true"))
    check(ConstraintSpec.json_schema(NODE | {"required": []} | {"$defs": {"node": NODE | {"required": []}}}))
    check(ConstraintSpec.json_schema(deep(99)))


def test_a_parsed_schema_too_deep_is_refused_before_anything_walks_it():
    with pytest.raises(ConstraintError, match="deeper than 100 levels"):
        ConstraintSpec.json_schema(deep(5_000))


# -- before queueing: serve ------------------------------------------------------------------------

# Deeper than a schema may be (100 levels), not than a request's body may be (128, with the 3 levels
# above a response_format's schema; edgespec.util.json_depth): a deeper body is refused whole, before
# its fields are read (tests/test_serve_hostile_requests.py). An object at the root, as strict mode
# asks, so that its rules are walked down the levels.
SCHEMA_LEVELS = 110
DEEP_OBJECT = {
    "type": "object",
    "properties": {"a": deep(SCHEMA_LEVELS)},
    "required": ["a"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def live(tmp_path_factory, tiny_gguf, tiny_draft_gguf):
    pair = tiny_tool_pair(tmp_path_factory.mktemp("nowhere"), tiny_gguf, tiny_draft_gguf, context=256)
    with serving(pair, GenerateSettings(draft=DraftChoice.MODEL, policy=PolicyChoice("fixed", 3))) as live:
        yield live


def post(live, **fields) -> httpx.Response:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "a pet"}], "max_tokens": 64, **fields}
    return httpx.post(live.url + "/chat/completions", json=body, timeout=120)


def as_format(schema) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}


def named_tool(schema) -> dict:
    tool = {"type": "function", "function": {"name": "rec", "parameters": schema}}
    return {"tools": [tool], "tool_choice": {"type": "function", "function": {"name": "rec"}}}


def error_400(response: httpx.Response, param: str) -> str:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and "\n" not in error["message"]
    return error["message"]


@pytest.mark.parametrize("schema, said", [s for s in NOWHERE if isinstance(s[0], dict)])
def test_serve_refuses_a_schema_that_leads_nowhere_before_queueing(live, generations, schema, said):
    assert said in error_400(post(live, response_format=as_format(schema)), "response_format")
    assert said in error_400(post(live, **named_tool(schema)), "tools")
    assert not generations


@pytest.mark.parametrize(
    "schema, strict, said",
    [
        (DEEP_OBJECT, True, "deeper than 100 levels"),
        (deep(SCHEMA_LEVELS), None, "deeper than 100 levels"),
        pytest.param(HUGE, None, "beyond", marks=pytest.mark.heavy),  # seconds: the engine builds it to fail
    ],
)
def test_serve_refuses_a_schema_too_deep_or_too_large_before_queueing(live, generations, schema, strict, said):
    """A schema too deep for the grammar engine, in a body the server reads, is refused naming
    response_format before any walk in Python (strict mode's, json.dumps) meets its depth."""
    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": strict}}
    assert said in error_400(post(live, response_format=fmt), "response_format")
    assert not generations


# -- while decoding: a dead end is an error ---------------------------------------------------------


class EndsAfter:
    """A constraint that allows anything for `n` tokens, then only the end, and never matches."""

    busy_s = 0.0

    def __init__(self, n_vocab: int, eos: int, n: int):
        self.n_vocab, self.eos, self.n, self.consumed = n_vocab, eos, n, 0

    def allowed(self) -> np.ndarray:
        mask = np.zeros(self.n_vocab, dtype=bool)
        mask[[self.eos] if self.consumed >= self.n else [i for i in range(self.n_vocab) if i != self.eos]] = True
        return mask

    def advance(self, token_id: int) -> bool:
        self.consumed += 1
        return True

    def rollback(self, n: int) -> None:
        self.consumed -= n

    def allowed_prefix(self, tokens) -> int:
        return max(0, min(len(tokens), self.n - self.consumed))

    def forced(self) -> list[int]:
        return []

    def done(self) -> bool:
        return self.consumed >= self.n

    def accepting(self) -> bool:
        return False


@pytest.mark.parametrize("n", [0, 5])
def test_the_decoder_raises_where_the_constraint_allows_only_the_end_of_an_incomplete_reply(n):
    target = MarkovBackend(seed=3, eos=47)
    decoder = SpeculativeDecoder(target, FixedK(0, "none"), [])
    events = decoder.generate([1, 2, 3], 40, SamplingParams(temperature=0.0), constraint=EndsAfter(48, 47, n))
    with pytest.raises(ConstraintDeadEnd, match=f"after {n} tokens it allows only the end"):
        list(events)


@pytest.fixture
def unchecked(monkeypatch):
    """No check before decoding: the reply meets the dead end the checks would have refused."""
    for module in (guidance, response_format, tool_calls):
        monkeypatch.setattr(module, "check", lambda spec: None)


def test_run_ends_a_reply_at_a_dead_end_with_exit_1(tiny_cli_home, unchecked):
    path = tiny_cli_home / "schema.json"
    path.write_text(json.dumps(ENDLESS))
    r = invoke("run", "a pet", "--raw", "--json-schema", str(path), "--temperature", "0", "--max-tokens", "50")
    assert "the constraint leads nowhere" in one_line_error(r, 1)
    assert r.stdout == "{\n"  # what was written stays written


def test_serve_answers_a_dead_end_with_an_error_whole_and_streamed(live, unchecked):
    error = post(live, response_format=as_format(ENDLESS))
    assert error.status_code == 500 and error.json()["error"]["code"] == "constraint_dead_end", error.text
    client = openai.OpenAI(base_url=live.url, api_key="unused", max_retries=0, timeout=60)
    fields = dict(model="tiny", messages=[{"role": "user", "content": "a pet"}], max_tokens=64, stream=True)
    with pytest.raises(openai.APIError, match="the constraint leads nowhere"):
        list(client.chat.completions.create(**fields, response_format=as_format(ENDLESS)))


@pytest.mark.parametrize("stream", [False, True])
def test_a_named_tool_at_a_dead_end_is_an_error_not_its_markup_as_content(live, unchecked, stream):
    response = post(live, **named_tool(ENDLESS), stream=stream)
    if not stream:
        assert response.status_code == 500 and response.json()["error"]["code"] == "constraint_dead_end"
        return
    events = [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data: {")]
    assert events[-1]["error"]["code"] == "constraint_dead_end"
    sent = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))
    assert "<tool_call>" not in sent and not any(e["choices"][0].get("finish_reason") for e in events[:-1])


def test_the_end_after_a_match_llguidance_has_stopped_rolls_back_in_step(tiny_engine_tokenizer):
    """llguidance consumes nothing once a match is complete; a draft's end after the forced text
    that completes it must still count as a token, or rolling the chain back undoes one too many."""
    tokenizer, eos = tiny_engine_tokenizer
    matcher = GuidanceMatcher(tokenizer, grammar_of(ConstraintSpec.json_schema({"const": "ab"})))
    for token in tokenizer.tokenize_str('"ab"'):
        assert matcher.advance(token)
    assert matcher.done() and matcher.accepting()
    before = matcher.allowed().copy()
    assert matcher.advance(eos)
    matcher.rollback(2)
    assert matcher.advance(tokenizer.tokenize_str('"ab"')[-1]) and (matcher.allowed() == before).all()


@pytest.fixture(scope="module")
def tiny_engine_tokenizer(tiny_gguf):
    from edgespec.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend(tiny_gguf, 64, threads=1)
    try:
        yield guidance.guidance_tokenizer(backend), min(backend.eos_ids)
    finally:
        backend.close()
