"""What every command shares: the pair / drafter / sampling options and the error boundary.

`run`, `chat` and `bench` take the same flags with the same meaning; they are declared once here.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path
from typing import Callable

import click

from edgespec import interrupts
from edgespec.errors import EdgespecError, UsageError


def config_option(f: Callable) -> Callable:
    """--config (or $EDGESPEC_CONFIG): the user's models.toml."""
    return click.option(
        "--config",
        "config",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        envvar="EDGESPEC_CONFIG",
        help="User models.toml adding or overriding pairs (default: the platform config dir).",
    )(f)


def pair_options(f: Callable) -> Callable:
    """-m/--pair and --config."""
    f = click.option("-m", "--pair", "pair", default=None, help="Model pair from models.toml (default: the registry's default).")(f)
    return config_option(f)


def decoding_options(f: Callable) -> Callable:
    """--draft, --k and the sampling flags; unset sampling flags fall back to the pair's defaults."""
    opts = [
        click.option("--draft", type=click.Choice(["auto", "model", "ngram", "none"]), default="auto", show_default=True,
                     help="Drafter: the draft model, n-gram lookup in the context, none (plain decoding), or auto."),
        click.option("--k", "k", default="auto", show_default=True,
                     help="Draft length: auto (cost-aware controller), heuristic (+2/-1), or a fixed number."),
        click.option("--temperature", type=click.FloatRange(min=0.0), default=None, help="0 = greedy."),
        click.option("--top-p", type=click.FloatRange(0.0, 1.0, min_open=True), default=None),
        click.option("--top-k", type=click.IntRange(min=0), default=None),
        click.option("--min-p", type=click.FloatRange(0.0, 1.0), default=None),
        click.option("--seed", type=int, default=None, help="Seed for sampling (reproducible output)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def _report(message: str) -> None:
    click.echo(f"edgespec: error: {message}", err=True)


def error_boundary(f: Callable) -> Callable:
    """Turn EdgespecError into one line on stderr and its exit code; Ctrl-C into exit 130."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            result = f(*args, **kwargs)
            interrupts.raise_pending()  # a Ctrl-C that landed in a C callback after the last check
            return result
        except EdgespecError as e:
            _report(str(e))
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            interrupts.exit_interrupted()

    return wrapper


@contextlib.contextmanager
def _one_line_click_errors():
    try:
        yield
    except click.exceptions.NoArgsIsHelpError:
        raise  # a bare `edgespec` shows the help, as click does
    except click.ClickException as e:
        _report(e.format_message())
        raise click.exceptions.Exit(e.exit_code) from None
    except KeyboardInterrupt:  # click's own answer is "Aborted!" and exit 1
        interrupts.exit_interrupted()


class OneLineErrorGroup(click.Group):
    """A command group whose click errors (a bad flag value, an unknown option or command) read as
    one line, like edgespec's own, instead of click's usage block: click raises them while it
    parses the group's arguments (make_context) or a subcommand's (invoke). A Ctrl-C there, before
    a command's error boundary, is exit 130 as it is in the command."""

    def make_context(self, *args, **kwargs):
        with _one_line_click_errors():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context):
        with _one_line_click_errors():
            return super().invoke(ctx)


def sampling_from_flags(defaults, temperature, top_p, top_k, min_p, seed):
    """The pair's default sampling with the flags the user gave laid over it."""
    from dataclasses import replace

    given = dict(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, seed=seed)
    return replace(defaults, **{k: v for k, v in given.items() if v is not None})


def read_stdin() -> str | None:
    """Piped input as text, or None when stdin is a terminal or absent. Binary input is refused."""
    stream = sys.stdin
    if stream is None or stream.isatty():
        return None
    data = stream.buffer.read() if hasattr(stream, "buffer") else stream.read().encode()
    if b"\x00" in data:
        raise UsageError("stdin looks binary (it contains NUL bytes); pipe text or source code")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"stdin is not UTF-8 text (invalid byte at offset {e.start})") from None
