"""Ports: the one way every part of swiftlike (launcher, process groups, weight broadcast, Ray actors, the
tests' and benchmarks' servers) asks the operating system for a free one."""
from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` now: "127.0.0.1" for a peer on this machine, "" (every interface) for a
    port that processes on other nodes connect to. Free when asked, not reserved: bind it soon."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
