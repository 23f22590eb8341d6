"""The model a harness drives, as an OpenAI-compatible endpoint: a running server (--eval_url), or the model
served here for the run's length by `swiftlike deploy`'s own app on a loopback port.

Why an HTTP endpoint even in-process: evalscope and lm-evaluation-harness talk to models through the OpenAI API
(their `openai_api` / `local-completions` clients); serving ours to them is what ms-swift does, and the same
route then serves a training run's live model (`serving(engine)`) between steps."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ..arguments.eval_args import EvalArguments
from ..utils import get_logger
from ..utils.net import free_port

logger = get_logger("swiftlike.eval")
START_TIMEOUT_S = 60


@dataclass
class Endpoint:
    """Where a harness sends its requests: `base_url` ends in /v1; `model` is the name it asks for."""

    base_url: str
    model: str
    api_key: str | None = None
    tokenizer_dir: str | None = None  # the served model's tokenizer, when it is on this machine

    @property
    def completions_url(self) -> str:
        return f"{self.base_url}/completions"

    @property
    def chat_url(self) -> str:
        return f"{self.base_url}/chat/completions"


@contextmanager
def served_model(args: EvalArguments) -> Iterator[Endpoint]:
    """--eval_url as it is, or --model (with its adapters, on --infer_backend) served here until the block ends."""
    from ..infer.engine import build_engine
    engine = build_engine(args.engine_spec())
    try:
        if args.eval_url is not None:
            yield Endpoint(args.eval_url.rstrip("/"), engine.model_name, args.eval_api_key)
            return
        # an adapter is served under its own name, as `swiftlike deploy --adapters` does; evaluate it, not the base
        model = next(iter(engine.adapters), None) or engine.model_name
        with serving(engine, args.max_new_tokens, args.eval_num_proc) as base_url:
            yield Endpoint(base_url, model, None, str(engine.model_dir) if engine.model_dir else None)
    finally:
        engine.close()


@contextmanager
def serving(engine, max_new_tokens: int, max_concurrency: int) -> Iterator[str]:
    """`engine` behind deploy's OpenAI routes on a free loopback port, in a thread; yields the /v1 base URL."""
    import uvicorn

    from ..deploy.server import ServeSettings, create_app
    port = free_port()
    app = create_app(engine, ServeSettings(max_new_tokens=max_new_tokens, max_concurrency=max_concurrency))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="swiftlike-eval-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the evaluated model's server did not start on 127.0.0.1:{port}")
        time.sleep(0.05)
    logger.info("serving %s to the harness on http://127.0.0.1:%d/v1", engine.model_name, port)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(30)
        stop = getattr(engine, "stop_concurrent_serving", None)
        if stop is not None:
            stop()
