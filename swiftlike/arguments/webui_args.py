"""Arguments of `swiftlike web-ui` (names follow ms-swift's `swift web-ui`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..utils import cache_dir
from ..utils.errors import UsageError
from .base import arg
from .parser import check_choices

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class WebUIArguments:
    """swiftlike web-ui: pages that build, preview and run swiftlike commands, and watch the jobs they start."""

    command = "web-ui"
    server_name: str = arg("127.0.0.1", "Address the UI binds; 127.0.0.1 serves this machine only. Any other address "
                           "needs --api_key: the UI starts processes.", aliases=("--host",))
    server_port: int = arg(7860, "TCP port of the UI.", aliases=("--port",))
    lang: Literal["en", "zh"] = arg("en", "Language of the pages' labels.")
    api_key: str | None = arg(None, "Password of the UI's login (user name: swiftlike). Required when "
                              "--server_name is not a loopback address.")
    jobs_dir: str | None = arg(None, "Where job records, logs and saved scripts go, so a restarted UI still lists "
                               "its jobs; default $SWIFTLIKE_CACHE/ui_jobs (~/.cache/swiftlike/ui_jobs).")
    stop_grace_s: float = arg(10.0, "Seconds a stopped job gets to exit after SIGTERM before it is sent SIGKILL.")
    allowed_hosts: list[str] = arg([], "Host names a browser may use to reach the page besides localhost, the "
                                   "bound name and (beyond loopback) this machine's host names, e.g. a reverse "
                                   "proxy's name; IP addresses are always accepted. Any other Host header is "
                                   "refused with 400 (DNS rebinding); '*' turns the check off.")

    def __post_init__(self) -> None:
        check_choices(self)
        if not 0 < self.server_port < 65536:
            raise UsageError(f"--server_port must be in 1..65535, got {self.server_port}")
        if self.server_name not in LOOPBACK and not self.api_key:
            raise UsageError(f"--server_name {self.server_name}: the UI starts processes on this machine, so serving "
                             "it beyond loopback needs --api_key PASSWORD (log in as swiftlike)")
        if self.stop_grace_s < 0:
            raise UsageError(f"--stop_grace_s must be >= 0, got {self.stop_grace_s}")
        if self.jobs_dir is None:
            self.jobs_dir = str(cache_dir() / "ui_jobs")
