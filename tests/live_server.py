"""A live `edgespec serve` app for tests: uvicorn in a thread on 127.0.0.1 at a free port, over an
engine loaded on its own engine thread, started and stopped by the test (every wait is bounded)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from edgespec.cli.serve import base_url, listen, uvicorn_server
from edgespec.engine.engine import GenerateSettings
from edgespec.engine.engine_thread import EngineThread
from edgespec.engine.options import EngineOptions
from edgespec.models.config import load_registry
from edgespec.models.registry import PairConfig
from edgespec.server.app import create_app
from edgespec.server.engine_worker import EngineWorker
from edgespec.server.reach import LOOPBACK, Reach

START_TIMEOUT_S = 20
HELLO = [{"role": "user", "content": "hello there"}]


def tiny_models_toml(folder: Path, tiny_gguf: Path, tiny_draft_gguf: Path) -> Path:
    """A models.toml in `folder` with the tiny GGUF pair three ways: drafting with the draft model
    ("tiny", the default), with n-grams ("tiny-ngram") and not at all ("tiny-plain")."""
    path = folder / "models.toml"
    path.write_text(
        f'default = "tiny"\n'
        f'[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
        f'[models.d]\nformat = "gguf"\npath = "{tiny_draft_gguf}"\n'
        '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 256\n'
        '[pairs.tiny-ngram]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "ngram"\ncontext = 256\n'
        '[pairs.tiny-plain]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "none"\ncontext = 256\n'
    )
    return path


def ngram_pair_toml(folder: Path, target: Path, name: str = "tiny") -> str:
    """A models.toml in `folder` with one pair, `name`: `target` drafted by n-grams, a 512-token
    context (the fill-in-the-middle tests' tiny model)."""
    path = folder / "models.toml"
    path.write_text(
        f'default = "{name}"\n[models.t]\nformat = "gguf"\npath = "{target}"\n'
        f'[pairs.{name}]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "ngram"\ncontext = 512\n'
    )
    return str(path)


@dataclass
class Live:
    url: str  # the API's base URL, ending in /v1
    worker: EngineWorker

    @property
    def root(self) -> str:
        return self.url.removesuffix("/v1")


@contextlib.contextmanager
def serving_app(
    worker: EngineWorker, settings: GenerateSettings, api_key: str | None = None, reach: Reach = LOOPBACK
) -> Iterator[Live]:
    """Serve `worker`'s engine on 127.0.0.1 until the block ends (the worker stays open); `reach`:
    the hosts and origins allowed beyond the server's own (server/reach.py)."""
    sock = listen("127.0.0.1", 0)
    # on_stop does nothing: the worker outlives this server (a test serves one worker under several
    # apps); `edgespec serve` stops its worker there (tests/test_interrupts.py runs it so)
    server = uvicorn_server(create_app(worker, settings, api_key, reach=reach), lambda: None, log_level="warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield Live(base_url(sock), worker)
    finally:
        server.should_exit = True
        thread.join(timeout=START_TIMEOUT_S)
        sock.close()


@contextlib.contextmanager
def serving(pair: PairConfig, settings: GenerateSettings, queue_size: int = 8) -> Iterator[Live]:
    """Load `pair` on an engine thread and serve it, as `edgespec serve` does."""
    engine_thread = EngineThread()
    engine, _ = engine_thread.call(EngineOptions(pair=pair, draft=settings.draft).check().open)
    worker = EngineWorker(engine, engine_thread, queue_size)
    try:
        with serving_app(worker, settings) as live:
            yield live
    finally:
        worker.close()


@contextlib.contextmanager
def serving_engine(engine, settings: GenerateSettings, queue_size: int = 8) -> Iterator[Live]:
    """Serve an engine the caller loaded and keeps (the session's real pair), from an engine thread
    of its own as `edgespec serve` does; the engine stays open when the block ends."""
    engine_thread = EngineThread()
    try:
        with serving_app(EngineWorker(engine, engine_thread, queue_size), settings) as live:
            yield live
    finally:
        engine_thread.shutdown()


def tiny_tool_pair(folder: Path, target: Path, draft: Path, context: int) -> PairConfig:
    """The tiny GGUF pair (`target` drafted by `draft`) with the hermes tool-call format, from a
    models.toml written in `folder`."""
    path = folder / "models.toml"
    path.write_text(
        f'default = "tiny"\n[models.t]\nformat = "gguf"\npath = "{target}"\n'
        f'[models.d]\nformat = "gguf"\npath = "{draft}"\n'
        f'[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = {context}\n'
        'tool_format = "hermes"\n'
    )
    return load_registry(path).pair("tiny")
