"""Ctrl-C: exit 130 with what was written kept, at any moment, however many times it is pressed;
SIGTERM and SIGHUP the same way with exit 143 and 129, `serve` included.

The CLI cases run `python -m edgespec` in a subprocess and send it real signals; the rest drives
edgespec.util.interrupts and the llama.cpp backend in-process. No test bounds how long anything takes
(a busy machine can be slow at any step); a process that never ends fails at a wait's timeout,
set at tens of seconds for work that takes well under one.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.util import interrupts
from tests.edgespec_process import CRASH_SIGNS, LONG_RUN, REPO, edgespec_env, read_until


def start(env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "edgespec", "run", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=REPO,
    )


def finish(proc: subprocess.Popen, timeout: float) -> tuple[bytes, str]:
    """stdout and stderr once the process has ended (it fails the test after `timeout` s: a hang)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running {timeout}s after the signal; stderr: {err.decode()}")
    return out, err.decode(errors="replace")


def assert_interrupted_cleanly(proc: subprocess.Popen, err: str, signum: int = signal.SIGINT) -> None:
    assert proc.returncode == 128 + signum, err
    assert not [sign for sign in CRASH_SIGNS if sign in err], err
    assert err.splitlines().count(f"edgespec: {interrupts.SIGNALS[signum]}") == 1, err


# -- the CLI, on a tiny pair ----------------------------------------------------------------------


@pytest.mark.subprocess
@pytest.mark.parametrize("gap_ms", [None, 0, 1, 5, 20, 50])
def test_ctrl_c_and_a_second_one_during_clean_up_exit_130_keeping_the_output(endless_env, gap_ms):
    """The reply streams to stdout as it comes (read here before the Ctrl-C); after one Ctrl-C the
    partial reply is closed with a newline. A second one, at any gap, must not crash the clean-up."""
    proc = start(endless_env, *LONG_RUN)
    head = read_until(proc, 200, timeout=60)
    proc.send_signal(signal.SIGINT)
    if gap_ms is not None:
        time.sleep(gap_ms / 1000)
        proc.send_signal(signal.SIGINT)  # a no-op once the process has ended
    out, err = finish(proc, timeout=30)
    assert_interrupted_cleanly(proc, err)
    if gap_ms is None:
        assert (head + out).endswith(b"\n")


@pytest.mark.subprocess
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_a_reply_as_ctrl_c_does(endless_env, signum):
    """What service managers and containers send, and a closed terminal: the same clean-up as
    Ctrl-C (the partial reply kept and closed with a newline), exit 143 / 129 and one line."""
    proc = start(endless_env, *LONG_RUN)
    head = read_until(proc, 200, timeout=60)
    proc.send_signal(signum)
    out, err = finish(proc, timeout=30)
    assert_interrupted_cleanly(proc, err, signum)
    assert (head + out).endswith(b"\n")


def seconds_to_handler(env: dict[str, str]) -> float:
    """About how long `python -m edgespec` takes now to get to its SIGINT handler (the interpreter's
    own start; tens of milliseconds, more on a busy machine). A Ctrl-C before that is Python's."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import edgespec.util.interrupts"], env=env, cwd=REPO, check=True)
    return time.monotonic() - t0


@pytest.mark.subprocess
def test_ctrl_c_at_any_moment_of_the_start_exits_130(endless_env):
    """Ctrl-C at points spread over the imports, the loading and the prompt, from a quarter of the
    time to the first token (or twice the time to the handler, on a busy machine) to the first token."""
    proc = start(endless_env, *LONG_RUN)
    t0 = time.monotonic()
    read_until(proc, 1, timeout=60)
    first_token_s = time.monotonic() - t0
    proc.kill()
    proc.communicate()
    for i in range(8):
        at = max(first_token_s * (0.25 + 0.75 * i / 7), 2 * seconds_to_handler(endless_env))
        proc = start(endless_env, *LONG_RUN)
        time.sleep(at)
        proc.send_signal(signal.SIGINT)
        _, err = finish(proc, timeout=30)
        assert_interrupted_cleanly(proc, err)


def test_ctrl_c_while_click_parses_is_130_not_aborted(monkeypatch):
    from click.testing import CliRunner

    from edgespec.cli import main as cli

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.main, "resolve_command", interrupted)
    result = CliRunner().invoke(cli.main, ["run", "hi"])
    assert result.exit_code == interrupts.EXIT_INTERRUPTED
    assert result.stderr.strip() == interrupts.MESSAGE  # not click's "Aborted!"


# -- models tune ---------------------------------------------------------------------------------


@pytest.mark.subprocess
def test_sigterm_during_a_tune_is_143_and_leaves_no_partial_file(endless_env):
    """A tune builds each layout as a `.partial` file and measures it; stopped at any point, it
    leaves none behind (a signal during the quantizer is raised when the quantizer returns)."""
    home = Path(endless_env["EDGESPEC_HOME"])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgespec",
            "models",
            "tune",
            "endless",
            "--layouts",
            "q4_0,iq4_nl,q6k-as-q4k",
            "--prompts",
            "4",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=endless_env,
        cwd=REPO,
    )
    line = proc.stderr.readline()  # "tuning endless: ...": the pair is loading, builds come next
    assert line.startswith(b"tuning"), line + proc.stderr.read()
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = finish(proc, timeout=60)
    assert_interrupted_cleanly(proc, err, signal.SIGTERM)
    assert not list(home.rglob("*.partial"))


# -- serve, stopped with requests in flight ------------------------------------------------------


def start_serving(env: dict[str, str]) -> tuple[subprocess.Popen, str, list[str], threading.Thread]:
    """`edgespec serve` on a free port: the process, its base URL, its stderr lines so far (the
    list grows as it writes) and the thread that reads them (it ends with stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgespec", "serve", "--port", "0", "--k", "3"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    lines: list[str] = []
    serving = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            if "serving" in line:
                serving.set()
        serving.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not serving.wait(60) or proc.poll() is not None:
        proc.kill()
        pytest.fail(f"serve did not start: {''.join(lines)}")
    return proc, re.search(r"(http://\S+/v1)", lines[-1]).group(1), lines, reader


@pytest.mark.subprocess
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_serve_tells_the_requests_in_flight_and_exits_with_the_signal(endless_env, signum):
    """A streamed reply being generated ends with an error event and `data: [DONE]`; a request
    waiting its turn gets an OpenAI-shaped 503; the server exits 128 + the signal with one line
    and no traceback (before: two tracebacks per stream on SIGINT, death by SIGTERM)."""
    proc, url, lines, reader = start_serving(endless_env)
    body = {"model": "endless", "prompt": "the river", "max_tokens": 30000}
    try:
        with httpx.Client(timeout=60) as client, ThreadPoolExecutor(1) as pool:
            with client.stream("POST", url + "/completions", json={**body, "stream": True}) as stream:
                events = stream.iter_lines()
                assert next(e for e in events if e.startswith("data:"))  # being generated
                waiting = pool.submit(client.post, url + "/completions", json=body)
                time.sleep(0.5)  # the second request is queued behind the stream
                proc.send_signal(signum)
                rest = [e for e in events if e.startswith("data:")]
            refused = waiting.result()
        assert rest[-1] == "data: [DONE]"
        assert json.loads(rest[-2].removeprefix("data:"))["error"]["code"] == "server_stopping"
        assert refused.status_code == 503, refused.text
        assert (
            refused.json()["error"]["code"] == "server_stopping" and refused.json()["error"]["type"] == "server_error"
        )
        assert proc.wait(timeout=30) == 128 + signum
    finally:
        proc.kill()
        proc.wait()
        reader.join(timeout=30)
    err = "".join(lines)
    assert lines[-1].strip() == f"edgespec: {interrupts.SIGNALS[signum]}", err
    assert not [sign for sign in CRASH_SIGNS + ("ERROR",) if sign in err], err


# A busy loop that ends by itself: the load a test puts on the machine is bounded even if the
# test dies before it can kill it.
BUSY_LOOP = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass"


@contextlib.contextmanager
def busy_cpus(n: int, seconds: float) -> Iterator[None]:
    """`n` busy-loop processes for at most `seconds`: a loaded machine, made by the test."""
    burners = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(seconds)]) for _ in range(n)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def streamed_events(client: httpx.Client, url: str, body: dict) -> tuple[int, list[str]]:
    """A streamed request's status and its `data:` lines (the error body's, when not 200)."""
    with client.stream("POST", url + "/completions", json={**body, "stream": True}) as stream:
        if stream.status_code != 200:
            return stream.status_code, [f"data: {stream.read().decode()}"]
        return 200, [e for e in stream.iter_lines() if e.startswith("data:")]


@pytest.mark.subprocess
@pytest.mark.parametrize("run", range(3))
def test_serve_stopped_under_load_with_streams_and_a_queued_request_exits_cleanly(endless_env, run):
    """Issue 38: two streamed requests (one generating, one waiting its turn) and a queued one,
    then SIGINT, on a loaded machine: the log held a traceback. The replies ended only when the
    engine thread got round to each job; under load that took longer than uvicorn waits (2 s),
    and uvicorn cancelled them (a traceback each, a stream cut mid-body, plain-text 500s). With
    two busy processes per core the old code failed every run here; three runs make that sure.
    Now every reply ends at once: an error event and `[DONE]`, or a 503."""
    proc, url, lines, reader = start_serving(endless_env)
    body = {"model": "endless", "prompt": "the river", "max_tokens": 30000}
    try:
        with busy_cpus(2 * (os.cpu_count() or 1), seconds=60), httpx.Client(timeout=60) as client:
            with (
                ThreadPoolExecutor(2) as pool,
                client.stream("POST", url + "/completions", json={**body, "stream": True}) as stream,
            ):
                events = stream.iter_lines()
                assert next(e for e in events if e.startswith("data:"))  # being generated
                second = pool.submit(streamed_events, client, url, body)
                queued = pool.submit(client.post, url + "/completions", json=body)
                time.sleep(0.5)  # both wait behind the first
                proc.send_signal(signal.SIGINT)
                rest = [e for e in events if e.startswith("data:")]
                second_status, second_events = second.result()
                refused = queued.result()
            assert proc.wait(timeout=60) == 130
    finally:
        proc.kill()
        proc.wait()
        reader.join(timeout=30)
    err = "".join(lines)
    assert not [sign for sign in CRASH_SIGNS + ("ERROR",) if sign in err], err
    assert lines[-1].strip() == "edgespec: interrupted", err
    assert rest[-1] == "data: [DONE]"
    assert json.loads(rest[-2].removeprefix("data:"))["error"]["code"] == "server_stopping"
    assert (
        second_status == 503
        and json.loads(second_events[0].removeprefix("data:"))["error"]["code"] == "server_stopping"
    )
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "server_stopping"


# -- the CLI, on the real pair (issue 9) ------------------------------------------------------------


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.usefixtures("real_pair")
@pytest.mark.parametrize("run", range(3))
@pytest.mark.parametrize("gap_ms", [20, 50, 100])
def test_real_pair_a_second_ctrl_c_during_clean_up_is_130(gap_ms, run):
    """Case 1: the second Ctrl-C landed in LlamaCppBackend.close between a free and clearing the
    handle, and __del__ freed again: glibc aborted, "double free or corruption" (in 10 of 15 runs
    here; three runs a gap, so that the old code would fail)."""
    # --k 3 throughout: auto would calibrate on a first run, into the user's calibration file
    proc = start(edgespec_env(), "write a long essay about rivers", "--k", "3")
    head = read_until(proc, 1, timeout=300)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    time.sleep(gap_ms / 1000)
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc, timeout=60)
    assert_interrupted_cleanly(proc, err)
    assert head + out


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.usefixtures("real_pair")
@pytest.mark.parametrize("at_s", [0.3, 0.6, 0.9])
def test_real_pair_ctrl_c_while_loading_stops_the_load(at_s):
    """Case 2: the Ctrl-C landed in llama.cpp's log callback during the load, ctypes swallowed it
    ("Exception ignored"), and the whole reply was generated with exit 0."""
    proc = start(edgespec_env(), "write a long essay about rivers", "--max-tokens", "40", "--k", "3")
    time.sleep(at_s)
    proc.send_signal(signal.SIGINT)
    _, err = finish(proc, timeout=120)
    assert_interrupted_cleanly(proc, err)


# -- edgespec.util.interrupts --------------------------------------------------------------------------


@pytest.fixture
def program_handler(monkeypatch):
    """The program's SIGINT handler, installed for one test; the module's state starts afresh."""
    for name in ("_pending", "_interrupted", "_installed"):
        monkeypatch.setattr(interrupts, name, False)
    monkeypatch.setattr(interrupts, "_first_signal", None)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # put back afterwards
    previous = {signum: signal.getsignal(signum) for signum in interrupts.SIGNALS}
    interrupts.install()
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)


@pytest.fixture
def unraisable(monkeypatch) -> list:
    """What ctypes reports as "Exception ignored" (an exception a callback let out)."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    return seen


def test_a_sigint_inside_a_c_callback_is_kept_for_the_c_caller(program_handler, unraisable):
    calls = []

    @interrupts.c_callback(stopped=False)
    def keep_going() -> bool:
        signal.raise_signal(signal.SIGINT)  # the handler runs as this returns: inside the callback
        calls.append(interrupts.requested())
        return not interrupts.requested()

    from_c = ctypes.CFUNCTYPE(ctypes.c_bool)(keep_going)  # called through C, as llama.cpp would
    assert from_c() is False
    assert calls == [True] and not unraisable
    with pytest.raises(KeyboardInterrupt):
        interrupts.raise_pending()
    interrupts.raise_pending()  # raised once


def test_an_interrupt_that_python_swallows_is_raised_again_unprinted(program_handler):
    """A SIGINT handled in a __del__ (or a weakref callback): Python swallows the KeyboardInterrupt
    and hands it to sys.unraisablehook, which prints "Exception ignored"."""
    printed = []
    sys.unraisablehook = printed.append  # what would print it
    interrupts.install()

    class Dropped:
        def __init__(self, on_del):
            self.on_del = on_del

        def __del__(self):
            self.on_del()

    Dropped(lambda: signal.raise_signal(signal.SIGINT))
    assert printed == []
    with pytest.raises(KeyboardInterrupt):
        interrupts.raise_pending()
    Dropped(lambda: 1 / 0)  # other exceptions are still printed
    assert [info.exc_type for info in printed] == [ZeroDivisionError]


def test_a_keyboard_interrupt_raised_in_a_callback_becomes_pending(monkeypatch, unraisable):
    monkeypatch.setattr(interrupts, "_pending", False)

    @interrupts.c_callback(stopped=True)
    def interrupted() -> bool:
        raise KeyboardInterrupt

    assert ctypes.CFUNCTYPE(ctypes.c_bool)(interrupted)() is True
    assert not unraisable
    with pytest.raises(KeyboardInterrupt):
        interrupts.raise_pending()


def test_outside_callbacks_the_first_sigint_raises(program_handler):
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    assert interrupts.requested()


def test_the_first_signal_names_the_exit(program_handler):
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGTERM)
    assert (interrupts.exit_status(), interrupts.message()) == (143, "edgespec: terminated")


def test_a_deferred_signal_stops_the_loop_and_is_raised_after_it(program_handler):
    """An event loop's handler raises nothing and leaves C work and other threads alone
    (nothing pending, nothing requested) until the command raises it."""
    stops = []
    previous = signal.signal(signal.SIGHUP, interrupts.deferred(lambda: stops.append(True)))
    try:
        signal.raise_signal(signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert stops == [True] and not interrupts.requested()
    with pytest.raises(KeyboardInterrupt):
        interrupts.raise_deferred()
    assert (interrupts.exit_status(), interrupts.message()) == (129, "edgespec: hung up")


# -- the llama.cpp backend: loads that stop part way, and close --------------------------------


class CountingLlama:
    """llama_cpp with its allocations and frees counted. A second free of a handle is counted but
    not passed on (it would crash the test process). `after` maps a function name to what happens
    right after its first call returns (a Ctrl-C landing there)."""

    ALLOCATE = ("llama_model_load_from_file", "llama_init_from_model", "llama_batch_init")
    FREE = ("llama_model_free", "llama_free", "llama_batch_free")

    def __init__(self, lc, after=None):
        self._lc, self._after = lc, after or {}
        self.made: list[int] = []
        self.freed: list[int] = []

    def __getattr__(self, name):
        real = getattr(self._lc, name)
        if name not in self.ALLOCATE + self.FREE and name not in self._after:
            return real

        def call(*args):
            result = None
            if name in self.FREE:
                key = self._key(args[0])
                if key not in self.freed:
                    real(*args)
                self.freed.append(key)
            else:
                result = real(*args)
                if name in self.ALLOCATE and result:
                    self.made.append(self._key(result))
            hook = self._after.pop(name, None)
            if hook is not None:
                hook()
            return result

        return call

    @staticmethod
    def _key(handle) -> int:
        return ctypes.addressof(handle) if isinstance(handle, ctypes.Structure) else handle

    def assert_each_freed_once(self):
        assert sorted(self.freed) == sorted(self.made), (self.made, self.freed)


@pytest.fixture
def counting(monkeypatch):
    """`counting(after={...})` makes LlamaCppBackend use a CountingLlama."""
    import llama_cpp

    def make(after=None) -> CountingLlama:
        lc = CountingLlama(llama_cpp, after)
        monkeypatch.setitem(sys.modules, "llama_cpp", lc)
        return lc

    return make


def ctrl_c():
    raise KeyboardInterrupt


def test_close_twice_and_then_del_free_everything_once(tiny_gguf, counting):
    lc = counting()
    backend = LlamaCppBackend(tiny_gguf, 256, threads=1)
    assert len(lc.made) == 3  # model, context, batch
    backend.close()
    backend.close()
    backend.__del__()
    lc.assert_each_freed_once()


@pytest.mark.parametrize("cut_after", ["llama_batch_free", "llama_free"])
def test_a_close_cut_short_by_ctrl_c_frees_nothing_twice(tiny_gguf, counting, cut_after):
    lc = counting(after={cut_after: ctrl_c})
    backend = LlamaCppBackend(tiny_gguf, 256, threads=1)
    with pytest.raises(KeyboardInterrupt):
        backend.close()
    backend.close()
    backend.__del__()
    assert len(lc.freed) == len(set(lc.freed))  # the rest may leak; nothing is freed twice


def test_a_pending_interrupt_aborts_a_load(tiny_gguf, counting, monkeypatch):
    monkeypatch.setattr(interrupts, "_pending", True)
    lc = counting()
    with pytest.raises(KeyboardInterrupt):
        LlamaCppBackend(tiny_gguf, 256, threads=1)
    assert lc.made == []  # llama.cpp stopped the load at its first progress report
    assert not interrupts.requested()


@pytest.mark.parametrize("phase", ["llama_model_load_from_file", "llama_init_from_model", "llama_vocab_is_eog"])
def test_an_interrupt_part_way_through_a_load_frees_what_was_made(tiny_gguf, counting, monkeypatch, phase):
    """A Ctrl-C that a C callback recorded while llama.cpp loaded the model or made the context, or
    one raised in Python while the backend reads the vocabulary."""
    monkeypatch.setattr(interrupts, "_pending", False)
    if phase == "llama_vocab_is_eog":
        lc = counting(after={phase: ctrl_c})
    else:
        lc = counting(after={phase: lambda: monkeypatch.setattr(interrupts, "_pending", True)})
    with pytest.raises(KeyboardInterrupt):
        LlamaCppBackend(tiny_gguf, 256, threads=1)
    assert lc.made
    lc.assert_each_freed_once()


def test_a_pending_interrupt_aborts_a_long_decode_and_rolls_it_back(tiny_gguf, monkeypatch):
    backend = LlamaCppBackend(tiny_gguf, 512, threads=1)
    try:
        backend.eval([1, 2, 3], 1)
        monkeypatch.setattr(interrupts, "_pending", True)
        with pytest.raises(KeyboardInterrupt):
            backend.eval(list(range(100)), 1)
        assert backend.cached == [1, 2, 3]
        assert backend.eval([4], 1).shape == (1, backend.n_vocab)
    finally:
        backend.close()
