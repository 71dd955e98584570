"""`edgespec run`: a reply to a prompt and piped stdin, streamed to stdout.

Unix contract: stdout carries only the model's text, streamed; stats, progress and errors go to
stderr; exit 0 ok, 1 runtime error, 2 usage error, 130 on Ctrl-C (partial output flushed), 143 on
SIGTERM, 129 on SIGHUP. A reader that closes the pipe early ends the reply quietly with exit 1, the
stats still written; any other failure to write stdout is one line and exit 1 (edgespec.util.stdout).

With --json or --json-schema, stdout is exactly one JSON document (on one line) that parses and
matches the schema: decoding is constrained to it (`edgespec.constraints`). A schema that cannot be
read, or that asks for what the engine cannot enforce, is a usage error before anything loads; a
reply cut before its document is complete (--max-tokens, the context) is an error, exit 1.
"""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from edgespec.cli.common import (
    cache_option,
    decoding_options,
    error_boundary,
    history_options,
    json_constraint,
    json_options,
    opens_engine,
    pair_options,
    read_stdin,
)
from edgespec.decoding.drafters import FROM_ELSEWHERE
from edgespec.decoding.events import Source, Step, Summary, Token
from edgespec.engine.stats_line import stats_line
from edgespec.util.errors import EdgespecError, UsageError
from edgespec.util.output_files import check_writable, write_or_rescue
from edgespec.util.stdout import PipeClosed, check_open, text_only
from edgespec.util.text_check import check_text

if TYPE_CHECKING:
    from edgespec.engine.options import EngineOptions

# Styles that read without colour too: corrections are underlined, bonus tokens bold.
TOKEN_STYLES: dict[Source, dict[str, Any]] = {  # click.style's keyword arguments
    Source.DRAFT: dict(fg="green"),
    Source.CORRECTION: dict(fg="red", underline=True),
    Source.BONUS: dict(fg="cyan", bold=True),
    Source.TARGET: dict(),
    Source.REPEATED: dict(fg="magenta"),  # the same request's earlier reply, served again from the history
}
COPIED_STYLE: dict[str, Any] = dict(fg="magenta")  # accepted drafts copied from earlier calls or the repository


def compose_message(stdin_text: str | None, prompt: str | None) -> str:
    """stdin, a blank line, then the prompt: `cat app.py | edgespec run "add type hints"`."""
    parts = [p for p in (stdin_text.rstrip("\n") if stdin_text else None, prompt) if p and p.strip()]
    if not parts:
        raise UsageError("nothing to do: give a PROMPT or pipe text on stdin (see `edgespec run --help`)")
    return "\n\n".join(parts)


@click.command()
@click.argument("prompt", required=False)
@click.option("-s", "--system", default=None, help="System message.")
@pair_options
@decoding_options
@click.option(
    "--max-tokens",
    type=click.IntRange(min=0),
    default=512,
    show_default=True,
    help="0: only read the input into the prompt cache, so that the next call on it reads only the rest.",
)
@click.option("--raw", is_flag=True, help="Plain completion of the text, without the chat template.")
@json_options
@click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="Colour tokens by source: green = accepted draft, red underlined = correction, bold cyan = bonus, "
    "magenta = copied from earlier calls (or a reply served again).",
)
@click.option("--stats", is_flag=True, help="One line of speed and acceptance figures on stderr.")
@click.option(
    "--stats-json",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write the generation summary as JSON to this file.",
)
@cache_option
@history_options
@error_boundary
@opens_engine(repository=True)
def run(prompt, system, raw, json_object, json_schema, color, stats, stats_json, options: EngineOptions):
    """Generate a reply to PROMPT (and/or piped stdin) and stream it to stdout.

    Piped text comes first and the PROMPT after it, so asking another thing about the same input
    finds it in the prompt cache and reads only the new instruction (see --no-cache)."""
    check_open()
    text_only()  # what llama.cpp prints, an abort's backtrace included, goes to stderr
    check_text(prompt, "PROMPT")
    check_text(system, "--system")
    if raw and system:
        raise UsageError("--system has no meaning with --raw (no chat template)")
    checked = replace(options, constraint=json_constraint(json_object, json_schema)).check()
    if options.max_tokens == 0 and checked.cache is None:
        raise UsageError(
            "--max-tokens 0 reads the input into the prompt cache, which is off (--no-cache, or a cache budget of 0)"
        )
    text = compose_message(read_stdin(checked.pair.context), prompt)  # the pair's context bounds the read
    if stats_json:
        check_writable(stats_json, "--stats-json")
    engine, settings = checked.open()
    try:
        reply(engine, text, system, raw, settings, color, stats, stats_json)
    finally:
        engine.close()


def reply(
    engine, text: str, system: str | None, raw: bool, settings, color: str, stats: bool, stats_json: Path | None
) -> None:
    """Tokenize the input the way asked, check it fits, stream the reply, report the figures."""
    if raw:
        prompt_tokens = engine.target.tokenize(text, special=False)
    else:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        prompt_tokens = engine.chat_tokens(messages)
    if len(prompt_tokens) >= engine.n_ctx:
        raise UsageError(
            f"the input is {len(prompt_tokens)} tokens but pair {engine.pair.name!r} has a {engine.n_ctx}-token "
            "context; shorten it or pick a pair with a longer context"
        )
    if settings.max_tokens == 0:
        read_only(engine, prompt_tokens, stats)
        return
    colored = color == "always" or (color == "auto" and sys.stdout.isatty())
    stop = threading.Event()
    summary, closed = stream_to_stdout(engine.generate_tokens(prompt_tokens, settings, stop), colored, stop)
    if summary.stop_reason == "context" and settings.constraint is None:
        click.echo(f"edgespec: the reply was cut: the {engine.n_ctx}-token context is full", err=True)
    if stats:
        click.echo(stats_line(summary, engine.load_s), err=True)
    if stats_json:
        data = json.dumps({"pair": engine.pair.name, **summary.to_dict(), "load_s": engine.load_s}, indent=2) + "\n"
        write_or_rescue(stats_json, lambda tmp: tmp.write_text(data), "stats")
    if closed is not None:
        raise closed
    if settings.constraint is not None and summary.stop_reason != "eos":
        cut = {"length": "--max-tokens was reached", "context": f"the {engine.n_ctx}-token context is full"}
        reason = cut.get(summary.stop_reason, "it stopped")
        raise EdgespecError(f"the JSON document is incomplete: {reason} before it ended")


def read_only(engine, prompt_tokens: list[int], stats: bool) -> None:
    """`--max-tokens 0`: read the prompt's whole read chunks into the prompt cache (an editor's
    on-save hook warms the next call on the file); nothing is written on stdout."""
    reading = engine.read_ahead(prompt_tokens)
    if stats:
        click.echo(
            f"read {reading.read} tokens in {reading.seconds:.2f} s ({reading.cached} already cached); "
            f"{reading.ready} of the prompt's {reading.prompt_tokens} are ready for the next call",
            err=True,
        )


def stream_to_stdout(events, colored: bool, stop: threading.Event) -> tuple[Summary, PipeClosed | None]:
    """Write token text as it arrives; on Ctrl-C the partial output is flushed before exiting.
    When the reader closes the pipe, `stop` ends the generation (within one target pass) and its
    Summary still comes: the reply's figures, and the PipeClosed to end the command with."""
    out = sys.stdout
    summary = Summary()
    wrote = ""
    closed = None
    copying = False  # the latest Step's drafter copied from earlier calls or the repository
    try:
        for event in events:
            if isinstance(event, Step):  # before the tokens it gave
                copying = event.drafter in FROM_ELSEWHERE
            elif isinstance(event, Token):
                if event.text and closed is None:
                    copied = copying and event.source is Source.DRAFT
                    style = (COPIED_STYLE if copied else TOKEN_STYLES[event.source]) if colored else None
                    try:
                        out.write(click.style(event.text, **style) if style else event.text)
                        out.flush()
                    except PipeClosed as e:
                        closed = e
                        stop.set()
                    wrote = event.text
            elif isinstance(event, Summary):
                summary = event
    finally:
        if wrote and not wrote.endswith("\n") and closed is None:
            out.write("\n")
        out.flush()
    return summary, closed
