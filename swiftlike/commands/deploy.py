"""`swiftlike deploy`: the OpenAI API over one engine until SIGTERM or Ctrl-C."""
from __future__ import annotations

import time

from ..arguments.deploy_args import DeployArguments
from ..deploy.server import create_app, serve
from ..deploy.serving import serving_for
from ..infer.engine import build_engine
from . import arguments_of


def deploy_main(args: DeployArguments | list[str] | None = None) -> None:
    args = arguments_of(DeployArguments, args)
    serving = serving_for(build_engine(args.engine_spec()))
    app = create_app(serving, args)
    names = ", ".join([args.served_model_name or serving.engine.model_name, *sorted(serving.engine.adapters)])
    print(f"swiftlike deploy ready on http://{args.host}:{args.port}/v1 (models: {names})", flush=True)
    started = time.time()
    try:
        serve(app, args.host, args.port)
    finally:
        serving.close()
        print(f"swiftlike deploy stopped after {time.time() - started:.0f} s", flush=True)
