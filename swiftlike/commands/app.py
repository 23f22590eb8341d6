"""`swiftlike app`: the Gradio chat page, with the deploy API mounted beside it (--model) or over --base_url."""
from __future__ import annotations

import os
import time

from ..app.chat_app import ChatReplies, build_page, endpoint_models, loopback
from ..arguments.app_args import AppArguments
from ..deploy.server import create_app, serve
from ..deploy.serving import serving_for
from ..infer.engine import build_engine
from . import arguments_of


def app_main(args: AppArguments | list[str] | None = None) -> None:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import gradio as gr
    from fastapi import FastAPI

    args = arguments_of(AppArguments, args)
    serving = None
    if args.base_url:
        models = endpoint_models(args.base_url, args.api_key)
        base_url = args.base_url
        server = FastAPI(title="swiftlike app")
        server.get("/health")(lambda: {"status": "ok"})
    else:
        serving = serving_for(build_engine(args.engine_spec()))
        server = create_app(serving, args)
        models = [args.served_model_name or serving.engine.model_name, *sorted(serving.engine.adapters)]
        base_url = f"http://{loopback(args.host)}:{args.port}/v1"
    replies = ChatReplies(base_url, args.api_key, args)
    # System fonts: the default theme links Google Fonts, which an offline machine cannot reach.
    theme = gr.themes.Default(font=["ui-sans-serif", "system-ui", "sans-serif"],
                              font_mono=["ui-monospace", "monospace"])
    gr.mount_gradio_app(server, build_page(replies, models, args), path="/", theme=theme, ssr_mode=False,
                        footer_links=[])
    where = f"http://{args.host}:{args.port}"
    api = f"; OpenAI API at {where}/v1" if serving else f"; replies from {base_url}"
    print(f"swiftlike app ready on {where} (models: {', '.join(models)}{api})", flush=True)
    started = time.time()
    try:
        serve(server, args.host, args.port)
    finally:
        if serving is not None:
            serving.close()
        print(f"swiftlike app stopped after {time.time() - started:.0f} s, {replies.replies} replies", flush=True)
