"""How long `GET /health` takes while `edgespec serve` checks one hostile request at the body cap
(issue 38: 20,000 tools held /health for 7.7 s when the checks ran on the event loop). The server is
a real `edgespec serve` process on the default pair; each request is sent from a thread while the
main thread asks /health every 20 ms until the request is answered. The most and the median
/health seconds per request, and the request's own status and seconds.

    .venv/bin/python benchmarks/health_latency.py --json benchmarks/results/health_latency.json
"""

from __future__ import annotations

import http.client
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import click
import httpx

from edgespec.server.app import MAX_BODY_BYTES
from edgespec.util.provenance import provenance

sys.path.insert(0, str(Path(__file__).parent))
from result_file import write_result  # noqa: E402
from serve_throughput import start_server  # noqa: E402

DESCRIPTION = "d" * 125


def _tools(n: int, **function) -> list[dict]:
    return [
        {"type": "function", "function": {"name": f"tool_{i}", "description": DESCRIPTION, **function}}
        for i in range(n)
    ]


def _chat(**fields) -> dict:
    return {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, **fields}


BODIES = {
    "20,000 tools, tool_choice none": _chat(tools=_tools(20_000), tool_choice="none"),
    "20,000 tools, tool_choice required": _chat(tools=_tools(20_000), tool_choice="required"),
    "80,000 tools with bad names": _chat(tools=[{"type": "function", "function": {"name": "a b"}}] * 80_000),
    "response_format of 12,000 properties": _chat(
        response_format={
            "type": "json_schema",
            "json_schema": {
                "name": "huge",
                "schema": {"type": "object", "properties": {f"p_{i:05d}": {"type": "string"} for i in range(12_000)}},
            },
        }
    ),
}


def _health(netloc: str) -> None:
    client = http.client.HTTPConnection(netloc, timeout=600)
    client.request("GET", "/health")
    client.getresponse().read()
    client.close()


def _measure(root: str, body: bytes | None) -> dict:
    """/health polled every 20 ms while `body` is answered; for None, for two seconds of nothing
    else (the floor)."""
    reply: dict = {}

    def send() -> None:
        start = time.perf_counter()
        if body is None:
            time.sleep(2)
        else:
            r = httpx.post(
                root + "/v1/chat/completions", content=body, headers={"content-type": "application/json"}, timeout=600
            )
            reply["status"] = r.status_code
        reply["seconds"] = time.perf_counter() - start

    thread = threading.Thread(target=send)
    health: list[float] = []
    # a new connection per poll, as a health checker makes one
    netloc = urlsplit(root).netloc
    _health(netloc)
    thread.start()
    while thread.is_alive():
        start = time.perf_counter()
        _health(netloc)
        health.append(time.perf_counter() - start)
        time.sleep(0.02)
    thread.join()
    return {
        "status": "-",
        **reply,
        "bytes": len(body or b""),
        "health_polls": len(health),
        "health_max_s": max(health),
        "health_median_s": statistics.median(health),
    }


@click.command()
@click.option("--json", "json_path", type=click.Path(path_type=Path))
def main(json_path: Path | None) -> None:
    server, url = start_server(None, queue=1)
    root = url.removesuffix("/v1")
    try:
        while httpx.get(root + "/health", timeout=60).status_code != 200:  # 503 while it measures its speed
            time.sleep(0.5)
        model = httpx.get(root + "/v1/models").json()["data"][0]["id"]
        results = {"nothing else": _measure(root, None)}
        for name, doc in BODIES.items():
            body = json.dumps({**doc, "model": model}).encode()
            assert len(body) <= MAX_BODY_BYTES, (name, len(body))
            results[name] = _measure(root, body)
        for name, row in results.items():
            print(
                f"{name:40s} {row['bytes'] / 2**20:4.1f} MiB  {row['status']} in {row['seconds']:5.1f} s; "
                f"/health max {row['health_max_s'] * 1000:5.0f} ms, median {row['health_median_s'] * 1000:4.0f} ms "
                f"({row['health_polls']} polls)"
            )
    finally:
        server.terminate()
        server.wait(timeout=60)
    if json_path:
        write_result(json_path, {"meta": provenance(), "requests": results})


if __name__ == "__main__":
    main()
