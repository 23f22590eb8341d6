"""`swiftlike deploy`: the OpenAI API over one engine (or `/classify` over a sequence classifier) until SIGTERM or
Ctrl-C."""
from __future__ import annotations

import time

from ..arguments.deploy_args import DeployArguments
from ..deploy.classify import create_classify_app
from ..deploy.server import ServeSettings, create_app, serve
from ..infer.engine import build_classifier, build_engine
from . import arguments_of


def deploy_main(args: DeployArguments | list[str] | None = None) -> None:
    args = arguments_of(DeployArguments, args)
    if args.task_type == "seq_cls":
        engine = build_classifier(args.engine_spec())
        args.check_num_labels(engine.num_labels)
        app = create_classify_app(engine, args)
        names, base = args.served_model_name or engine.model_name, "http://{host}:{port}/classify"
    else:
        engine = build_engine(args.engine_spec())
        app = create_app(engine, ServeSettings.of(args))
        names = ", ".join([args.served_model_name or engine.model_name, *sorted(engine.adapters)])
        base = "http://{host}:{port}/v1"
    print(f"swiftlike deploy ready on {base.format(host=args.host, port=args.port)} (models: {names})", flush=True)
    started = time.time()
    try:
        serve(app, args.host, args.port)
    finally:
        engine.close()
        print(f"swiftlike deploy stopped after {time.time() - started:.0f} s", flush=True)
