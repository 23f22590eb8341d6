"""Ports: the one way every part of swiftlike (launcher, process groups, weight broadcast, Ray actors, the
tests' and benchmarks' servers) asks for a free one."""
from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PICKED = 20000
TRIES = 64
# Its own generator: a training run in a test process seeds the global one (set_seed), after which every xdist
# worker drew the same "random" ports and a test reached another worker's server.
_PORT_PICKER = random.SystemRandom()


def ephemeral_start() -> int:
    """The first port the kernel hands to outgoing connections (32768 on Linux unless configured)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` now: "127.0.0.1" for a peer on this machine, "" (every interface) for a port that
    processes on other nodes connect to. Free when asked, not reserved: bind it soon.

    Picked at random below the kernel's ephemeral range, not by binding port 0: a port from that range is also
    what every outgoing connection on the machine takes as its source port, so between this call and the server's
    bind any client (a test talking to another server, a download) could take it, which made servers fail with
    "address already in use". Below the range only another explicit bind competes. Falls back to the kernel's
    choice when that band is full or too narrow."""
    top = ephemeral_start()
    for _ in range(TRIES if top - 1 > LOWEST_PICKED else 0):
        port = _PORT_PICKER.randint(LOWEST_PICKED, top - 1)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
