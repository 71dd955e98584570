"""stdout that fails (edgespec.util.stdout): a closed pipe ends the command quietly, exit 1, with the
stats line and --stats-json still written; a closed descriptor or a full disk is one line and
exit 1. Each case runs `python -m edgespec` in a subprocess on the tiny endless pair."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.edgespec_process import CRASH_SIGNS, LONG_RUN, REPO, read_until

pytestmark = pytest.mark.subprocess

DEV_FULL = "/dev/full"


def edgespec(env: dict[str, str], *args: str, stdout, shell_redirect: str = "") -> subprocess.CompletedProcess:
    """Run edgespec with `stdout`; `shell_redirect` (such as ">&-") applies through sh instead."""
    command = [sys.executable, "-m", "edgespec", *args]
    if shell_redirect:
        command = ["sh", "-c", f'exec "$@" {shell_redirect}', "sh", *command]
    return subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=env,
        cwd=REPO,
        timeout=120,
        check=False,
    )


def one_line(result: subprocess.CompletedProcess, expected: str) -> None:
    err = result.stderr.decode()
    assert result.returncode == 1, err
    assert err.splitlines() == [f"edgespec: error: {expected}"], err


SHORT_RUN = ("the river", "--raw", "--max-tokens", "20", "--k", "3")


def test_a_closed_stdout_is_one_line_before_anything_loads(endless_env):
    one_line(
        edgespec(endless_env, "run", *SHORT_RUN, stdout=None, shell_redirect=">&-"),
        "cannot write to stdout: it is closed",
    )


@pytest.mark.skipif(not os.path.exists(DEV_FULL), reason="no /dev/full")
@pytest.mark.parametrize("args", [("run", *SHORT_RUN), ("models", "list"), ("--help",), ("--version",)])
def test_a_full_disk_is_one_line_for_every_command(endless_env, args):
    with open(DEV_FULL, "w") as full:
        one_line(edgespec(endless_env, *args, stdout=full), "cannot write to stdout: No space left on device")


def test_a_reader_that_leaves_ends_the_reply_quietly_with_the_stats_written(endless_env, tmp_path):
    """`edgespec run ... --stats --stats-json x.json | head -c 5`: the generation stops when the
    pipe closes, and the figures of what was generated are still written (before: exit 1 with
    neither, and nothing said)."""
    stats_json = tmp_path / "x.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgespec", "run", *LONG_RUN, "--stats", "--stats-json", str(stats_json)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=endless_env,
        cwd=REPO,
    )
    read_until(proc, 5, timeout=60)
    proc.stdout.close()  # as `head -c 5` does once it has its 5 bytes
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1, err
    assert not [sign for sign in CRASH_SIGNS if sign in err] and "error" not in err, err
    assert err.splitlines()[-1].startswith("load ") and "stop: cancelled" in err, err
    stats = json.loads(stats_json.read_text())
    assert stats["stop_reason"] == "cancelled" and stats["tokens"] > 0


# `edgespec run` with native code that prints to descriptor 1 once the pair has loaded: through C's
# stdio, through a child process (what ggml's abort does: it starts a debugger for its backtrace),
# and, with "abort", ggml's own abort (GGML_ASSERT's path; a context too small once took it).
NOISY = """
import ctypes, subprocess, sys
from edgespec.engine import loading
real = loading.load_engine
def noisy(*args, **kwargs):
    engine = real(*args, **kwargs)
    libc = ctypes.CDLL(None)
    libc.puts(b"NATIVE-PRINTF")
    libc.fflush(None)
    subprocess.run(["echo", "CHILD-PROCESS"], check=True)
    if mode == "abort":
        from llama_cpp._ggml import libggml
        libggml.ggml_abort(b"native.c", 1, b"native abort")
    return engine
loading.load_engine = noisy
mode, sys.argv = sys.argv[1], ["edgespec", *sys.argv[2:]]
from edgespec.__main__ import main
main()
"""


@pytest.mark.parametrize("mode", ["print", "abort"])
def test_what_native_code_prints_never_reaches_stdout(endless_env, mode):
    result = subprocess.run(
        [sys.executable, "-c", NOISY, mode, "run", *SHORT_RUN],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=endless_env,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    err = result.stderr.decode(errors="replace")
    assert b"NATIVE" not in result.stdout and b"CHILD" not in result.stdout, result.stdout[:300]
    assert "NATIVE-PRINTF" in err and "CHILD-PROCESS" in err
    if mode == "print":
        assert result.returncode == 0 and result.stdout, err  # the reply, and only it
    else:
        assert result.returncode < 0 and result.stdout == b"" and "native abort" in err
