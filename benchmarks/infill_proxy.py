"""A recording proxy between an editor and the server: every request is passed on as it came, and
its kind, status, seconds and the server's figures are kept (never the code it carried).

A llama.vim request's kind is read from its body: `ring` (`n_predict` 0: the background read of
the ring's chunks), `quick` (`t_max_predict_ms` 250: the first request at a position) or `follow`
(the speculative follow-up, as if the suggestion shown were accepted).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

HOP_HEADERS = {"host", "content-length", "connection", "transfer-encoding", "accept-encoding", "expect"}


def request_kind(body: dict) -> str:
    if body.get("n_predict") == 0:
        return "ring"
    return "quick" if body.get("t_max_predict_ms") == 250 else "follow"


def summary(body: dict) -> dict:
    """What a record keeps of a request: its shape, not its text."""
    return {
        "n_predict": body.get("n_predict"),
        "t_max_predict_ms": body.get("t_max_predict_ms"),
        "n_indent": body.get("n_indent"),
        "input_extra": len(body.get("input_extra") or []),
        "prefix_chars": len(body.get("input_prefix") or ""),
        "suffix_chars": len(body.get("input_suffix") or ""),
        "prompt_chars": len(body.get("prompt") or ""),
        "fields": sorted(body),
    }


def reply_figures(reply: dict) -> dict:
    """The server's figures in a reply, flattened by `response_fields` or nested under `timings`."""
    timings = reply.get("timings") if isinstance(reply.get("timings"), dict) else {}
    out = {"content_chars": len(reply["content"]) if isinstance(reply.get("content"), str) else None}
    for key in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms"):
        out[key] = reply.get(f"timings/{key}", timings.get(key))
    out["tokens_cached"] = reply.get("tokens_cached")
    out["truncated"] = reply.get("truncated")
    return out


class RecordingProxy:
    """Listens on 127.0.0.1 (a free port) and forwards to `upstream` until closed."""

    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.records: list[dict] = []
        self.lock = threading.Lock()
        self.inflight = 0
        self.last_change = time.monotonic()  # when a request last started or ended
        self.started = time.perf_counter()
        self.client = httpx.Client(timeout=600)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def wait_idle(self, most_s: float, quiet_s: float = 0.0) -> None:
        """Until no request is in flight and none has started or ended for `quiet_s` (an editor
        may send the next one a moment after an answer), `most_s` at most."""
        deadline = time.monotonic() + most_s
        while time.monotonic() < deadline:
            if not self.inflight and time.monotonic() - self.last_change >= quiet_s:
                return
            time.sleep(0.05)

    def close(self) -> None:
        self.wait_idle(60)  # a request the editor sent before it quit is still answered
        self.server.shutdown()
        self.server.server_close()
        self.client.close()

    def forward(self, method: str, path: str, headers: dict, data: bytes) -> tuple[int, dict, bytes, dict]:
        start = time.perf_counter()
        record: dict = {"t": round(start - self.started, 3), "method": method, "endpoint": path.lstrip("/")}
        try:
            body = json.loads(data) if data else {}
        except ValueError:
            body = {}
        if isinstance(body, dict) and body:
            record |= {"kind": request_kind(body), "request": summary(body)}
        with self.lock:
            self.inflight += 1
            self.last_change = time.monotonic()
        try:
            reply = self.client.request(method, self.upstream + path, headers=headers, content=data)
            status, content, reply_headers = reply.status_code, reply.content, dict(reply.headers)
        except httpx.HTTPError as e:
            status, content, reply_headers = 502, json.dumps({"error": str(e)}).encode(), {}
        finally:
            with self.lock:
                self.inflight -= 1
                self.last_change = time.monotonic()
        record |= {"status": status, "seconds": round(time.perf_counter() - start, 4)}
        try:
            parsed = json.loads(content)
            record |= {"json": True, **(reply_figures(parsed) if isinstance(parsed, dict) else {})}
            if status != 200:
                record["error"] = str(parsed.get("error", parsed))[:300] if isinstance(parsed, dict) else str(parsed)
        except ValueError:
            record |= {"json": False, "error": content[:300].decode(errors="replace")}
        with self.lock:
            self.records.append(record)
        return status, reply_headers, content, record

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # so that curl's `Expect: 100-continue` is answered at once

            def _pass(self) -> None:
                data = self.rfile.read(int(self.headers.get("content-length") or 0))
                # llama.vim sends "Authorization: Bearer " without a key; the space is the header's
                # optional whitespace, which a server's parser drops and httpx refuses to send
                headers = {k: v.strip() for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
                status, reply_headers, content, record = proxy.forward(self.command, self.path, headers, data)
                try:
                    self.send_response(status)
                    for key, value in reply_headers.items():
                        if key.lower() not in HOP_HEADERS | {"content-encoding", "date", "server"}:
                            self.send_header(key, value)
                    self.send_header("content-length", str(len(content)))
                    self.end_headers()
                    self.wfile.write(content)
                except (BrokenPipeError, ConnectionResetError):
                    record["client_gone"] = True  # the editor stopped its curl before the answer came

            do_GET = do_POST = _pass

            def log_message(self, *args) -> None:  # the records are the log
                pass

        return Handler
