"""`edgespec bench` on structured suites: a suite line's `response_format` is checked before any model
loads, every mode decodes under it, and each reply is parsed and validated against it (a reply that
does not is counted, named, and fails `--strict`); and the shipped structured suite."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.bench import report, tables
from edgespec.bench.modes import parse_modes, run_bench, strict_failure
from edgespec.bench.suites import BenchPrompt, load_suite
from edgespec.constraints.guidance import ConstraintSpec
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import Engine
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.util.errors import UsageError

STRUCTURED = Path(__file__).resolve().parents[1] / "suites" / "structured.jsonl"

PET = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "kind": {"enum": ["cat", "dog", "bird"]},
        "legs": {"type": "integer", "minimum": 0, "maximum": 8},
    },
    "required": ["name", "kind", "legs"],
    "additionalProperties": False,
}
PET_FORMAT = {"type": "json_schema", "json_schema": {"name": "pet", "strict": True, "schema": PET}}


def line(response_format: object, **fields) -> str:
    return json.dumps(
        {"id": "s/1", "suite": "s", "mode": "completion", "prompt": "a pet:", "response_format": response_format}
        | fields
    )


def write_suite(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "suite.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# -- the suite line ---------------------------------------------------------------------------------


def test_a_response_format_becomes_the_prompts_constraint(tmp_path):
    path = write_suite(tmp_path, line(PET_FORMAT), line({"type": "json_object"}, id="s/2"), line(None, id="s/3"))
    schema, any_object, plain = load_suite(path)
    assert schema.constraint == ConstraintSpec.json_schema(PET)
    assert any_object.constraint == ConstraintSpec("json_object")
    assert plain.constraint is None


@pytest.mark.parametrize(
    "response_format, named",
    [
        # what llguidance cannot enforce, named as it names it
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "format": "foo"}}},
            "cannot be enforced: ",
        ),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {"type": "string"}}}}, '"not"'),
        # what jsonschema could not check the replies against
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strin"}}},
            "not a valid JSON schema: ",
        ),
        ({"type": "json_schema"}, "needs the field 'json_schema'"),
        ({"type": "json_object", "json_schema": {"name": "x", "schema": {}}}, "goes with type 'json_schema' only"),
        ({"type": "yaml"}, "'text', 'json_object' or 'json_schema'"),
        ({"type": "json_object", "strict": True}, "strict"),  # a misplaced key is not ignored
        # OpenAI's strict-mode rules, as serve applies them
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}, "strict": True}},
            "(strict): at the root, 'additionalProperties' must be given and be false",
        ),
        ({"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}, "name"),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, "schema"),
        ("json", "response_format"),
    ],
)
def test_a_response_format_that_cannot_be_enforced_is_refused_in_one_line(tmp_path, response_format, named):
    path = write_suite(tmp_path, line(PET_FORMAT), line(response_format, id="s/2"))
    with pytest.raises(UsageError) as e:
        load_suite(path)
    message = str(e.value)
    assert message.startswith(f"{path}:2: response_format") and named in message, message
    assert "\n" not in message


def test_the_bench_command_refuses_a_bad_schema_before_any_model_loads(tmp_path, monkeypatch):
    from edgespec.cli import main as cli
    from edgespec.engine import loading

    def no_load(*args, **kwargs):
        raise AssertionError("a model loaded")

    monkeypatch.setattr(loading, "load_engine", no_load)
    bad = {"type": "json_schema", "json_schema": {"name": "when", "schema": {"type": "string", "format": "foo"}}}
    write_suite(tmp_path, line(bad))
    r = CliRunner().invoke(cli.main, ["bench", "--suite", str(tmp_path / "suite.jsonl"), "--modes", "ar,ngram-k2"])
    assert r.exit_code == 2, (r.output, r.exception)
    assert r.stderr.count("\n") == 1 and "suite.jsonl:1: response_format: " in r.stderr and "format" in r.stderr


def test_hf_assisted_is_refused_for_a_prompt_under_a_response_format():
    from edgespec.bench.modes import check_prompts

    prompts = [BenchPrompt("s/1", "s", "completion", 8, prompt="x", constraint=ConstraintSpec("json_object"))]
    with pytest.raises(UsageError, match="hf-assisted cannot decode under a response_format.*'s/1'"):
        check_prompts(parse_modes("ar,hf-assisted", "model"), prompts)
    check_prompts(parse_modes("ar,auto", "model"), prompts)


# -- the bench on a tiny pair ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_engine(tiny_gguf_factory) -> Iterator[Engine]:
    target = tiny_gguf_factory(seed=0)
    draft = tiny_gguf_factory(seed=1, like=0, similarity=0.8)
    pair = PairConfig("tiny", "llamacpp", ModelSpec("t", "gguf"), ModelSpec("d", "gguf"), "model", 512)
    engine = Engine(pair, LlamaCppBackend(target, 512, threads=1), LlamaCppBackend(draft, 512, threads=1))
    yield engine
    engine.close()


def test_every_mode_decodes_under_the_prompts_constraint_and_its_replies_are_checked(tiny_engine):
    prompts = [
        BenchPrompt(
            "pet/0",
            "structured",
            "completion",
            200,
            prompt="hello there the",
            constraint=ConstraintSpec.json_schema(PET),
        ),
        BenchPrompt(
            "obj/0", "structured", "completion", 200, prompt="in the", constraint=ConstraintSpec("json_object")
        ),
        BenchPrompt("plain/0", "plain", "completion", 20, prompt="on a real"),
    ]
    rows = run_bench([tiny_engine], prompts, parse_modes("ar,model-k3,ngram-k4,auto", "model"), SamplingParams())
    for r in rows:
        if r.suite == "structured":  # the tiny model writes no JSON unconstrained: these replies come from the mask
            assert r.valid is True and r.invalid_reason is None, (r.id, r.mode, r.invalid_reason)
        else:
            assert r.valid is None
        assert r.mode == "ar" or r.vs_ar == "exact"  # speculation under the mask is plain decoding under it
    assert sum(r.accepted for r in rows if r.suite == "structured") > 0
    summary = {(s["suite"], s["mode"]): s for s in report.summarize(rows)}
    assert summary["structured", "auto"]["replies"] == {"valid": 2, "invalid": 0}
    assert summary["plain", "auto"]["replies"] is None and summary["plain", "auto"]["constraint_share"] is None
    assert all(r.constraint_s > 0 for r in rows if r.suite == "structured")
    assert all(0 < summary["structured", m]["constraint_share"] < 1 for m in ("ar", "auto"))
    assert strict_failure(rows) is None


def test_a_reply_that_does_not_validate_is_counted_named_and_fails_strict(tiny_engine):
    # 6 tokens cannot hold a whole pet: every reply is cut before its document ends
    prompts = [
        BenchPrompt("pet/0", "structured", "completion", 6, prompt="in the", constraint=ConstraintSpec.json_schema(PET))
    ]
    rows = run_bench([tiny_engine], prompts, parse_modes("ar,auto", "model"), SamplingParams())
    for r in rows:
        assert r.valid is False and r.invalid_reason.startswith("not JSON (cut at max_tokens): "), r.invalid_reason
    summary = report.summarize(rows)
    assert [s["replies"] for s in summary] == [{"valid": 0, "invalid": 1}] * 2
    doc = json.loads(json.dumps(report.to_json(rows, summary, {})))
    assert all(x["valid"] is False and "cut at max_tokens" in x["invalid_reason"] for x in doc["rows"])

    from rich.console import Console

    console = Console(record=True, width=250)
    console.print(tables.table(summary, rows=rows))
    text = console.export_text()
    assert "valid" in text and "0/1" in text and "INVALID pet/0 auto: not JSON (cut at max_tokens)" in text
    assert "the constraint's matcher, share of those replies' time: ar structured " in text
    failure = strict_failure(rows)
    assert failure is not None and "2 replies do not match the response_format: pet/0 ar: not JSON" in str(failure)


def test_a_table_without_structured_prompts_has_no_valid_column(tiny_engine):
    rows = run_bench(
        [tiny_engine],
        [BenchPrompt("p", "s", "completion", 6, prompt="in the")],
        parse_modes("ar", "model"),
        SamplingParams(),
    )
    from rich.console import Console

    console = Console(record=True, width=250)
    console.print(tables.table(report.summarize(rows), rows=rows))
    assert "valid" not in console.export_text()


@pytest.mark.subprocess
def test_the_bench_command_reports_validity_in_json_and_strict(tiny_cli_home):
    from edgespec.cli import main as cli

    tmp_path = tiny_cli_home
    chat = [{"role": "user", "content": "a pet please"}]
    write_suite(
        tmp_path,
        line(PET_FORMAT, max_tokens=120),
        line({"type": "json_object"}, id="s/2", mode="chat", messages=chat, prompt=None, max_tokens=120),
    )
    out = tmp_path / "out.json"
    args = ["bench", "--suite", str(tmp_path / "suite.jsonl"), "--modes", "ar,auto", "--strict", "--json", str(out)]
    r = CliRunner().invoke(cli.main, args)
    assert r.exit_code == 0, (r.output, r.exception)
    doc = json.loads(out.read_text())
    assert [(x["id"], x["mode"], x["valid"]) for x in doc["rows"]] == [
        (i, m, True) for i in ("s/1", "s/2") for m in ("ar", "auto")
    ]
    assert [s["replies"] for s in doc["summary"]] == [{"valid": 2, "invalid": 0}] * 2
    assert "valid" in r.stdout

    write_suite(tmp_path, line(PET_FORMAT, max_tokens=4))  # cut: no reply can be whole
    r = CliRunner().invoke(cli.main, args)
    assert r.exit_code == 1
    (error,) = [x for x in r.stderr.splitlines() if x.startswith("edgespec: error: ")]
    assert "2 replies do not match the response_format: s/1 ar: not JSON (cut at max_tokens)" in error


# -- the shipped structured suite ---------------------------------------------------------------------


def _schemas(schema: object) -> Iterator[dict]:
    """Every (sub)schema of `schema`."""
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from _schemas(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _schemas(value)


def _nested(schema: dict) -> bool:
    """An object holding an object, or an array of objects."""
    return any(
        sub.get("type") == "object"
        and any(p.get("type") in ("object", "array") for p in sub.get("properties", {}).values())
        for sub in _schemas(schema)
    )


def _tool_call(schema: dict) -> bool:
    """OpenAI's tool call shape: a constant function name and an arguments object."""
    props = schema.get("properties", {})
    return "const" in props.get("name", {}) and props.get("arguments", {}).get("type") == "object"


def test_the_structured_suite_holds_every_kind_of_structured_prompt():
    prompts = load_suite(STRUCTURED)
    assert len(prompts) >= 12 and len({p.id for p in prompts}) == len(prompts)
    assert all(p.constraint is not None and p.max_tokens <= 160 for p in prompts)  # a few minutes per mode
    schemas = [json.loads(p.constraint.text) for p in prompts if p.constraint.kind == "json_schema"]
    assert sum(p.constraint.kind == "json_object" for p in prompts) >= 2
    assert sum(map(_tool_call, schemas)) >= 3
    assert sum(any("enum" in sub for sub in _schemas(s)) for s in schemas) >= 4
    assert sum(map(_nested, schemas)) >= 4
    # the suite is fresh: no prompt of the dev set
    dev = {
        m["content"]
        for p in load_suite(Path(__file__).resolve().parents[1] / "edgespec/data/dev.jsonl")
        if p.messages
        for m in p.messages
    }
    assert not dev & {m["content"] for p in prompts for m in p.messages}
