"""`edgespec serve`, the command: bad flags refused in one line before anything loads, the listening
socket (connections wait, replies go without delay), and the real command in a process of its own."""

from __future__ import annotations

import asyncio
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai
import pytest
from click.testing import CliRunner

from edgespec.cli import main as cli
from edgespec.cli.serve import listen
from tests.live_server import HELLO, tiny_models_toml


@pytest.fixture(scope="module")
def config(tmp_path_factory, tiny_gguf, tiny_draft_gguf):
    return tiny_models_toml(tmp_path_factory.mktemp("serve"), tiny_gguf, tiny_draft_gguf)


def _one_line_error(result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgespec: error:") and "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture
def env(config, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    return tmp_path


def test_serve_refuses_bad_flags_in_one_line_before_loading(env):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        assert "cannot listen on 127.0.0.1:" in _one_line_error(
            CliRunner().invoke(cli.main, ["serve", "--port", port]), 2
        )
    assert "--host" in _one_line_error(CliRunner().invoke(cli.main, ["serve", "--host", "no.such.host.invalid"]), 2)
    for host in ("a" * 64, "\udcff"):  # names the IDNA codec refuses (a raw byte arrives as a surrogate)
        assert "--host" in _one_line_error(CliRunner().invoke(cli.main, ["serve", "--host", host]), 2)
    _one_line_error(CliRunner().invoke(cli.main, ["serve", "--port", "70000"]), 2)
    _one_line_error(CliRunner().invoke(cli.main, ["serve", "-m", "tiny-ngram", "--draft", "model"]), 2)
    _one_line_error(CliRunner().invoke(cli.main, ["serve", "--temperature", "nan"]), 2)
    assert "--api-key" in _one_line_error(CliRunner().invoke(cli.main, ["serve", "--api-key", "k\udcff"]), 2)


def test_a_client_that_connects_before_the_server_runs_waits_instead_of_being_refused():
    """`serve` prints where it serves before uvicorn starts accepting; the socket already listens,
    so an editor that connects at once is queued (a bound socket alone refused it: seen in CI)."""
    sock = listen("127.0.0.1", 0)
    try:
        with socket.create_connection(sock.getsockname()[:2], timeout=5):
            pass
    finally:
        sock.close()


def test_connections_to_the_listening_socket_send_without_delay():
    """The server's side of a connection has Nagle's algorithm off, as asyncio sets it for uvicorn
    (`loop.create_server(sock=...)`): with it on, a reply on a kept-alive connection waited out a
    40 ms delayed ACK."""
    sock = listen("127.0.0.1", 0)
    accepted: list[int] = []

    async def serve_one() -> None:
        loop = asyncio.get_running_loop()
        made = loop.create_future()

        class Protocol(asyncio.Protocol):
            def connection_made(self, transport) -> None:
                accepted.append(transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                made.set_result(None)

        server = await loop.create_server(Protocol, sock=sock)
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        await asyncio.wait_for(made, 10)
        writer.close()
        server.close()

    asyncio.run(serve_one())
    assert accepted and accepted[0] != 0


@pytest.mark.subprocess
def test_edgespec_serve_answers_then_stops_on_ctrl_c(env):
    """The real command in a process of its own: it says where it serves, answers, and Ctrl-C ends
    it with 130 and one line."""
    process = subprocess.Popen(
        [sys.executable, "-m", "edgespec", "serve", "--port", "0", "--queue", "1"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stderr], daemon=True).start()
    try:
        deadline, url = time.monotonic() + 60, None
        while url is None:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if "serving" in line:
                url = re.search(r"(http://\S+/v1)", line).group(1)
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=30)
        assert client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4).choices[0].message.content
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130
    finally:
        process.kill()
        process.wait()
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert rest[-1].strip() == "edgespec: interrupted" and not any("Traceback" in line for line in rest)
