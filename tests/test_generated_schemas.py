"""Generated schemas (issue 38, "Also wanted"): Hypothesis writes recursive, huge, deep,
contradictory and odd schemas, and each goes through what `run --json-schema` and a request's
`response_format` do before anything loads. Both paths agree, and each schema is refused in one
line or compiles. The tiny GGUF model (its real tokenizer, random weights, sampling) then writes a
reply under each one that compiles: a reply that ends as a success (what `run` exits 0 with)
parses and validates against the schema (jsonschema), one at a dead end is an error, and no
other outcome than these and the token budget exists.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.cli.common import json_constraint
from edgespec.constraints.guidance import ConstraintError
from edgespec.constraints.response_format import ResponseFormat, format_constraint
from edgespec.decoding.constraint import ConstraintDeadEnd
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Summary, Token
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.util.errors import UsageError

SCHEMAS = 1000
DEFS = ("d0", "d1", "d2")
NAMES = st.sampled_from(["a", "b", "c", "name", "x/y", "~n"])
SMALL = st.integers(-3, 12)

leaves = st.one_of(
    st.booleans(),
    st.builds(lambda lo, hi: {"type": "integer", "minimum": lo, "maximum": hi}, SMALL, SMALL),
    st.builds(lambda lo, hi: {"type": "string", "minLength": lo, "maxLength": hi}, st.integers(0, 3), SMALL),
    st.sampled_from([{"type": "boolean"}, {"type": "null"}, {"type": "number"}, {}, {"type": "object"}]),
    st.builds(lambda values: {"enum": values}, st.lists(st.one_of(SMALL, NAMES, st.none()), max_size=3)),
    st.builds(lambda value: {"const": value}, st.one_of(SMALL, NAMES)),
    st.builds(lambda name: {"$ref": f"#/$defs/{name}"}, st.sampled_from(DEFS)),
    # odd: what llguidance cannot enforce, or no schema at all
    st.sampled_from([{"not": {}}, {"type": "string", "format": "nope"}, {"type": []}, {"$ref": "#/nowhere"}]),
)


def _object(properties: dict, required: list, extra) -> dict:
    schema = {"type": "object", "properties": properties, "required": required}
    return schema if extra is None else schema | {"additionalProperties": extra}


def composites(children):
    return st.one_of(
        st.builds(
            _object,
            st.dictionaries(NAMES, children, max_size=3),
            st.lists(NAMES, max_size=2, unique=True),
            st.sampled_from([None, False, True]),
        ),
        st.builds(
            lambda items, least, most: {"type": "array", "items": items, "minItems": least, "maxItems": most},
            children,
            st.integers(0, 2),
            st.integers(0, 3),
        ),
        st.builds(lambda branches: {"anyOf": branches}, st.lists(children, max_size=3)),
        st.builds(lambda branches: {"allOf": branches}, st.lists(children, min_size=1, max_size=2)),
    )


subschemas = st.recursive(leaves, composites, max_leaves=12)


@st.composite
def schemas(draw) -> dict | bool:
    """A schema with definitions that may refer to each other and to themselves, sometimes with
    hundreds of properties or nested around the depth limit."""
    shape = draw(st.sampled_from(["plain"] * 8 + ["huge", "deep"]))
    body = draw(subschemas)
    if shape == "huge":
        n = draw(st.integers(50, 400))
        body = _object({f"p{i}": {"type": "integer"} for i in range(n)}, [f"p{i}" for i in range(0, n, 7)], False)
    elif shape == "deep":
        for _ in range(draw(st.integers(90, 110))):
            body = {"type": "array", "items": body}
    if not isinstance(body, dict) or draw(st.booleans()):
        return body
    return {**body, "$defs": {name: draw(subschemas) for name in DEFS}}


@pytest.fixture(scope="module")
def tiny(tiny_gguf) -> Engine:
    pair = PairConfig("tiny", "llamacpp", ModelSpec("t", "gguf"), None, "none", 256)
    engine = Engine(pair, LlamaCppBackend(tiny_gguf, 256, threads=1), None)
    yield engine
    engine.close()


def verdict_of_run(folder: Path, text: str):
    """What `run --json-schema FILE` makes of `text` before loading: the constraint, or the line."""
    path = folder / "schema.json"
    path.write_text(text)
    try:
        return json_constraint(False, path)
    except UsageError as e:
        return str(e)


def verdict_of_request(schema: dict | bool):
    """What a request's `response_format` makes of it before queueing: the constraint, or the line."""
    fmt = ResponseFormat.model_validate({"type": "json_schema", "json_schema": {"name": "g", "schema": schema}})
    try:
        return format_constraint(fmt)
    except ConstraintError as e:
        return str(e)


@pytest.mark.heavy
def test_generated_schemas_are_refused_in_one_line_or_compile_and_replies_end_whole_or_fail(tiny):
    outcomes: Counter[str] = Counter()
    folder = Path(tempfile.mkdtemp(prefix="schemas-"))
    prompt = tiny.target.tokenize("a document:", special=False)

    @settings(max_examples=SCHEMAS, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(schema=schemas(), seed=st.integers(0, 2**16))
    def one(schema, seed):
        by_run = verdict_of_run(folder, json.dumps(schema))
        if isinstance(schema, dict):  # a request's schema is an object (its pydantic model says so)
            by_request = verdict_of_request(schema)
            assert isinstance(by_run, str) == isinstance(by_request, str), (by_run, by_request)
        if isinstance(by_run, str):
            assert by_run and "\n" not in by_run, by_run
            outcomes["refused"] += 1
            return
        settings = GenerateSettings(48, SamplingParams(temperature=1.0, seed=seed), DraftChoice.NONE, constraint=by_run)
        try:
            events = list(tiny.generate_tokens(list(prompt), settings))
        except ConstraintDeadEnd:
            outcomes["dead end"] += 1
            return
        summary = events[-1]
        assert isinstance(summary, Summary) and summary.stop_reason in ("eos", "length"), summary.stop_reason
        if summary.stop_reason == "eos":  # `run` exits 0: the document is whole and valid
            document = json.loads("".join(e.text for e in events if isinstance(e, Token)))
            try:
                jsonschema.Draft202012Validator(schema).validate(document)
            except RecursionError:  # a $ref back to itself on the same value: jsonschema loops
                outcomes["unjudged"] += 1
                return
        outcomes[summary.stop_reason] += 1

    one()
    assert sum(outcomes.values()) >= SCHEMAS, outcomes
    assert min(outcomes[k] for k in ("refused", "eos", "length")) >= 50, outcomes
