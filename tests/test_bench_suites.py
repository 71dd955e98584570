"""`edgespec bench`'s suite files: the JSONL format, its one-line errors, and the prompts chosen from it."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pytest

from edgespec.bench import suites
from edgespec.bench.suites import BenchPrompt, load_suite
from edgespec.util.errors import UsageError
from edgespec.util.text_check import MAX_TOKEN_BYTES

DEV_SET = Path("/work/shared/bench/dev.jsonl")


SHIPPED = Path(str(files("edgespec") / "data" / "dev.jsonl"))


# -- the suite file --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [SHIPPED, DEV_SET], ids=["shipped", "shared"])
def test_load_suite_reads_the_dev_set(path):
    if not path.exists():
        pytest.skip(f"{path} is not on this machine")
    prompts = load_suite(path)
    assert len(prompts) == sum(1 for line in path.read_text().splitlines() if line.strip())
    assert {p.suite for p in prompts} == {"humaneval", "mtbench", "code-edit"}
    for p in prompts:
        assert p.max_tokens > 0 and p.id
        if p.mode == "completion":
            assert isinstance(p.prompt, str) and p.prompt and p.messages is None
        else:
            assert p.mode == "chat" and p.prompt is None
            assert p.messages and all({"role", "content"} <= set(m) for m in p.messages)
    first = prompts[0]
    assert (first.id, first.suite, first.mode, first.max_tokens) == ("HumanEval/0", "humaneval", "completion", 256)
    assert first.prompt.startswith("from typing import List")
    assert {p.mode for p in prompts if p.suite == "code-edit"} == {"chat"}


def test_the_shipped_suite_is_the_dev_set():
    if not DEV_SET.exists():
        pytest.skip(f"{DEV_SET} is not on this machine")
    assert load_suite(SHIPPED) == load_suite(DEV_SET)


GOOD_COMPLETION = '{"id": "a/1", "suite": "a", "mode": "completion", "prompt": "def f():", "max_tokens": 12}'


GOOD_CHAT = '{"id": "b/1", "suite": "b", "mode": "chat", "messages": [{"role": "user", "content": "hi"}]}'


def write_suite(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "suite.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_load_suite_skips_blank_lines_and_defaults_max_tokens(tmp_path):
    prompts = load_suite(write_suite(tmp_path, GOOD_COMPLETION, "", "   ", GOOD_CHAT))
    assert [p.id for p in prompts] == ["a/1", "b/1"]
    assert prompts[0] == BenchPrompt("a/1", "a", "completion", 12, prompt="def f():")
    assert prompts[1].max_tokens == 256 and prompts[1].messages == ({"role": "user", "content": "hi"},)


@pytest.mark.parametrize(
    "bad",
    [
        "{not json",
        "[1, 2]",
        "null",
        '"a string"',
        '{"suite": "a", "mode": "completion", "prompt": "x"}',  # no id
        '{"id": "a/2", "mode": "completion", "prompt": "x"}',  # no suite
        '{"id": "a/2", "suite": "a", "prompt": "x"}',  # no mode
        '{"id": "a/2", "suite": "a", "mode": "infill", "prompt": "x"}',
        '{"id": "a/2", "suite": "a", "mode": "completion", "messages": []}',  # completion without prompt
        '{"id": "a/2", "suite": "a", "mode": "chat", "prompt": "x"}',  # chat without messages
        '{"id": "a/2", "suite": "a", "mode": "completion", "prompt": "x", "max_tokens": "many"}',
    ],
)
def test_load_suite_rejects_a_bad_line_in_one_line_naming_file_and_line(tmp_path, bad):
    path = write_suite(tmp_path, GOOD_COMPLETION, "", bad, GOOD_CHAT)
    with pytest.raises(UsageError) as e:
        load_suite(path)
    message = str(e.value)
    assert message.startswith(f"{path}:3: ") and "\n" not in message


@pytest.mark.parametrize(
    "bad",
    [
        '{"id": "a/2", "suite": "a", "mode": "chat", "messages": "hello"}',
        '{"id": "a/2", "suite": "a", "mode": "chat", "messages": [{"role": "user"}]}',
        '{"id": "a/2", "suite": "a", "mode": "completion", "prompt": 42}',
        '{"id": "a/2", "suite": "a", "mode": "completion", "prompt": "x", "max_tokens": 0}',
    ],
)
def test_load_suite_rejects_wrongly_typed_fields(tmp_path, bad):
    with pytest.raises(UsageError, match=r":2: "):
        load_suite(write_suite(tmp_path, GOOD_COMPLETION, bad))


@pytest.mark.parametrize(
    "bad, field",
    [
        ('{"id": "a/2", "suite": "a", "mode": "completion", "prompt": ""}', "prompt"),
        ('{"id": "a/2", "suite": "a", "mode": "completion", "prompt": " \\n"}', "prompt"),
        (
            '{"id": "a/2", "suite": "a", "mode": "chat", "messages": [{"role": "user", "content": ""}]}',
            "messages[0].content",
        ),
        ('{"id": "a/2", "suite": "a", "mode": "chat", "messages": []}', "messages"),
        (
            '{"id": "a/2", "suite": "a", "mode": "chat", "messages": [{"role": "robot", "content": "x"}]}',
            "messages[0].role",
        ),
        ('{"id": "a/2", "suite": "a", "mode": "completion", "prompt": "x\\ud800"}', "prompt"),
        (
            '{"id": "a/2", "suite": "a", "mode": "chat", "messages": [{"role": "system", "content": "\\udfff"}, '
            '{"role": "user", "content": "hi"}]}',
            "messages[0].content",
        ),
        ('{"id": "a/2", "suite": "a\\ud800", "mode": "completion", "prompt": "x"}', "suite"),
        ('{"id": "a/2", "suite": "a", "mode": "completion", "prompt": "x", "max_tokens": true}', "max_tokens"),
    ],
)
def test_load_suite_names_the_line_and_the_field_a_model_would_fail_on(tmp_path, bad, field):
    """What the tokenizer, the chat template or the decoder would refuse after the pair loaded."""
    path = write_suite(tmp_path, GOOD_COMPLETION, bad)
    with pytest.raises(UsageError) as e:
        load_suite(path)
    assert str(e.value).startswith(f"{path}:2: {field}: ") and "\n" not in str(e.value)


def test_load_suite_refuses_a_prompt_no_context_of_the_pairs_can_hold(tmp_path):
    fits = json.dumps({"id": "a", "suite": "a", "mode": "completion", "prompt": "x" * (4 * MAX_TOKEN_BYTES)})
    too_long = json.dumps(
        {
            "id": "b",
            "suite": "a",
            "mode": "chat",
            "messages": [{"role": "user", "content": "x" * (4 * MAX_TOKEN_BYTES)}, {"role": "user", "content": "y"}],
        }
    )
    assert len(load_suite(write_suite(tmp_path, fits), context=4)) == 1
    path = write_suite(tmp_path, fits, too_long)
    with pytest.raises(UsageError) as e:
        load_suite(path, context=4)
    assert str(e.value) == (
        f"{path}:2: the chat text is {4 * MAX_TOKEN_BYTES + 1:,} bytes, more than the pair's "
        "context of 4 tokens can hold"
    )


def test_load_suite_reads_no_further_than_its_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(suites, "SUITE_BYTES", len(GOOD_COMPLETION))
    path = write_suite(tmp_path, GOOD_COMPLETION, GOOD_CHAT)
    with pytest.raises(UsageError, match=f"^suite file {path} is larger than {len(GOOD_COMPLETION)} bytes$"):
        load_suite(path)


def test_load_suite_rejects_a_line_nested_too_deeply(tmp_path):
    """json's decoder recurses per level: a RecursionError, not a ValueError (found by generated suites)."""
    with pytest.raises(UsageError, match=r":2: not JSON \(nested too deeply\)$"):
        load_suite(write_suite(tmp_path, GOOD_COMPLETION, "[" * 5000))


def test_load_suite_rejects_a_missing_or_empty_file(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        load_suite(tmp_path / "nope.jsonl")
    with pytest.raises(UsageError, match="no prompts"):
        load_suite(write_suite(tmp_path, "", " "))


def test_select_takes_the_first_n_of_each_suite_and_named_suites():
    prompts = [BenchPrompt(f"{s}/{i}", s, "completion", 8, prompt="x") for s in ("a", "b") for i in range(3)]
    assert [p.id for p in suites.select(prompts, 2, None)] == ["a/0", "a/1", "b/0", "b/1"]
    assert [p.id for p in suites.select(prompts, None, "b")] == ["b/0", "b/1", "b/2"]
    assert [p.id for p in suites.select(prompts, 1, " b , a ")] == ["a/0", "b/0"]
    with pytest.raises(UsageError, match="c"):
        suites.select(prompts, None, "a,c")
