"""Who may call the server: the Host and Origin checks that keep a web page out.

A keyless server on 127.0.0.1 trusts whoever can connect, which includes any web page the user
opens: after DNS rebinding (the page's own name made to resolve to 127.0.0.1), the page is
same-origin with the server and reads its replies. What gives such a page away is its Host header,
which names the page's domain, so without `--api-key` a request is answered only when its Host is
the address the server is bound to, `localhost`, `127.0.0.1` or `[::1]` (any port), or a name the
user allowed (`serve --allow-host`); Ollama and llama.cpp's server closed the same hole so. An IP
literal cannot be rebound: on a server bound to every address (`--host 0.0.0.0`), a Host that is
any IP literal passes, as the machine's own addresses are what other machines connect to. A
request without a Host (HTTP/1.0) comes from no browser and passes.

A browser request from another page (an `Origin` header that is not the server's own origin) is
refused too, with or without a key, unless `--allow-origin` names that origin: a page must not
drive the user's model, and with no CORS headers it could send requests though not read replies.
Editors' plugins, the openai SDK and curl send no Origin. Each refusal is a 403 in OpenAI's shape
whose one-line message names the host or origin and the flag that admits it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from edgespec.server.openai_errors import APIError

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
ANY = "*"  # an --allow-host or --allow-origin that admits every host or origin


@dataclass(frozen=True)
class Reach:
    """The server's address (`bound`, as it listens: "127.0.0.1", "::", a name) and the hosts and
    origins the user allowed beyond it ("*": any)."""

    bound: str = "127.0.0.1"
    hosts: tuple[str, ...] = ()
    origins: tuple[str, ...] = ()

    def host_allowed(self, host: str) -> bool:
        """Whether a request whose Host header names `host` (without its port) is answered."""
        host = host.lower()
        if ANY in self.hosts or host in (*LOOPBACK_NAMES, self.bound.lower(), *(h.lower() for h in self.hosts)):
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return address.is_loopback or _every_address(self.bound)

    def origin_allowed(self, origin: str, host_header: str) -> bool:
        """Whether a browser request with `Origin: origin` is answered: the server's own origin
        (the page's host and port are the request's Host) or one the user allowed."""
        origin = origin.lower().rstrip("/")
        if ANY in self.origins or origin in (o.lower().rstrip("/") for o in self.origins):
            return True
        scheme, _, netloc = origin.partition("://")
        return scheme in ("http", "https") and bool(netloc) and netloc == host_header.lower()


def host_name(header: str) -> str:
    """The host of a Host header, without its port: "[::1]:8800" -> "::1", "a.b:80" -> "a.b"."""
    if header.startswith("["):
        return header[1:].partition("]")[0]
    if header.count(":") > 1:  # a bare IPv6 address, as some clients send it
        return header
    return header.partition(":")[0]


def _every_address(bound: str) -> bool:
    try:
        return ipaddress.ip_address(bound).is_unspecified
    except ValueError:
        return False


def host_refused(host: str) -> APIError:
    return APIError(
        403,
        f"host {host!r} is not allowed: this server answers requests for its own address and localhost "
        f"(start it with --allow-host {host} to add the name)",
        code="host_not_allowed",
    )


def origin_refused(origin: str) -> APIError:
    return APIError(
        403,
        f"origin {origin!r} is not allowed: this server answers no other web page "
        f"(start it with --allow-origin {origin} to admit it)",
        code="origin_not_allowed",
    )


class ReachGuard:
    """ASGI middleware that answers a request from a host or origin `reach` does not allow with a
    403, before anything else reads it; `check_host` is off with an API key (the key then says who
    may call)."""

    def __init__(self, app: ASGIApp, reach: Reach, check_host: bool):
        self.app, self.reach, self.check_host = app, reach, check_host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self._refusal(dict(scope["headers"]))
            if refusal is not None:
                await refusal.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, headers: dict[bytes, bytes]) -> APIError | None:
        host_header = headers.get(b"host", b"").decode("latin-1").strip()
        host = host_name(host_header)
        if self.check_host and host_header and not self.reach.host_allowed(host):
            return host_refused(host)
        origin = headers.get(b"origin")
        if origin is not None and not self.reach.origin_allowed(origin.decode("latin-1").strip(), host_header):
            return origin_refused(origin.decode("latin-1").strip())
        return None


LOOPBACK = Reach()  # a server on 127.0.0.1 that allows nothing more
