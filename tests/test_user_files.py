"""Files the user names are read bounded, in chunks, with signals honoured (`util/user_files.py`):
`--json-schema /dev/zero` and `<(yes)` used to grow until the kernel killed the process, deaf to
SIGTERM. A device is refused unopened, a regular file over its limit from its size, an endless pipe
at its limit; a pipe named on purpose is still read; a pipe left in a folder edgespec lists is never
waited for.

The command-line cases run `python -m edgespec` on pair "missing", whose model file does not exist:
exit 2 with the expected line shows that the file was refused before anything loaded. Their
processes get a 2 GiB address space, so a reader that reads without bound fails at once (a
MemoryError) instead of taking the machine's memory, and a timeout far past their run time, so
one that hangs fails too.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from edgespec.bench.suites import load_suite
from edgespec.tui.chat_store import ChatStore
from edgespec.util.errors import UsageError
from edgespec.util.user_files import read_user_file, size_text
from tests.edgespec_process import REPO, edgespec_env

HANG = 120  # seconds: far past any of these runs on a loaded machine; only a hang reaches it
SCHEMA = b'{"type": "object", "properties": {"name": {"type": "string"}}}'


@pytest.fixture
def missing_pair(tmp_path) -> dict[str, str]:
    """The environment of an edgespec whose default pair's model file does not exist."""
    config = tmp_path / "models.toml"
    config.write_text(
        'default = "missing"\n'
        f'[models.gone]\nformat = "gguf"\npath = "{tmp_path / "nope.gguf"}"\n'
        '[pairs.missing]\nbackend = "llamacpp"\ntarget = "gone"\ndrafter = "none"\ncontext = 256\n'
    )
    return edgespec_env(
        EDGESPEC_CONFIG=str(config), EDGESPEC_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg")
    )


def bounded_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def start(env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "edgespec", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=REPO,
        preexec_fn=bounded_memory,
    )


def finish(proc: subprocess.Popen) -> tuple[int, list[str]]:
    _, err = proc.communicate(timeout=HANG)
    return proc.returncode, [line for line in err.decode(errors="replace").splitlines() if line.strip()]


def feed(fifo: Path, data: bytes, repeat: int = 1, then: threading.Event | None = None) -> threading.Thread:
    """A writer on `fifo`: `data` `repeat` times (until the reader leaves), then, with `then`, it
    keeps the pipe open without writing until `then` is set."""
    done_writing = threading.Event()

    def write() -> None:
        fd = os.open(fifo, os.O_WRONLY)  # waits for the reader
        try:
            for _ in range(repeat):
                os.write(fd, data)
            done_writing.set()
            if then is not None:
                then.wait(HANG)
        except BrokenPipeError:
            pass
        finally:
            os.close(fd)

    thread = threading.Thread(target=write, daemon=True)
    thread.done_writing = done_writing  # type: ignore[attr-defined]
    thread.start()
    return thread


# -- the reader --------------------------------------------------------------------------------------


def test_a_device_is_refused_unopened():
    with pytest.raises(UsageError, match=r"^schema /dev/zero is not a regular file or a pipe$"):
        read_user_file(Path("/dev/zero"), 1 << 20, "schema /dev/zero")


def test_a_regular_file_over_the_limit_is_refused_from_its_size(tmp_path):
    """A sparse terabyte: read, it would take hours; refused, it takes no time."""
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(1 << 40)
    with pytest.raises(UsageError, match=r"^huge\.json is larger than 4 MiB$"):
        read_user_file(huge, 4 << 20, "huge.json")


def test_a_named_pipe_is_read_and_an_endless_one_stops_at_the_limit(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    feed(fifo, SCHEMA)
    assert read_user_file(fifo, 4 << 20, "pipe") == SCHEMA
    writer = feed(fifo, b"y\n" * 32768, repeat=10_000)  # 640 MiB, far past the limit
    with pytest.raises(UsageError, match=r"^pipe is larger than 1 MiB$"):
        read_user_file(fifo, 1 << 20, "pipe")
    writer.join(HANG)
    assert not writer.done_writing.is_set()  # it stopped reading: the writer's pipe broke


def test_a_suite_from_a_pipe_is_read_as_a_file_is(tmp_path):
    """`bench --suite <(zcat suite.jsonl.gz)`: refused as "not a regular file" before."""
    fifo = tmp_path / "suite.jsonl"
    os.mkfifo(fifo)
    feed(fifo, b'{"id": "a/1", "suite": "a", "mode": "completion", "prompt": "def f():", "max_tokens": 12}\n')
    assert [p.id for p in load_suite(fifo)] == ["a/1"]


def test_a_pipe_among_listed_files_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match=r"^pipe is not a regular file$"):
        read_user_file(fifo, 1 << 20, "pipe", pipes=False)


def test_a_pipe_in_the_chats_folder_stops_no_listing(tmp_path):
    """A FIFO named like a saved chat held `chat --resume` and the chat list forever."""
    folder = tmp_path / "chats"
    folder.mkdir()
    os.mkfifo(folder / "abc.json")
    store = ChatStore(folder)
    result: list = []
    lister = threading.Thread(target=lambda: result.append(store.load_all()), daemon=True)
    lister.start()
    lister.join(HANG)
    if lister.is_alive():
        os.close(os.open(folder / "abc.json", os.O_WRONLY | os.O_NONBLOCK))  # let it go
        pytest.fail("listing the chats waited for a writer on a pipe")
    ((), (error,)) = result[0]
    assert str(error) == f"saved chat {folder / 'abc.json'} is a FIFO, not a regular file"


def test_limits_read_as_the_docs_write_them():
    assert [size_text(n) for n in (4 << 20, 256 << 10, 64 << 20, 1000)] == ["4 MiB", "256 KiB", "64 MiB", "1,000 bytes"]


# -- the command line --------------------------------------------------------------------------------


@pytest.mark.subprocess
def test_run_json_schema_dev_zero_is_one_line_and_exit_2(missing_pair):
    code, lines = finish(start(missing_pair, "run", "--json-schema", "/dev/zero", "hi"))
    assert (code, lines) == (2, ["edgespec: error: --json-schema: /dev/zero is not a regular file or a pipe"])


@pytest.mark.subprocess
def test_run_json_schema_from_an_endless_pipe_stops_at_its_limit(missing_pair, tmp_path):
    """`--json-schema <(yes)`: the writer offers 1 GiB; the reader stops at 4 MiB."""
    fifo = tmp_path / "schema.json"
    os.mkfifo(fifo)
    proc = start(missing_pair, "run", "--json-schema", str(fifo), "hi")
    writer = feed(fifo, b"y\n" * 32768, repeat=16_384)
    code, lines = finish(proc)
    assert (code, lines) == (2, [f"edgespec: error: --json-schema: {fifo} is larger than 4 MiB"])
    writer.join(HANG)
    assert not writer.done_writing.is_set()


@pytest.mark.subprocess
def test_run_json_schema_from_a_pipe_named_on_purpose_is_read(missing_pair, tmp_path):
    """`--json-schema <(cat schema.json)`: read whole, then the pair loads (and fails: it is missing)."""
    fifo = tmp_path / "schema.json"
    os.mkfifo(fifo)
    proc = start(missing_pair, "run", "--json-schema", str(fifo), "hi")
    feed(fifo, SCHEMA)
    code, lines = finish(proc)
    assert code == 1 and len(lines) == 1 and "nope.gguf does not exist" in lines[0], lines


@pytest.mark.subprocess
def test_sigterm_while_a_pipe_is_read_ends_the_run_as_sigterm_does(missing_pair, tmp_path):
    """The writer has sent 1 MiB (so the reader is in its loop) and then holds the pipe open."""
    fifo = tmp_path / "schema.json"
    os.mkfifo(fifo)
    proc = start(missing_pair, "run", "--json-schema", str(fifo), "hi")
    release = threading.Event()
    writer = feed(fifo, b" " * (1 << 20), then=release)
    try:
        assert writer.done_writing.wait(HANG)
        proc.send_signal(signal.SIGTERM)
        code, lines = finish(proc)
    finally:
        release.set()
    assert (code, lines) == (143, ["edgespec: terminated"])


@pytest.mark.subprocess
def test_a_models_toml_that_is_a_device_is_one_line(missing_pair):
    env = {**missing_pair, "EDGESPEC_CONFIG": "/dev/zero"}
    code, lines = finish(start(env, "run", "hi"))
    assert (code, lines) == (1, ["edgespec: error: /dev/zero is not a regular file or a pipe"])
