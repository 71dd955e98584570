"""`serve` measures the machine's speed before its first request, not during it: /health says 503
(llama.cpp's loading shape) until the measurement ends, and a request sent meanwhile waits its turn
behind it instead of paying for it unannounced."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from click.testing import CliRunner
from fastapi.testclient import TestClient

from edgespec.cli import main as cli
from edgespec.cli import serve as serve_command
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import GenerateSettings
from edgespec.engine.engine_thread import EngineThread
from edgespec.server.engine_worker import EngineWorker
from tests.fakes import fake_engine
from tests.live_server import serving_app

TIMEOUT = 30.0


def test_health_is_503_while_the_speed_is_measured_and_a_request_waits_behind_it():
    engine = fake_engine()
    measuring, measured = threading.Event(), threading.Event()
    real_cost_model = engine.cost_model

    def held_cost_model(stop=None, quiet=False):
        measuring.set()
        assert measured.wait(TIMEOUT)
        return real_cost_model(stop, quiet)

    engine.cost_model = held_cost_model
    worker = EngineWorker(engine, EngineThread(), queue_size=2)
    settings = GenerateSettings()  # k auto: priced by the cost curve
    try:
        with serving_app(worker, settings) as live, ThreadPoolExecutor(1) as pool:
            worker.prepare(settings)
            assert measuring.wait(TIMEOUT)
            health = httpx.get(live.root + "/health", timeout=TIMEOUT)
            assert health.status_code == 503
            assert health.json()["error"]["type"] == "unavailable_error"
            assert health.json()["error"]["code"] == "loading"
            body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            reply = pool.submit(httpx.post, live.url + "/chat/completions", json=body, timeout=TIMEOUT)
            deadline = time.monotonic() + TIMEOUT
            while not worker._jobs:  # queued, behind the measurement on the engine thread
                assert not reply.done() and time.monotonic() < deadline, "the request was not queued"
                time.sleep(0.01)
            assert not reply.done()
            measured.set()
            assert reply.result().status_code == 200, reply.result().text
            assert engine.costs.calibrated
            assert httpx.get(live.root + "/health", timeout=TIMEOUT).json()["status"] == "ok"
    finally:
        measured.set()
        worker.close()


def test_a_server_whose_k_needs_no_curve_is_ready_at_once():
    engine = fake_engine()
    worker = EngineWorker(engine, EngineThread(), queue_size=2)
    settings = GenerateSettings(policy=PolicyChoice.parse("3"))
    try:
        with serving_app(worker, settings) as live:
            worker.prepare(settings)
            assert httpx.get(live.root + "/health", timeout=TIMEOUT).status_code == 200
            assert not engine.costs.calibrated
    finally:
        worker.close()


def test_a_server_that_stops_while_it_measures_stops_within_a_pass_and_keeps_none_of_it(own_calibration_file):
    """Ctrl-C during the first start's measurement (30 s at most) must not wait for its end."""
    engine = fake_engine(verify=lambda n: 0.1)  # real seconds: about 5 s to measure every size 3 times
    worker = EngineWorker(engine, EngineThread(), queue_size=2)
    worker.prepare(GenerateSettings())
    deadline = time.monotonic() + TIMEOUT
    while not engine.target.evals:
        assert time.monotonic() < deadline, "the measurement did not start"
        time.sleep(0.01)
    worker.stop()
    worker.close()  # frees the engine on its thread, after what runs there
    assert len(engine.target.evals) < 1 + 3 * 17  # the warm-up, and some of the timings
    assert worker.ready.is_set() and not engine.costs.calibrated and not own_calibration_file.exists()


def test_serve_is_ready_only_once_the_speed_is_measured(monkeypatch, tmp_path, own_calibration_file, tiny_gguf):
    """The command as it runs, with uvicorn swapped for a client that polls /health: when it first
    says ok, the curve is measured and saved, before any request."""
    config = tmp_path / "models.toml"
    config.write_text(
        f'default = "tiny"\n[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
        '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "ngram"\ncontext = 256\n'
    )
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    seen: list[tuple[int, bool]] = []

    class PollingServer:
        def __init__(self, app, on_stop):
            self.app = app

        def run(self, sockets):
            with TestClient(self.app, "http://localhost") as client:
                deadline = time.monotonic() + TIMEOUT
                while (health := client.get("/health")).status_code == 503 and time.monotonic() < deadline:
                    time.sleep(0.01)
                seen.append((health.status_code, own_calibration_file.exists()))

    monkeypatch.setattr(serve_command, "uvicorn_server", PollingServer)
    result = CliRunner().invoke(cli.main, ["serve", "--port", "0"])
    assert result.exit_code == 0, result.stderr
    assert seen == [(200, True)]
