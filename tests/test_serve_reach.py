"""Who `edgespec serve` answers (server/reach.py), on the tiny pair: a request naming another host
(a DNS-rebinding page) or sent from another web page is a 403 naming it, while curl, editors and
the openai SDK on 127.0.0.1 / localhost / [::1] are served; the flags that admit more; a queued
client that leaves frees its place at once; and a server other machines reach keeps no history."""

from __future__ import annotations

import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from edgespec.cli import main as cli
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import GenerateSettings
from edgespec.models.config import load_registry
from edgespec.server.reach import Reach, host_name
from tests.live_server import HELLO, serving, serving_app, tiny_models_toml

TIMEOUT = httpx.Timeout(30.0)
SETTINGS = GenerateSettings(draft=DraftChoice.MODEL, policy=PolicyChoice("fixed", 3))
BODY = {"model": "tiny", "messages": HELLO, "max_tokens": 4}


@pytest.fixture(scope="module")
def config(tmp_path_factory, tiny_gguf, tiny_draft_gguf):
    return tiny_models_toml(tmp_path_factory.mktemp("reach"), tiny_gguf, tiny_draft_gguf)


@pytest.fixture(scope="module")
def live(config):
    with serving(load_registry(config).pair("tiny"), SETTINGS, queue_size=1) as live:
        yield live


def port_of(live) -> int:
    return int(live.root.rsplit(":", 1)[1])


def refusal(response: httpx.Response, code: str) -> str:
    """The one-line message of an OpenAI-shaped 403 with `code`."""
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    assert "\n" not in error["message"]
    return error["message"]


def chat(live, headers: dict[str, str] | None = None, base: str | None = None) -> httpx.Response:
    return httpx.post((base or live.url) + "/chat/completions", json=BODY, headers=headers or {}, timeout=TIMEOUT)


def test_a_request_for_another_host_is_refused_naming_it(live):
    """What a page on evil.example sends once its name resolves to 127.0.0.1."""
    port = port_of(live)
    for path in ("/chat/completions", "/models"):
        response = httpx.request(
            "POST" if "chat" in path else "GET",
            live.url + path,
            json=BODY if "chat" in path else None,
            headers={"Host": f"evil.example:{port}"},
            timeout=TIMEOUT,
        )
        assert "'evil.example'" in refusal(response, "host_not_allowed")
    assert "--allow-host" in refusal(
        httpx.get(live.root + "/health", headers={"Host": "evil.example"}), "host_not_allowed"
    )


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST", "[::1]", "::1"])
def test_loopback_names_pass_with_or_without_the_port(live, host):
    port = port_of(live)
    for header in (host, f"{host}:{port}") if host != "::1" else (host,):
        response = httpx.get(live.url + "/models", headers={"Host": header}, timeout=TIMEOUT)
        assert response.status_code == 200, (header, response.text)
    assert chat(live, {"Host": f"{host}:{port}" if host != "::1" else host}).json()["choices"][0]["message"]


def test_a_request_from_another_web_page_is_refused_and_the_servers_own_origin_passes(live):
    """A page can send a request to 127.0.0.1 without rebinding (a form's text/plain POST needs no
    preflight): its Origin gives it away."""
    message = refusal(chat(live, {"Origin": "http://evil.example"}), "origin_not_allowed")
    assert "'http://evil.example'" in message and "--allow-origin" in message
    refusal(chat(live, {"Origin": "null"}), "origin_not_allowed")  # a sandboxed frame, a file:// page
    refusal(chat(live, {"Origin": f"http://localhost:{port_of(live) + 1}"}), "origin_not_allowed")
    assert chat(live, {"Origin": live.root}).status_code == 200


def test_allowed_hosts_and_origins_pass(live):
    reach = Reach(hosts=("my.box",), origins=("http://localhost:3000",))
    with serving_app(live.worker, SETTINGS, reach=reach) as allowed:
        assert chat(allowed, {"Host": "my.box:80"}).status_code == 200
        assert chat(allowed, {"Origin": "http://localhost:3000"}).status_code == 200
        refusal(chat(allowed, {"Host": "other.box"}), "host_not_allowed")
    with serving_app(live.worker, SETTINGS, reach=Reach(hosts=("*",), origins=("*",))) as anything:
        assert chat(anything, {"Host": "other.box", "Origin": "http://evil.example"}).status_code == 200


def test_with_an_api_key_the_key_decides_and_other_pages_are_still_refused(live):
    with serving_app(live.worker, SETTINGS, api_key="sekret") as keyed:
        key = {"Authorization": "Bearer sekret"}
        assert chat(keyed, {**key, "Host": "proxy.example"}).status_code == 200
        refusal(chat(keyed, {**key, "Origin": "http://evil.example"}), "origin_not_allowed")


def test_a_server_on_every_address_answers_its_ip_literals_but_not_names():
    everywhere = Reach(bound="0.0.0.0")
    assert everywhere.host_allowed("192.168.1.20") and everywhere.host_allowed("fe80::1")
    assert not everywhere.host_allowed("evil.example")
    assert not Reach().host_allowed("192.168.1.20")  # a loopback server answers loopback only


@given(st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,20}){0,3}", fullmatch=True), st.integers(1, 65535))
def test_no_other_name_passes_with_any_port(name, port):
    reach = Reach()
    assert host_name(f"{name}:{port}") == name
    assert reach.host_allowed(name) == (name == "localhost")


def test_a_queued_client_that_leaves_frees_its_place_at_once(live):
    """The module's server has --queue 1: one request runs, one waits. The waiting one's client
    leaves; a new request is then queued, not refused while the running one still holds the engine."""
    engine, worker = live.worker.engine, live.worker
    release = threading.Event()
    real = engine.generate_tokens

    def held(*args, **kwargs):  # the running request holds the engine until released
        release.wait(30)
        yield from real(*args, **kwargs)

    engine.generate_tokens = held
    try:
        running = threading.Thread(target=chat, args=(live,))
        running.start()
        wait_until(lambda: len(worker._jobs) == 1)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(live.url + "/chat/completions", json=BODY, timeout=httpx.Timeout(5, read=0.3))
        wait_until(lambda: all(job.cancel.is_set() for job in worker._jobs if not job.taken))
        replies: list[httpx.Response] = []
        newcomer = threading.Thread(target=lambda: replies.append(chat(live)))
        newcomer.start()
        wait_until(lambda: replies or len(worker._jobs) == 3)
        release.set()
        newcomer.join(30)
        running.join(30)
    finally:
        release.set()
        del engine.generate_tokens
    assert replies and replies[0].status_code == 200, replies[0].text


def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


# -- the command ---------------------------------------------------------------------------------


def test_bad_allow_flags_are_one_line_before_anything_loads(config, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    for args in (["--allow-origin", "evil.example"], ["--allow-origin", "null"], ["--allow-host", "a b"]):
        result = CliRunner().invoke(cli.main, ["serve", "--port", "0", *args])
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert "not an origin" in result.stderr or "not a host name" in result.stderr


def _own_address() -> str | None:
    """An address of this machine that is not loopback, where it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, a route is chosen
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


@pytest.mark.subprocess
def test_a_server_other_machines_reach_keeps_no_history_and_answers_its_address(config, tmp_path):
    """`serve --host ADDRESS` (not loopback): one line says the history is off (its figures would
    tell one client what another asked); a request to its address is answered, and recorded
    nowhere, and one naming another host is not."""
    address = _own_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    env = {k: v for k, v in os.environ.items() if k != "EDGESPEC_NO_HISTORY"}
    env |= {
        "EDGESPEC_CONFIG": str(config),
        "EDGESPEC_HOME": str(tmp_path),
        "PYTHONPATH": str(Path(__file__).parents[1]),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "edgespec", "serve", "--host", address, "--port", "0", "--k", "3"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stderr], daemon=True).start()
    said: list[str] = []
    try:
        deadline, url = time.monotonic() + 60, None
        while url is None:
            said.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
            if "serving" in said[-1]:
                url = re.search(r"(http://\S+/v1)", said[-1]).group(1)
        assert any("no history is drafted from or kept" in line for line in said), said
        assert httpx.post(url + "/chat/completions", json=BODY, timeout=TIMEOUT).status_code == 200
        refusal(httpx.get(url + "/models", headers={"Host": "evil.example"}, timeout=TIMEOUT), "host_not_allowed")
    finally:
        process.kill()
        process.wait()
    assert not (tmp_path / "history").exists()
