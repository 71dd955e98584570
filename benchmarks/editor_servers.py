"""The two servers of the editor replays, as processes on 127.0.0.1 that the replay starts and stops,
and the one timed request both are asked with.

- `edgespec serve` on the pair (default: the default pair), with a home of its own: the models
  folder linked in and the machine's calibration copied, so that no history or prompt cache of an
  earlier run is drafted from or read.
- llama-cpp-python's own server (`python -m llama_cpp.server`) on the GGUF the pair's target reads,
  its prefix cache on (`--cache true`), with the pair's context and one thread per physical core (as
  `benchmarks/peer.py` runs `Llama`: its default of one thread would be unfair to it). It needs
  packages edgespec does not pin (sse-starlette, starlette-context<0.4, pydantic-settings), so it
  runs from a Python where they are installed (`--peer-python`; benchmarks/README.md says how).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

START_S = 300  # loading the pair and, on a machine without a saved cost curve, measuring it
DRAIN = 200  # lines of a server's stderr kept, for saying why it failed


def isolated_home() -> Path:
    """A fresh edgespec home holding the real one's models (linked) and calibration (copied)."""
    from edgespec.util.paths import home

    real, new = home(), Path(tempfile.mkdtemp(prefix="edgespec-editor-replay-"))
    (new / "models").symlink_to(real / "models")
    for name in ("calibration.json",):
        if (real / name).exists():
            shutil.copy2(real / name, new / name)
    return new


def _drain(stream, kept: list[str]) -> None:
    for line in stream:
        kept.append(line)
        del kept[:-DRAIN]


def _wait_ready(url: str, process: subprocess.Popen, kept: list[str]) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}:\n{''.join(kept[-20:])}")
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the server was not ready in {START_S} s:\n{''.join(kept[-20:])}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


@contextmanager
def _running(args: list[str], ready_path: str, port: int, env: dict | None = None) -> Iterator[str]:
    """The server `args` start, listening on `port`, until the block ends; yields its root URL once
    `ready_path` answers 200. Its stderr is kept for the message of a start that fails."""
    process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    kept: list[str] = []
    threading.Thread(target=_drain, args=(process.stderr, kept), daemon=True).start()
    root = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(root + ready_path, process, kept)
        yield root
    finally:
        _stop(process)


@contextmanager
def edgespec_server(pair: str | None, extra: list[str] = ()) -> Iterator[str]:  # type: ignore[assignment]
    """`edgespec serve` until the block ends; yields its root URL (no /v1)."""
    home = isolated_home()
    port = _free_port()
    args = [sys.executable, "-m", "edgespec", "serve", "--port", str(port), *(["-m", pair] if pair else []), *extra]
    try:
        with _running(args, "/health", port, {**os.environ, "EDGESPEC_HOME": str(home)}) as root:
            yield root
    finally:
        shutil.rmtree(home, ignore_errors=True)


@contextmanager
def peer_server(python: str, model: Path, n_ctx: int, threads: int) -> Iterator[str]:
    """llama-cpp-python's server on `model` until the block ends; yields its root URL."""
    port = _free_port()
    args = [python, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port)]
    args += ["--n_ctx", str(n_ctx), "--n_threads", str(threads), "--n_threads_batch", str(threads)]
    args += ["--cache", "true", "--verbose", "false"]
    with _running(args, "/v1/models", port) as root:
        yield root


def pair_files(pair_name: str | None) -> dict:
    """The pair's name, the target file it reads (the peer reads the same), its context and threads."""
    from edgespec.backends import llamacpp_runtime
    from edgespec.models.config import load_registry
    from edgespec.models.machine_layout import machine_target
    from edgespec.models.store import Store

    registry = load_registry(None)
    pair = registry.pairs[pair_name or registry.default_pair]
    store = Store()
    _, target, _ = machine_target(store, pair, store.ensure(pair.target, pair.name))
    threads = pair.threads or llamacpp_runtime.default_threads()
    return {"pair": pair.name, "target": target, "context": pair.context, "threads": threads}


def _events(response: httpx.Response) -> Iterator[dict]:
    """The JSON objects of a server-sent event stream (`data: {...}` lines; `[DONE]` ends it)."""
    for line in response.iter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        yield json.loads(data)


def timed_post(client: httpx.Client, url: str, body: dict) -> dict:
    """POST `body`, streamed or not as it says: the status, the seconds to the first text and to the
    end, the text, and the last JSON object (a whole reply's, or a stream's last event)."""
    start = time.perf_counter()
    first, text, last = None, "", {}
    with client.stream("POST", url, json=body, timeout=600) as response:
        if response.status_code != 200 or not body.get("stream"):
            raw = response.read()
            end = time.perf_counter()
            try:
                last = json.loads(raw)
            except ValueError:
                last = {"raw": raw.decode(errors="replace")[:500]}
            text = _text(last) if response.status_code == 200 else ""
            return {"status": response.status_code, "first_s": None, "whole_s": end - start, "text": text, "last": last}
        for event in _events(response):
            piece = _text(event)
            if piece and first is None:
                first = time.perf_counter()
            text += piece
            last = event
        end = time.perf_counter()
    first_s = None if first is None else first - start
    return {"status": 200, "first_s": first_s, "whole_s": end - start, "text": text, "last": last}


def _text(obj: dict) -> str:
    """A reply's text: llama.cpp's `content`, or an OpenAI completion's `choices[0].text`."""
    if "content" in obj:
        return obj.get("content") or ""
    choices = obj.get("choices") or [{}]
    return choices[0].get("text") or ""


def figures(last: dict) -> dict:
    """llama.cpp's figures in a reply, whether flattened by `response_fields` or nested."""
    timings = last.get("timings") or {}
    out = {}
    for key in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms"):
        value = last.get(f"timings/{key}", timings.get(key))
        if value is not None:
            out[key] = value
    for key in ("tokens_cached", "truncated", "stop_type"):
        if key in last:
            out[key] = last[key]
    usage = last.get("usage") or {}
    if "prompt_tokens" in usage:
        out["prompt_tokens"] = usage["prompt_tokens"]
    return out


def error_text(last: dict) -> str | None:
    error = last.get("error")
    if isinstance(error, dict):
        return str(error.get("message"))[:300]
    return None if error is None else re.sub(r"\s+", " ", str(error))[:300]


class InfillText:
    """edgespec's `/infill` prompt for a request, built by edgespec's own code over the target's
    vocabulary (llama.cpp loads it alone, no weights) and written out as text with its special
    tokens: what a server that reads a raw prompt (llama-cpp-python's) reads as the same tokens,
    cut where edgespec cuts a part that does not fit."""

    def __init__(self, target: Path, n_ctx: int, order: str | None):
        import llama_cpp

        from edgespec.engine.infill import DEFAULT_ORDER, fim_marks

        self.vocab = llama_cpp.Llama(model_path=str(target), vocab_only=True, verbose=False)
        self.n_ctx = n_ctx
        self.order = order or DEFAULT_ORDER
        self.marks = fim_marks(self)  # type: ignore[arg-type]  # what infill needs of a Backend

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        return self.vocab.tokenize(text.encode(), add_bos=False, special=special)

    def text(self, body: dict) -> tuple[str, int]:
        """The prompt for an `/infill` body as text, and its length in tokens."""
        from edgespec.engine.infill import ExtraFile, Infill, infill_prompt
        from edgespec.server.native_routes import DEFAULT_ROOM

        extra = tuple(ExtraFile(c.get("filename", "tmp"), c["text"]) for c in body.get("input_extra", []))
        infill = Infill(body.get("input_prefix", ""), body.get("input_suffix", ""), body.get("prompt", ""), extra)
        room = max(body.get("n_predict") or 0, min(DEFAULT_ROOM, self.n_ctx // 4))  # as serve leaves it
        made = infill_prompt(self, self.marks, infill, room, self.order)  # type: ignore[arg-type]
        return self.vocab.detokenize(made.tokens, special=True).decode(errors="replace"), len(made.tokens)
