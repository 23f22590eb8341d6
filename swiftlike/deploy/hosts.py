"""The Host-header check of the pages a browser opens (`swiftlike web-ui`, `swiftlike app`): DNS rebinding.

A page of another site can point its own domain name at 127.0.0.1 after loading; the browser then treats our
server as that site and lets the page read it, and for the web UI that means starting processes. Every such
request carries the attacker's name in its Host header, so a request whose Host is a name we do not answer to is
refused before it reaches the app. A Host that is an IP address is let through: a browser sends one only when
the address itself was typed, and an address is not a name anyone can rebind.
"""
from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Iterable

LOOPBACK_BINDS = ("127.0.0.1", "localhost", "::1")
ANY_NAME = "*"


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def allowed_host_names(bind: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The names a request's Host may carry for a server bound to `bind`: `localhost`, the bind name when it is a
    name, this machine's host names when it binds beyond loopback, and `extra` (`--allowed_hosts`; `*` = any)."""
    names = {"localhost", *(name.strip().lower().rstrip(".") for name in extra)}
    if not _is_address(bind):
        names.add(bind.lower().rstrip("."))
    if bind not in LOOPBACK_BINDS:
        names.update(n.lower() for n in (socket.gethostname(), socket.getfqdn()) if n)
    return frozenset(names)


def host_of(header: str) -> str:
    """The host part of a Host header: no port, no brackets around an IPv6 address, lower case, no final dot."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    if header.count(":") == 1:
        header = header.split(":", 1)[0]
    return header.rstrip(".")


def host_allowed(header: str | None, names: frozenset[str]) -> bool:
    """Whether a request with this Host header is served. No header at all (HTTP/1.0 tools) is not a browser's
    request, so it is served too."""
    if header is None or ANY_NAME in names:
        return True
    host = host_of(header)
    return _is_address(host) or host in names


class HostCheck:
    """ASGI middleware: HTTP requests (and websockets) whose Host is not allowed get 400 and never reach the app."""

    def __init__(self, app, names: frozenset[str], flag: str = "--allowed_hosts"):
        self.app, self.names, self.flag = app, names, flag

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        raw = headers.get(b"host")
        header = raw.decode("latin-1") if raw is not None else None
        if host_allowed(header, self.names):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        message = (f"Host {header!r} is not a name this server answers to: a page reached under another name may be "
                   f"a DNS-rebinding attack. Open it by its address, localhost or one of "
                   f"{sorted(self.names)}, or add the name with {self.flag} NAME")
        body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                     "code": 400}}).encode()
        await send({"type": "http.response.start", "status": 400,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
