"""`edgespec serve`: the click command that loads the pair and runs the server (registered in cli/main.py).

The address is bound before the model loads, so a port in use or a bad --host is a one-line error
at once; uvicorn then serves on that socket. Only the request line of each request is logged
(uvicorn's access log), never a prompt.
"""

from __future__ import annotations

import copy
import dataclasses
import ipaddress
import re
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from edgespec.cli.common import (
    cache_option,
    decoding_options,
    error_boundary,
    history_options,
    opens_engine,
    pair_options,
)
from edgespec.engine.engine_thread import EngineThread
from edgespec.engine.infill import DEFAULT_ORDER, ORDERS, Order
from edgespec.engine.prompt_cache import SERVE_MEMORY_ENTRIES
from edgespec.util import interrupts
from edgespec.util.errors import UsageError
from edgespec.util.text_check import check_text, text_problem

if TYPE_CHECKING:
    from edgespec.engine.options import CheckedOptions, EngineOptions


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on host:port (port 0: any free port), or a one-line UsageError.

    It listens before the model loads, so a client that connects as soon as the "serving" line is
    printed waits in the backlog until uvicorn accepts, instead of being refused. It names TCP as
    its protocol: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on connections whose
    socket says so, and with it on, every reply on a kept-alive connection (and each streamed
    chunk after the first) waited out the client's 40 ms delayed ACK."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    except OSError as e:
        raise UsageError(f"--host {host}: {e.strerror or e}") from None
    except UnicodeError:  # the IDNA encoding of a name: a label over 63 characters, or text that is not Unicode
        raise UsageError(f"--host {host!r}: not a valid host name") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
    except OSError as e:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def uvicorn_server(app, on_stop: Callable[[], None], log_level: str = "info"):
    """uvicorn as edgespec runs it. On SIGINT, SIGTERM or SIGHUP, `on_stop` tells the requests in
    flight that the server stops (edgespec.server.shutdown_signals); stopping waits at most 2 s for their
    replies to end, then cancels them like a client that left. The access log goes to stderr with
    the rest: stdout is for replies (`run`), and serve writes none."""
    import uvicorn  # uvicorn and the server (FastAPI): only when it serves

    from edgespec.server.shutdown_signals import StoppingServer

    logging = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    logging["handlers"]["access"]["stream"] = "ext://sys.stderr"
    config = uvicorn.Config(
        app, lifespan="off", timeout_graceful_shutdown=2, server_header=False, log_level=log_level, log_config=logging
    )
    return StoppingServer(config, on_stop)


def base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"


@click.command("serve")
@pair_options
@decoding_options
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Anything but loopback lets other machines use the model.",
)
@click.option("--port", type=click.IntRange(0, 65535), default=8800, show_default=True, help="0 = any free port.")
@click.option(
    "--api-key",
    envvar="EDGESPEC_API_KEY",
    default=None,
    help="Require 'Authorization: Bearer KEY' on every endpoint but /health (or $EDGESPEC_API_KEY).",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    envvar="EDGESPEC_ALLOW_HOST",
    callback=lambda ctx, param, values: tuple(_allowed_host(v) for v in values),
    help="Without --api-key, also answer requests whose Host header is NAME (repeatable; '*': any; or "
    "$EDGESPEC_ALLOW_HOST, names split by spaces). Its own address, localhost, 127.0.0.1 and [::1] always pass.",
)
@click.option(
    "--allow-origin",
    "allow_origins",
    multiple=True,
    envvar="EDGESPEC_ALLOW_ORIGIN",
    callback=lambda ctx, param, values: tuple(_allowed_origin(v) for v in values),
    help="Answer browser requests from the web page ORIGIN (scheme://host[:port], repeatable; '*': any).",
)
@click.option(
    "--shared-history",
    is_flag=True,
    help="On an address other machines reach, draft from and record the history all the same "
    "(its clients can then tell what was asked before); on loopback it is always shared.",
)
@click.option(
    "--queue",
    "queue_size",
    type=click.IntRange(min=0),
    default=8,
    show_default=True,
    help="Requests that may wait while the engine serves one; beyond that, 503 with Retry-After.",
)
@click.option(
    "--fim-order",
    type=click.Choice(ORDERS),
    default=DEFAULT_ORDER,
    show_default=True,
    help="How fill-in-the-middle prompts (/infill, suffix) are laid out: psm-near keeps the order the model was "
    "trained on and gives the lines below the next one before the prefix, so a keystroke reads little again; psm "
    "and spm are llama.cpp's two layouts (docs/serve.md).",
)
@cache_option
@history_options
@error_boundary
@opens_engine(cache_memory_entries=SERVE_MEMORY_ENTRIES)
def serve(
    host, port, api_key, allow_hosts, allow_origins, shared_history, queue_size, fim_order, options: EngineOptions
):
    """Serve the pair over OpenAI's API (/v1/chat/completions, /v1/completions, /v1/models) for
    editors, agents and the openai SDK, and llama.cpp's /infill and /completion for editors'
    inline completion; responses carry speculative metrics and, on request, every token's origin.
    The last few prompts' states stay in memory (and on disk), so a client that alternates between
    files finds each one already read; `max_tokens: 0` (`n_predict: 0`) only reads a prompt."""
    check_text(api_key, "--api-key")  # compared as UTF-8 bytes with each request's key
    checked = options.check()
    sock = listen(host, port)
    try:
        if not ipaddress.ip_address(sock.getsockname()[0]).is_loopback:
            checked = _on_a_network(host, checked, api_key, shared_history)
        click.echo("edgespec: loading the model pair…", err=True)
        _serve_on(sock, checked, api_key, queue_size, fim_order, ((host, *allow_hosts), allow_origins))
    finally:
        sock.close()


def _on_a_network(host: str, checked: CheckedOptions, api_key: str | None, shared_history: bool) -> CheckedOptions:
    """What changes when other machines can reach the server, each said in one line: without a
    key anyone there can use the model, and unless --shared-history, it keeps no history (whether a
    reply is drafted from it shows in every reply's figures, so clients could tell what was asked
    before, by whom ever; docs/serve.md)."""
    if not api_key:
        click.echo(
            f"edgespec: warning: listening on {host} without --api-key: anyone who can reach this port "
            "can use the model",
            err=True,
        )
    if checked.history_budget is None or shared_history:
        return checked
    click.echo(
        f"edgespec: listening on {host}: no history is drafted from or kept (--shared-history keeps it)", err=True
    )
    return dataclasses.replace(checked, history_budget=None)


def _allowed_host(value: str) -> str:
    """An --allow-host value: a host name or address (a port, or IPv6 brackets, dropped)."""
    from edgespec.server.reach import host_name  # the server imports FastAPI: only for serve's flags

    name = host_name(value.strip())
    if not name or text_problem(name) or any(c.isspace() or c in "/@" for c in name):
        raise click.BadParameter(f"{value!r} is not a host name or address")
    return name


def _allowed_origin(value: str) -> str:
    """An --allow-origin value: "*", or a web page's origin as browsers send it (scheme://host[:port];
    "null" and the like are not allowed: any sandboxed page sends it)."""
    if text_problem(value) is None and re.fullmatch(r"\*|[a-z][a-z0-9+.-]*://[^/\s@]+", value.strip(), re.IGNORECASE):
        return value.strip()
    raise click.BadParameter(f"{value!r} is not an origin such as http://localhost:3000")


def _serve_on(
    sock: socket.socket,
    checked: CheckedOptions,
    api_key: str | None,
    queue_size: int,
    fim_order: Order,
    allowed: tuple[tuple[str, ...], tuple[str, ...]],
) -> None:
    """Open the engine on its own thread (`EngineThread`: it loads the engine and runs every
    generation), then serve on `sock` until a signal stops it, answering the hosts and origins
    `allowed` beyond its own (server/reach.py)."""
    # the server imports FastAPI (about 0.2 s): only when it serves
    from edgespec.server.app import create_app
    from edgespec.server.engine_worker import EngineWorker
    from edgespec.server.reach import Reach

    engine_thread = EngineThread()
    try:
        engine, defaults = engine_thread.call(checked.open)
    except BaseException:
        engine_thread.shutdown()
        raise
    worker = EngineWorker(engine, engine_thread, queue_size)
    try:
        reach = Reach(sock.getsockname()[0], *allowed)
        app = create_app(worker, defaults, api_key, fim_order, reach)
        worker.prepare(defaults)  # on the engine thread while uvicorn starts: /health says 503 until it ends
        name = checked.pair.name
        click.echo(f"edgespec: serving {name!r} at {base_url(sock)} (model name {name!r}); Ctrl-C stops", err=True)
        uvicorn_server(app, worker.stop).run(sockets=[sock])
        interrupts.raise_deferred()  # the signal that stopped it: its line and exit status
    finally:
        worker.close()
