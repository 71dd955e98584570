"""`edgespec chat`: the click command that loads the pair and opens the app (registered in cli/main.py).

Piped stdin becomes the first message (`git diff | edgespec chat -s "review this"`); the app then
reads keys from the terminal, reopened as /dev/tty onto file descriptor 0, where Textual reads.
Textual draws on stderr, so stdout may be redirected; stderr may not.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

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
from edgespec.engine.engine_thread import EngineThread
from edgespec.util.errors import UsageError
from edgespec.util.text_check import check_text

if TYPE_CHECKING:
    from edgespec.engine.options import CheckedOptions, EngineOptions


def _reopen_terminal() -> None:
    """Point fd 0 back at the terminal after stdin was read to the end from a pipe."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        raise UsageError(
            "stdin is a pipe and there is no terminal (/dev/tty) to chat in; `edgespec run` prints a reply to a pipe"
        ) from None
    os.dup2(fd, 0)
    os.close(fd)


def _require_terminal() -> None:
    # Textual draws on stderr (sys.__stderr__), so that is the stream that must be a terminal.
    if sys.__stderr__ is None or not sys.__stderr__.isatty():
        raise UsageError(
            "chat draws on the terminal through stderr, which is redirected; `edgespec run` prints a reply to a pipe"
        )


@click.command("chat")
@pair_options
@decoding_options
@click.option("-s", "--system", default=None, help="System prompt for a new chat (replaces a resumed chat's).")
@click.option(
    "--resume",
    "resume",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[ID]",
    help="Reopen a saved chat: the most recent, or the one with this id (see ctrl+o in the app).",
)
@click.option("--max-tokens", type=click.IntRange(min=1), default=512, show_default=True, help="Most tokens per reply.")
@click.option(
    "--read-ahead/--no-read-ahead",
    default=True,
    show_default=True,
    help="Read the next prompt while the message is written (the CPU works as you type; replies are the same).",
)
@json_options
@cache_option
@history_options
@error_boundary
@opens_engine(repository=True)
def chat(system, resume, read_ahead, json_object, json_schema, options: EngineOptions):
    """Chat in the terminal; every token shows whether the draft or the target wrote it.

    Keys: enter send · shift+enter/ctrl+j newline · esc stop · ctrl+n new chat · ctrl+r regenerate ·
    F2 details · F3 markdown · F4 rejected drafts · ctrl+o saved chats · ctrl+p commands · ctrl+q quit.

    Each reply's state is saved to the prompt cache, so a resumed chat reads only what is new.
    """
    from edgespec.tui.chat_store import ChatStore  # the chat app imports Textual: only when it runs

    check_text(system, "--system")
    options = replace(options, constraint=json_constraint(json_object, json_schema))  # every reply decodes under it
    store = ChatStore()
    conversation = None
    if resume is not None:
        conversation = store.load(resume) if resume else store.latest()
        # keep talking to the model that wrote the chat
        options = replace(options, pair=options.pair or conversation.pair or None)
    checked = options.check()
    first_message = None
    piped = read_stdin(checked.pair.context)
    if piped is not None:
        first_message = piped.strip() or None
        _reopen_terminal()
    _require_terminal()
    click.echo("edgespec: loading the model pair…", err=True)
    _run_app(checked, system, conversation, first_message, store, read_ahead)


def _run_app(
    checked: CheckedOptions, system, conversation, first_message: str | None, store, read_ahead: bool = True
) -> None:
    """Open the engine on its own thread (`EngineThread`: it loads the engine and runs every reply),
    run the app until the user quits, then say what could not be saved."""
    from edgespec.tui.app import ChatApp  # Textual: only when the chat runs

    engine_thread = EngineThread()
    try:
        engine, settings = engine_thread.call(checked.open)
        try:
            app = ChatApp(
                engine,
                settings,
                system=system,
                conversation=conversation,
                first_message=first_message,
                store=store,
                engine_thread=engine_thread,
                read_ahead=read_ahead,
            )
            app.run()
            for line in app.unsaved_lines:
                click.echo(f"edgespec: warning: {line}", err=True)
        finally:
            engine_thread.call(engine.close)
    finally:
        engine_thread.shutdown()
