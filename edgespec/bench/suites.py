"""Bench suites: JSONL prompts (a completion or a chat, with a token budget, and optionally a
`response_format` every mode decodes under, see structured_suite.py), each line read and checked before
any model loads, and the selection `--limit` / `--suites` make of them."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from edgespec.bench.jsonl import first_problem, json_objects
from edgespec.bench.structured_suite import CheckedFormat
from edgespec.constraints.guidance import ConstraintSpec
from edgespec.constraints.response_format import format_constraint
from edgespec.util.errors import UsageError
from edgespec.util.text_check import context_bytes, text_problem

DEV_SET = Path(str(files("edgespec") / "data" / "dev.jsonl"))  # the development set shipped with edgespec


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    suite: str
    mode: str  # "completion" | "chat"
    max_tokens: int
    prompt: str | None = None
    messages: tuple[dict, ...] | None = None
    constraint: ConstraintSpec | None = None  # what every mode's reply must match, and is checked against


# A suite is read whole; the bound keeps a wrong file (a disk image, a log) from filling memory. A
# suite this size would take days to bench.
SUITE_BYTES = 64 << 20


def load_suite(path: Path, context: int | None = None) -> list[BenchPrompt]:
    """Read and check a JSONL suite, every line before any model loads; a bad line is a one-line
    error naming the file, the line and the field. `context`: the smallest context (tokens) of the
    pairs to run, which every prompt must be able to fit (`text_check.context_bytes`)."""
    prompts = []
    for n, fields in json_objects(path, SUITE_BYTES):
        try:
            prompt = _prompt(SuiteLine.model_validate(fields))
        except ValidationError as e:
            raise UsageError(f"{path}:{n}: {first_problem(e)}") from None
        if context is not None and (size := _text_bytes(prompt)) > context_bytes(context):
            raise UsageError(
                f"{path}:{n}: the {prompt.mode} text is {size:,} bytes, more than the pair's context "
                f"of {context:,} tokens can hold"
            )
        prompts.append(prompt)
    if not prompts:
        raise UsageError(f"suite file {path} has no prompts")
    return prompts


def _text(value: object) -> object:
    """Text as `text_check` says it, before pydantic's own check (which says less)."""
    problem = text_problem(value) if isinstance(value, str) else None
    if problem:
        raise ValueError(problem)
    return value


def _number_as_text(value: object) -> object:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _not_blank(value: str) -> str:
    """A prompt or a turn of only whitespace gives the model nothing to answer, as `run` says of
    blank input."""
    if not value.strip():
        raise ValueError("is empty or only whitespace")
    return value


# Text that reaches the tokenizer or the terminal: a lone surrogate ("\ud800" in JSON) is refused here.
Text = Annotated[str, BeforeValidator(_text)]
Prompt = Annotated[str, AfterValidator(_not_blank), BeforeValidator(_text)]
Id = Annotated[str, BeforeValidator(_text), BeforeValidator(_number_as_text)]  # "HumanEval/0", or 7


class SuiteMessage(BaseModel):
    model_config = ConfigDict(strict=True)

    role: Literal["system", "user", "assistant"]
    content: Prompt


class SuiteLine(BaseModel):
    """One line of a suite as written; unknown keys (`split`) are ignored. Strict: a number is not
    text, nor true a count."""

    model_config = ConfigDict(strict=True)

    id: Id
    suite: Text
    mode: Literal["completion", "chat"]
    max_tokens: int = Field(256, ge=1)
    prompt: Prompt | None = None
    messages: Annotated[list[SuiteMessage], Field(min_length=1)] | None = None
    response_format: CheckedFormat | None = None

    @model_validator(mode="after")
    def _has_its_modes_input(self) -> SuiteLine:
        if self.mode == "completion" and self.prompt is None:
            raise ValueError('mode "completion" needs a "prompt"')
        if self.mode == "chat" and self.messages is None:
            raise ValueError('mode "chat" needs "messages"')
        return self


def _prompt(line: SuiteLine) -> BenchPrompt:
    messages = (
        tuple(m.model_dump() for m in line.messages) if line.mode == "chat" and line.messages is not None else None
    )
    return BenchPrompt(
        line.id,
        line.suite,
        line.mode,
        line.max_tokens,
        prompt=line.prompt if line.mode == "completion" else None,
        messages=messages,
        constraint=format_constraint(line.response_format),
    )


def _text_bytes(prompt: BenchPrompt) -> int:
    texts: list[str] = [m["content"] for m in prompt.messages or ()]  # a chat prompt's
    if prompt.prompt is not None:  # a completion prompt's
        texts.append(prompt.prompt)
    return sum(len(t.encode("utf-8")) for t in texts)


def select(prompts: list[BenchPrompt], limit: int | None, suites: str | None) -> list[BenchPrompt]:
    """The first `limit` prompts of each suite, of the suites named (comma-separated) if any."""
    wanted = {s.strip() for s in suites.split(",")} if suites else None
    if wanted:
        unknown = wanted - {p.suite for p in prompts}
        if unknown:
            raise UsageError(f"no suite named {', '.join(sorted(unknown))} in the file")
    taken: dict[str, int] = {}
    out = []
    for p in prompts:
        if (wanted is None or p.suite in wanted) and (limit is None or taken.get(p.suite, 0) < limit):
            taken[p.suite] = taken.get(p.suite, 0) + 1
            out.append(p)
    return out
