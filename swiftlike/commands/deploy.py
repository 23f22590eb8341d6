"""`swiftlike deploy`: the OpenAI API over one engine until SIGTERM or Ctrl-C."""
from __future__ import annotations

import time

from ..arguments.deploy_args import DeployArguments
from ..deploy.server import create_app, serve
from ..infer.engine import build_engine
from . import arguments_of


def deploy_main(args: DeployArguments | list[str] | None = None) -> None:
    args = arguments_of(DeployArguments, args)
    engine = build_engine(args.engine_spec())
    app = create_app(engine, args)
    names = ", ".join([args.served_model_name or engine.model_name, *sorted(engine.adapters)])
    print(f"swiftlike deploy ready on http://{args.host}:{args.port}/v1 (models: {names})", flush=True)
    started = time.time()
    try:
        serve(app, args.host, args.port)
    finally:
        engine.close()
        print(f"swiftlike deploy stopped after {time.time() - started:.0f} s", flush=True)
