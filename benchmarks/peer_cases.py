"""The prompts benchmarks/peer.py puts to every side, each read once as the token ids all of them get.

Bench suites (`--suite FILE[:SUITES]`, `dev` for the development set edgespec ships) and real files
with an instruction (`--file FILE[:LINES] INSTRUCTION`, a bare name from Python's standard library),
tokenized by edgespec's engine: its rendering of the chat template, or the plain text of a completion
prompt. A file also keeps its text (piped into `edgespec run` by `--whole-process`) and the rendered
prompt (which a peer's process tokenizes itself). Everything is read and checked before a model loads.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

FILE_MAX_TOKENS = 200  # a file's reply budget when --max-tokens is not given
STDLIB = Path(os.__file__).parent


class BadArgument(Exception):
    """A setting of the run that cannot work: one line, exit 2."""


@dataclass(frozen=True)
class Case:
    """One prompt as every side reads it: token ids, and for a file the text `edgespec run` is piped
    and the rendered prompt a peer's process reads."""

    id: str
    suite: str
    ids: list[int]
    max_tokens: int
    stdin: str | None = None  # a file's text (piped into `edgespec run`)
    instruction: str | None = None
    rendered: str | None = None  # the chat template's text of the prompt (a peer process tokenizes it)


def read_file_case(spec: str) -> tuple[str, str]:
    """'FILE[:LINES]' (a bare name is looked up in Python's standard library) -> (label, text)."""
    name, _, lines = spec.partition(":")
    path = Path(name) if Path(name).exists() else STDLIB / name
    if not path.is_file():
        raise BadArgument(f"--file {spec}: no such file (nor in {STDLIB})")
    text = path.read_text(encoding="utf-8")
    if lines:
        if not lines.isdigit():
            raise BadArgument(f"--file {spec}: LINES must be a number of lines")
        text = "".join(text.splitlines(keepends=True)[: int(lines)])
    return spec, text


def suite_prompts(spec: str, limit: int | None) -> list:
    """The prompts of 'FILE[:SUITES]' ('dev': the development set edgespec ships)."""
    from edgespec.bench import suites

    name, _, wanted = spec.partition(":")
    path = suites.DEV_SET if name == "dev" else Path(name)
    return suites.select(suites.load_suite(path), limit, wanted or None)


def read_inputs(args: argparse.Namespace) -> tuple[list, list[tuple[str, str, str]]]:
    """The suites' prompts and the files' (label, text, instruction), every one read and checked
    before any model loads."""
    prompts = [p for spec in args.suite for p in suite_prompts(spec, args.limit)]
    return prompts, [(*read_file_case(spec), instruction) for spec, instruction in args.file]


def cases(engine, args: argparse.Namespace, prompts: list, files: list[tuple[str, str, str]]) -> list[Case]:
    """Every prompt of the run, tokenized by the engine (its chat template, or plain text); a file
    as `edgespec run` reads it piped in, with the instruction."""
    from edgespec.bench.modes import prompt_ids
    from edgespec.cli.run import compose_message

    out = [Case(p.id, p.suite, prompt_ids(engine, p), args.max_tokens or p.max_tokens) for p in prompts]
    for label, text, instruction in files:
        messages = [{"role": "user", "content": compose_message(text, instruction)}]
        rendered = engine.target.chat_prompt(messages)
        ids = engine.target.tokenize(rendered, special=True)
        out.append(Case(label, "files", ids, args.max_tokens or FILE_MAX_TOKENS, text, instruction, rendered))
    return out
