"""Arguments of `swiftlike app` (names follow ms-swift's `swift app`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..utils.errors import UsageError
from .base import BaseArguments, arg
from .deploy_args import DeployArguments
from .infer_args import SamplingArguments


@dataclass
class AppArguments(DeployArguments, SamplingArguments):
    """swiftlike app: a Gradio chat page over --model (deployed in this process) or over --base_url."""

    command = "app"
    base_url: str | None = arg(None, "Chat with a running OpenAI-compatible server (e.g. `swiftlike deploy`) at "
                               "this base URL, like http://127.0.0.1:8000/v1, instead of loading --model.",
                               aliases=("--api_url",))
    studio_title: str | None = arg(None, "Title shown on the page; default the model's name.")
    lang: Literal["en", "zh"] = arg("en", "Language of the page's labels.")
    stream: bool = arg(True, "Show the reply token by token as it is generated.")
    host: str = arg("127.0.0.1", "Address the page (and, with --model, the OpenAI API under /v1) binds; "
                    "0.0.0.0 serves every interface.", aliases=("--server_name",))
    port: int = arg(7860, "TCP port of the page.", aliases=("--server_port",))
    allowed_hosts: list[str] = arg([], "Host names a browser may use to reach the page besides localhost, the "
                                   "bound name and (beyond loopback) this machine's host names, e.g. a reverse "
                                   "proxy's name; IP addresses are always accepted. Any other Host header is "
                                   "refused with 400 (DNS rebinding); '*' turns the check off.")

    def __post_init__(self) -> None:
        BaseArguments.__post_init__(self)
        if self.temperature is None:
            self.temperature = 0.7  # the page's slider starts here
        if self.model is None and self.base_url is None:
            raise UsageError("give --model (served by this process) or --base_url (a running OpenAI-compatible "
                             "server, e.g. http://127.0.0.1:8000/v1)")
        if self.base_url is not None and not self.base_url.startswith(("http://", "https://")):
            raise UsageError(f"--base_url must be an http(s) URL like http://127.0.0.1:8000/v1, got "
                             f"{self.base_url!r}")
        if self.temperature < 0:
            raise UsageError(f"--temperature must be >= 0, got {self.temperature}")
        if self.task_type == "seq_cls" or self.num_labels is not None:
            raise UsageError("--task_type seq_cls / --num_labels: the chat page talks to a model that generates; serve "
                             "a sequence-classification (reward) model with `swiftlike deploy` instead")
        if not 0 < self.top_p <= 1:
            raise UsageError(f"--top_p must be in (0, 1], got {self.top_p}")
        self.check_serving()
