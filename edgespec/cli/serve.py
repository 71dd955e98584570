"""`edgespec serve`: the click command that loads the pair and runs the server (registered in cli/main.py).

The address is bound before the model loads, so a port in use or a bad --host is a one-line error
at once; uvicorn then serves on that socket. Only the request line of each request is logged
(uvicorn's access log), never a prompt.
"""

from __future__ import annotations

import copy
import ipaddress
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
from edgespec.engine.infill import DEFAULT_ORDER, ORDERS, Order
from edgespec.engine.prompt_cache import SERVE_MEMORY_ENTRIES
from edgespec.util import interrupts
from edgespec.util.errors import UsageError
from edgespec.util.text_check import check_text

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
    import uvicorn

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
def serve(host, port, api_key, queue_size, fim_order, options: EngineOptions):
    """Serve the pair over OpenAI's API (/v1/chat/completions, /v1/completions, /v1/models) for
    editors, agents and the openai SDK, and llama.cpp's /infill and /completion for editors'
    inline completion; responses carry speculative metrics and, on request, every token's origin.
    The last few prompts' states stay in memory (and on disk), so a client that alternates between
    files finds each one already read; `max_tokens: 0` (`n_predict: 0`) only reads a prompt."""
    check_text(api_key, "--api-key")  # compared as UTF-8 bytes with each request's key
    checked = options.check()
    sock = listen(host, port)
    try:
        if not ipaddress.ip_address(sock.getsockname()[0]).is_loopback and not api_key:
            click.echo(
                f"edgespec: warning: listening on {host} without --api-key: anyone who can reach this port "
                "can use the model",
                err=True,
            )
        click.echo("edgespec: loading the model pair…", err=True)
        _serve_on(sock, checked, api_key, queue_size, fim_order)
    finally:
        sock.close()


def _serve_on(
    sock: socket.socket, checked: CheckedOptions, api_key: str | None, queue_size: int, fim_order: Order
) -> None:
    """Open the engine on its own thread (`EngineThread`: it loads the engine and runs every
    generation), then serve on `sock` until a signal stops it."""
    from edgespec.engine.thread import EngineThread
    from edgespec.server.app import create_app
    from edgespec.server.engine_worker import EngineWorker

    engine_thread = EngineThread()
    try:
        engine, defaults = engine_thread.call(checked.open)
    except BaseException:
        engine_thread.shutdown()
        raise
    worker = EngineWorker(engine, engine_thread, queue_size)
    try:
        app = create_app(worker, defaults, api_key, fim_order)
        worker.prepare(defaults)  # on the engine thread while uvicorn starts: /health says 503 until it ends
        name = checked.pair.name
        click.echo(f"edgespec: serving {name!r} at {base_url(sock)} (model name {name!r}); Ctrl-C stops", err=True)
        uvicorn_server(app, worker.stop).run(sockets=[sock])
        interrupts.raise_deferred()  # the signal that stopped it: its line and exit status
    finally:
        worker.close()
