"""llama.vim in a headless Vim (benchmarks/llama_vim_replay.py) drives its requests through the
recording proxy: against a stub that answers as llama.cpp's /infill does (compact JSON, the figures
flattened), suggestions are shown and one is accepted with Tab, the ring is read in the
background, and every request is recorded. Needs vim, tmux and curl, and a clone of
ggml-org/llama.vim named by $LLAMA_VIM; skipped, saying which, without them."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import llama_vim_replay  # noqa: E402

pytestmark = pytest.mark.subprocess

SUGGESTION = "i = 1\n    return i\n"


class LlamaCppStub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, body: dict) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()  # llama.vim reads only compact JSON
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send({"status": "ok"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        read_only = body.get("n_predict") == 0
        self._send(
            {"content": "" if read_only else SUGGESTION, "tokens_cached": 40, "truncated": False}
            | {"timings/prompt_n": 3, "timings/prompt_ms": 1.0, "timings/prompt_per_second": 3000.0}
            | {"timings/predicted_n": 0 if read_only else 6, "timings/predicted_ms": 2.0}
            | {"timings/predicted_per_second": 3000.0}
        )

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def stub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), LlamaCppStub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def llama_vim() -> Path:
    missing = [tool for tool in ("vim", "tmux", "curl", "git") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (apt-get install vim tmux curl)")
    clone = os.environ.get("LLAMA_VIM")
    if not clone or not Path(clone).exists():
        pytest.skip("no llama.vim clone: set LLAMA_VIM to a clone of ggml-org/llama.vim")
    return Path(clone)


def test_llama_vim_shows_suggestions_reads_its_ring_and_every_request_is_answered(llama_vim):
    doc = llama_vim_replay.replay(llama_vim, "colorsys.py:yiq_to_rgb", 3, 0.6, stub)
    check = doc["checks"]
    assert llama_vim_replay.passed(check), check
    assert check["accepted"] and check["accepted"].strip().startswith("i = 1")
    kinds = {r["kind"] for r in doc["requests"]}
    assert {"quick", "follow", "ring"} <= kinds
    quick = next(r for r in doc["requests"] if r["kind"] == "quick")
    assert quick["request"]["t_max_predict_ms"] == 250 and "input_extra" in quick["request"]["fields"]
    assert quick["prompt_n"] == 3 and quick["tokens_cached"] == 40  # the flattened figures, read back
