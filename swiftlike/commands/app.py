"""`swiftlike app`: the Gradio chat page, with the deploy API mounted beside it (--model) or over --base_url."""
from __future__ import annotations

import os
import time

from ..ui.chat import ChatReplies, build_page, loopback
from ..arguments.app_args import AppArguments
from ..deploy.hosts import HostCheck, allowed_host_names
from ..deploy.server import ServeSettings, create_app, serve
from ..infer.engine import EngineSpec, build_engine
from ..infer.engine.openai_engine import OpenAIEngine, OpenAIOptions
from . import arguments_of


def app_main(args: AppArguments | list[str] | None = None) -> None:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import gradio as gr
    from fastapi import FastAPI

    args = arguments_of(AppArguments, args)
    # The page always talks to an OpenAI API through the same engine type: the --base_url endpoint, or the
    # deploy API this process mounts under /v1 (not up yet, so its model names are passed in).
    engine = None
    if args.base_url:
        base_url = args.base_url
        page_engine = build_engine(EngineSpec("openai", options=OpenAIOptions(base_url, args.api_key)))
        models = page_engine.served_models
        server = FastAPI(title="swiftlike app")
        server.get("/health")(lambda: {"status": "ok"})
    else:
        engine = build_engine(args.engine_spec())
        server = create_app(engine, ServeSettings.of(args))
        models = [args.served_model_name or engine.model_name, *sorted(engine.adapters)]
        base_url = f"http://{loopback(args.host)}:{args.port}/v1"
        page_engine = OpenAIEngine(OpenAIOptions(base_url, args.api_key), served_models=models)
    server.add_middleware(HostCheck, names=allowed_host_names(args.host, args.allowed_hosts))
    replies = ChatReplies(page_engine, args)
    # System fonts: the default theme links Google Fonts, which an offline machine cannot reach.
    theme = gr.themes.Default(font=["ui-sans-serif", "system-ui", "sans-serif"],
                              font_mono=["ui-monospace", "monospace"])
    gr.mount_gradio_app(server, build_page(replies, models, args), path="/", theme=theme, ssr_mode=False,
                        footer_links=[])
    where = f"http://{args.host}:{args.port}"
    api = f"; OpenAI API at {where}/v1" if engine is not None else f"; replies from {base_url}"
    print(f"swiftlike app ready on {where} (models: {', '.join(models)}{api})", flush=True)
    started = time.time()
    try:
        serve(server, args.host, args.port)
    finally:
        page_engine.close()
        if engine is not None:
            engine.close()
        print(f"swiftlike app stopped after {time.time() - started:.0f} s, {replies.replies} replies", flush=True)
