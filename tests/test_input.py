"""Input is checked before any model loads: piped stdin is read in bounded chunks, text that is not
valid Unicode is named in one line, and a bench suite is checked whole.

Every case runs on pair "missing", whose model file does not exist: loading it would end in exit 1
naming that file, so an exit 2 with the expected line shows that nothing loaded.
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from edgespec.cli import common as cli_common
from edgespec.cli import main as cli
from edgespec.util.errors import UsageError
from edgespec.util.text_check import MAX_TOKEN_BYTES
from tests.edgespec_process import REPO, edgespec_env

CONTEXT, LONG_CONTEXT = 256, 8192


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A models.toml whose pairs name a model file that is not there."""
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    config = tmp_path / "models.toml"
    config.write_text(
        'default = "missing"\n'
        f'[models.gone]\nformat = "gguf"\npath = "{tmp_path / "nope.gguf"}"\n'
        f'[pairs.missing]\nbackend = "llamacpp"\ntarget = "gone"\ndrafter = "none"\ncontext = {CONTEXT}\n'
        f'[pairs.long]\nbackend = "llamacpp"\ntarget = "gone"\ndrafter = "none"\ncontext = {LONG_CONTEXT}\n'
    )
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    return tmp_path


def start(*args: str | bytes) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "edgespec", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=edgespec_env(),
        cwd=REPO,
    )


def error_line(err: bytes) -> str:
    """The one line on stderr."""
    text = err.decode()
    assert "Traceback" not in text
    (line,) = text.splitlines()
    return line


def one_line_error(result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)
    (line,) = result.stderr.splitlines()
    assert line.startswith("edgespec: error: ")
    return line


# -- stdin: bounded, checked chunk by chunk ----------------------------------------------------------


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "chunk, refusal",
    [
        (
            b"y\n" * 4096,
            f"stdin is over {CONTEXT * MAX_TOKEN_BYTES:,} bytes, more than the pair's context of "
            f"{CONTEXT} tokens can hold",
        ),
        (bytes(8192), "stdin looks binary (it contains NUL bytes); pipe text or source code"),
    ],
    ids=["yes", "dev-zero"],
)
def test_endless_stdin_ends_at_once_with_a_usage_error(env, chunk, refusal):
    """The pipe is fed until the reader goes away, up to a cap far past the bound: a reader that read
    it all would have gone on to load the pair (exit 1)."""
    proc = start("run", "hi")
    fed, cap = 0, 256 * CONTEXT * MAX_TOKEN_BYTES
    try:
        while fed < cap:
            proc.stdin.write(chunk)
            fed += len(chunk)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, error_line(err)) == (2, f"edgespec: error: {refusal}")
    assert fed < cap  # it stopped reading


@pytest.mark.subprocess
def test_ctrl_c_while_stdin_is_read_exits_130(env):
    """Held up by a writer that neither writes nor closes; the feed outruns the pipe's buffer, so the
    command is in its reading loop when the Ctrl-C comes."""
    proc = start("run", "-m", "long", "hi")
    proc.stdin.write(b"x" * (LONG_CONTEXT * MAX_TOKEN_BYTES // 2))
    proc.stdin.flush()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err.decode().strip()) == (130, "edgespec: interrupted")


def fake_stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(isatty=lambda: False, buffer=io.BytesIO(data)))


@pytest.mark.parametrize("chunk", [1, 2, 3, 5])
def test_a_character_split_between_chunks_is_read_whole(monkeypatch, chunk):
    monkeypatch.setattr(cli_common, "STDIN_CHUNK", chunk)
    fake_stdin(monkeypatch, "naïve café ✓ 🎉\n".encode())
    assert cli_common.read_stdin(CONTEXT) == "naïve café ✓ 🎉\n"


@pytest.mark.parametrize(
    "data, offset",
    [
        (b"ab\xc3(", 2),  # a bad continuation byte in the chunk after the character's start
        (b"abcd\xff", 4),
        (b"abc\xe2\x9c", 3),  # the input ends inside a character
    ],
)
def test_bytes_that_are_not_utf8_are_named_by_offset_across_chunks(monkeypatch, data, offset):
    monkeypatch.setattr(cli_common, "STDIN_CHUNK", 3)
    fake_stdin(monkeypatch, data)
    with pytest.raises(UsageError, match=rf"^stdin is not UTF-8 text \(invalid byte at offset {offset}\)$"):
        cli_common.read_stdin(CONTEXT)


def test_stdin_up_to_the_bound_is_read(monkeypatch):
    fake_stdin(monkeypatch, b"x" * (CONTEXT * MAX_TOKEN_BYTES))
    assert len(cli_common.read_stdin(CONTEXT)) == CONTEXT * MAX_TOKEN_BYTES
    fake_stdin(monkeypatch, b"x" * (CONTEXT * MAX_TOKEN_BYTES + 1))
    with pytest.raises(UsageError, match="stdin is over"):
        cli_common.read_stdin(CONTEXT)


def test_chat_bounds_its_piped_stdin_too(env):
    result = CliRunner().invoke(cli.main, ["chat"], input=b"x" * (CONTEXT * MAX_TOKEN_BYTES + 1))
    assert one_line_error(result, 2).startswith("edgespec: error: stdin is over ")


# -- arguments that are not UTF-8 (the shell passes bytes; Python keeps them as surrogate escapes) --


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "args, name",
    [
        ([b"run", b"hi \xff\xfe there"], "PROMPT"),
        ([b"run", b"-s", b"be \xff terse", b"hi"], "--system"),
        ([b"chat", b"-s", b"be \xff terse"], "--system"),
    ],
)
def test_an_argument_that_is_not_utf8_is_named_before_loading(env, args, name):
    proc = start(*args)
    _, err = proc.communicate(b"", timeout=120)
    assert proc.returncode == 2
    assert error_line(err).startswith(f"edgespec: error: {name} is not UTF-8 text (byte 0xff at character ")


# -- bench: the suite and the modes are checked before the pair loads -------------------------------


def suite_file(env, *lines: dict) -> str:
    path = env / "suite.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


GOOD = {"id": "a/0", "suite": "a", "mode": "completion", "prompt": "def f():"}


@pytest.mark.parametrize(
    "bad, why",
    [
        ({**GOOD, "prompt": ""}, "prompt: is empty or only whitespace"),
        ({"id": "a/1", "suite": "a", "mode": "chat", "messages": []}, "messages: List should have at least 1 item"),
        ({**GOOD, "prompt": "x\ud800"}, "prompt: is not valid Unicode (a lone surrogate U+D800 at character 1)"),
        (
            {**GOOD, "prompt": "x" * (CONTEXT * MAX_TOKEN_BYTES + 1)},
            f"the completion text is {CONTEXT * MAX_TOKEN_BYTES + 1:,} bytes, more than the pair's context of "
            f"{CONTEXT} tokens can hold",
        ),
    ],
)
def test_a_suite_line_a_model_would_fail_on_is_refused_before_loading(env, bad, why):
    suite = suite_file(env, GOOD, bad)
    result = CliRunner().invoke(cli.main, ["bench", "--suite", suite, "--modes", "ar"])
    assert one_line_error(result, 2).startswith(f"edgespec: error: {suite}:2: {why}")


def test_the_suite_must_fit_the_smallest_context_of_the_pairs(env):
    suite = suite_file(env, {**GOOD, "prompt": "x" * (CONTEXT * MAX_TOKEN_BYTES + 1)})
    result = CliRunner().invoke(cli.main, ["bench", "-m", "long", "-m", "missing", "--suite", suite])
    assert f"context of {CONTEXT} tokens" in one_line_error(result, 2)


def test_hf_assisted_on_a_llama_cpp_pair_is_refused_before_loading(env):
    result = CliRunner().invoke(cli.main, ["bench", "--modes", "ar,hf-assisted", "--suite", suite_file(env, GOOD)])
    line = one_line_error(result, 2)
    assert "hf-assisted" in line and "llamacpp" in line
