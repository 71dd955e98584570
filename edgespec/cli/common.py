"""What every command shares: the pair / drafter / sampling / JSON options, the types that check
flag values, and the error boundary.

`run`, `chat`, `serve` and `bench` take the same flags with the same meaning; they are declared once
here, and `opens_engine` gathers them into the one value the engine opens from (`EngineOptions`).
One rule per kind of value, for every command, checked while the flags are parsed (before
anything loads): a float flag takes `FiniteFloat` (no nan, no inf), a comma-separated list of
names takes `NameList` (an unknown name is a usage error listing the valid ones).
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from edgespec.constraints import guidance
from edgespec.constraints.guidance import ConstraintSpec
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import sampling_problem
from edgespec.engine.options import EngineOptions
from edgespec.util import interrupts
from edgespec.util.errors import EdgespecError, SettingError, UsageError
from edgespec.util.stdout import PipeClosed
from edgespec.util.text_check import context_bytes
from edgespec.util.user_files import read_user_file

T = TypeVar("T")


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


def cache_option(f: Callable) -> Callable:
    """--no-cache (or EDGESPEC_NO_CACHE=1): neither load nor save prompt states (`prompt_cache`)."""
    return click.option(
        "--no-cache",
        "no_cache",
        is_flag=True,
        envvar="EDGESPEC_NO_CACHE",
        help="Read every prompt from scratch and save nothing to the prompt cache (or $EDGESPEC_NO_CACHE=1).",
    )(f)


def history_options(f: Callable) -> Callable:
    """--no-history (or EDGESPEC_NO_HISTORY=1), --decode-again, --live-timings and --context PATH:
    what calls copy from beyond their own text (`engine/copy_sources.py`), whether a greedy request
    asked before is served its earlier reply again (`engine/same_reply.py`), and whether auto's
    passes follow the call's own timings (`engine.GenerateSettings.live_timings`)."""
    f = click.option(
        "--context",
        "context",
        type=click.Path(path_type=Path, exists=True),
        multiple=True,
        help="A file or folder whose text replies may copy (repeatable).",
    )(f)
    f = click.option(
        "--decode-again",
        "decode_again",
        is_flag=True,
        envvar="EDGESPEC_DECODE_AGAIN",
        help="Decode a greedy request asked before again, drafting from its earlier reply, instead of "
        "serving that reply again from the history (fast, but a near-tie may part them; or "
        "$EDGESPEC_DECODE_AGAIN=1).",
    )(f)
    f = click.option(
        "--live-timings",
        "live_timings",
        is_flag=True,
        envvar="EDGESPEC_LIVE_TIMINGS",
        help="Let auto choose draft lengths from this call's own timings, not the measured speed alone "
        "(follows a busy moment, but the same request may then get another reply; or "
        "$EDGESPEC_LIVE_TIMINGS=1).",
    )(f)
    return click.option(
        "--no-history",
        "no_history",
        is_flag=True,
        envvar="EDGESPEC_NO_HISTORY",
        help="Neither draft from earlier calls, nor serve their replies again, nor keep this one "
        "(or $EDGESPEC_NO_HISTORY=1).",
    )(f)


def pair_options(f: Callable) -> Callable:
    """-m/--pair and --config."""
    f = click.option(
        "-m", "--pair", "pair", default=None, help="Model pair from models.toml (default: the registry's default)."
    )(f)
    return config_option(f)


class FiniteFloat(click.FloatRange):
    """A float flag's type: a number, never nan or inf (which pass every range comparison), within
    [min, max] when given. Every float flag of every command uses it."""

    name = "number"

    def convert(self, value, param, ctx) -> float:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        """The range shown in --help ("0<=x<=100"), or nothing for a flag with no bounds: click's
        own would print "x<=None" (it assumes one bound at least)."""
        return "" if self.min is None and self.max is None else super()._describe_range()


class NameList(click.ParamType):
    """A comma-separated list of names from a known set (a tuple, or a callable that gives it, for
    sets known only once a module loads); an unknown name is a usage error that lists the valid
    ones. Converts to the list of names, in order, blanks dropped."""

    name = "name,..."

    def __init__(self, valid: Sequence[str] | Callable[[], Sequence[str]]):
        self.valid = valid

    def convert(self, value, param, ctx) -> list[str]:
        if isinstance(value, list):
            return value
        names = [n.strip() for n in value.split(",") if n.strip()]
        valid = self.valid() if callable(self.valid) else self.valid
        if not names:
            self.fail(f"name at least one of: {', '.join(valid)}", param, ctx)
        unknown = [n for n in names if n not in valid]
        if unknown:
            self.fail(f"unknown {', '.join(map(repr, unknown))}; valid: {', '.join(valid)}", param, ctx)
        return names


def sampling_option(flag: str, kind: type, help: str | None = None, default=None) -> Callable:
    """A sampling flag checked by the same rule as models.toml's sampling table (a bad value is a
    usage error, found before anything loads)."""
    name = flag.lstrip("-").replace("-", "_")
    param_type = FiniteFloat() if kind is float else kind

    def check(ctx: click.Context, param: click.Parameter, value):
        problem = None if value is None else sampling_problem(name, value)
        if problem:
            raise click.BadParameter(problem, ctx, param)
        return value

    return click.option(
        flag, name, type=param_type, default=default, callback=check, help=help, show_default=default is not None
    )


class PolicyChoiceParam(click.ParamType):
    """--k as a typed PolicyChoice, so a bad value is refused while the flags are parsed."""

    name = "auto|auto-chain|heuristic|N"

    def convert(self, value, param, ctx) -> PolicyChoice:
        if isinstance(value, PolicyChoice):
            return value
        try:
            return PolicyChoice.parse(value)
        except SettingError as e:
            self.fail(str(e), param, ctx)


def decoding_options(f: Callable) -> Callable:
    """--draft, --k and the sampling flags; unset sampling flags fall back to the pair's defaults."""
    opts = [
        click.option(
            "--draft",
            type=click.Choice([c.value for c in DraftChoice]),
            default="auto",
            show_default=True,
            callback=lambda ctx, param, value: DraftChoice(value),
            help="Drafter: the draft model, n-gram lookup in the context, none (plain decoding), or auto.",
        ),
        click.option(
            "--k",
            "k",  # EngineOptions.policy (`_engine_options`)
            type=PolicyChoiceParam(),
            default="auto",
            show_default=True,
            help="Draft length: auto (cost-aware controller, trees where they pay), auto-chain (chains "
            "only), heuristic (+2/-1), or a fixed number.",
        ),
        sampling_option("--temperature", float, "0 = greedy."),
        sampling_option("--top-p", float),
        sampling_option("--top-k", int),
        sampling_option("--min-p", float),
        sampling_option("--seed", int, "Seed for sampling (reproducible output)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def opens_engine(**fixed) -> Callable[[Callable], Callable]:
    """A command that opens the engine gets the flags of `pair_options`, `decoding_options`,
    `cache_option`, `history_options` and --max-tokens (those it declares; a flag it lacks is off)
    as one `options: EngineOptions`; `fixed` sets the command's own (`repository=True`). Place it
    under `error_boundary`."""

    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def wrapper(*args, **flags):
            return f(*args, options=_engine_options(flags, **fixed), **flags)

        return wrapper

    return decorate


def _engine_options(flags: dict[str, Any], **fixed: Any) -> EngineOptions:
    """The EngineOptions of a command's parsed flags, taken out of `flags`: each flag, by the name
    click gives its value, to the field it sets (mypy checks the fields and that each value has
    the field's type, the type of the default it falls back to where the command lacks the flag)."""
    default = EngineOptions()

    def given(name: str, otherwise: T) -> T:
        return flags.pop(name, otherwise)

    return EngineOptions(
        pair=given("pair", default.pair),
        config=given("config", default.config),
        draft=given("draft", default.draft),
        policy=given("k", default.policy),  # --k: the user's choice of policy
        temperature=given("temperature", default.temperature),
        top_p=given("top_p", default.top_p),
        top_k=given("top_k", default.top_k),
        min_p=given("min_p", default.min_p),
        seed=given("seed", default.seed),
        max_tokens=given("max_tokens", default.max_tokens),
        cache=not given("no_cache", True),
        history=not given("no_history", True),
        decode_again=given("decode_again", False),
        live_timings=given("live_timings", False),
        context=tuple(given("context", ())),
        **fixed,
    )


def json_options(f: Callable) -> Callable:
    """--json and --json-schema FILE (`run`, and every reply of a `chat`); see `json_constraint`."""
    f = click.option(
        "--json-schema",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="Reply with one JSON document valid against the JSON schema in this file.",
    )(f)
    return click.option(
        "--json", "json_object", is_flag=True, help="Reply with one JSON object (decoding is constrained to it)."
    )(f)


# The most bytes of a --json-schema file read: what one request to `serve` may carry whole.
SCHEMA_BYTES = 4 << 20


def json_constraint(any_object: bool, schema_file: Path | None) -> ConstraintSpec | None:
    """The constraint --json / --json-schema ask for, checked (compiled whole without a model,
    `guidance.check`): a usage error for a file that cannot be read, text that is not JSON or
    nests too deep, a schema no finite document satisfies, or one the engine cannot enforce or
    build, naming it."""
    if any_object and schema_file is not None:
        raise UsageError("--json and --json-schema exclude each other (a schema says what JSON to write)")
    if schema_file is not None:
        try:
            text = read_user_file(schema_file, SCHEMA_BYTES, str(schema_file)).decode("utf-8")
        except UnicodeDecodeError as e:
            raise UsageError(f"--json-schema: {schema_file} is not UTF-8 text (at byte {e.start})") from None
        except UsageError as e:
            raise UsageError(f"--json-schema: {e}") from None
        spec = ConstraintSpec.json_schema(text)
    elif any_object:
        spec = ConstraintSpec("json_object")
    else:
        return None
    try:
        guidance.check(spec)
    except UsageError as e:
        raise UsageError(f"--json-schema: {e}" if schema_file is not None else f"--json: {e}") from None
    return spec


def _report(message: str) -> None:
    """One line whatever the message quotes: a name or path the user typed may hold a newline or
    a terminal's control sequence, written escaped as Python writes it."""
    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    click.echo(f"edgespec: error: {line}", err=True)


def error_boundary(f: Callable) -> Callable:
    """Turn EdgespecError into one line on stderr and its exit code; Ctrl-C, SIGTERM and SIGHUP into
    exit 130, 143 and 129 (edgespec.util.interrupts); stdout's reader leaving into a quiet exit 1
    (edgespec.util.stdout)."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            result = f(*args, **kwargs)
            interrupts.raise_pending()  # a Ctrl-C that landed in a C callback after the last check
            return result
        except EdgespecError as e:
            _report(f"--{e.setting.replace('_', '-')}: {e}" if isinstance(e, SettingError) and e.setting else str(e))
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            interrupts.exit_interrupted()
        except PipeClosed as e:
            sys.exit(e.exit_code)

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


# Bytes read from stdin at a time: each read returns to Python, where a Ctrl-C is raised.
STDIN_CHUNK = 1 << 16


def read_stdin(context: int) -> str | None:
    """Piped input as text, or None when stdin is a terminal or absent. Read in chunks and refused
    at the first chunk that shows it is binary (a NUL byte, bytes that are not UTF-8) or longer
    than a `context`-token context can hold, so endless input (`< /dev/zero`, `yes |`) ends at
    once with a usage error instead of filling memory."""
    stream = sys.stdin
    if stream is None or stream.isatty():
        return None
    # typeshed gives TextIO.buffer as BinaryIO, which has no read1; stdin's is a BufferedReader
    read = stream.buffer.read1 if hasattr(stream, "buffer") else lambda n: stream.read(n).encode()  # type: ignore[union-attr]
    limit = context_bytes(context)
    decoder = codecs.getincrementaldecoder("utf-8")()  # keeps a character split between chunks
    parts: list[str] = []
    size = 0  # bytes decoded so far

    def decode(chunk: bytes, final: bool = False) -> str:
        try:
            return decoder.decode(chunk, final)
        except UnicodeDecodeError as e:  # e.start counts from the split character the decoder held
            start = size - len(decoder.getstate()[0]) + e.start
            raise UsageError(f"stdin is not UTF-8 text (invalid byte at offset {start})") from None

    while chunk := read(STDIN_CHUNK):
        if b"\x00" in chunk:
            raise UsageError("stdin looks binary (it contains NUL bytes); pipe text or source code")
        parts.append(decode(chunk))
        size += len(chunk)
        if size > limit:
            raise UsageError(
                f"stdin is over {limit:,} bytes, more than the pair's context of {context:,} tokens can hold"
            )
    parts.append(decode(b"", final=True))
    return "".join(parts)
