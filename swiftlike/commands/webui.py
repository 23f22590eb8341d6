"""`swiftlike web-ui`: the Gradio pages that build, run and follow swiftlike commands."""
from __future__ import annotations

import os

from ..arguments.webui_args import WebUIArguments
from . import arguments_of


def web_ui_main(args: WebUIArguments | list[str] | None = None) -> None:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import gradio as gr
    from fastapi import FastAPI

    from ..deploy.hosts import HostCheck, allowed_host_names
    from ..deploy.server import serve
    from ..ui.app import build_ui

    args = arguments_of(WebUIArguments, args)
    demo, ctx = build_ui(args)
    server = FastAPI(title="swiftlike web-ui")
    server.get("/health")(lambda: {"status": "ok"})
    server.add_middleware(HostCheck, names=allowed_host_names(args.server_name, args.allowed_hosts))
    # System fonts: the default theme links Google Fonts, which an offline machine cannot reach.
    theme = gr.themes.Default(font=["ui-sans-serif", "system-ui", "sans-serif"],
                              font_mono=["ui-monospace", "monospace"])
    auth = ("swiftlike", args.api_key) if args.api_key else None
    gr.mount_gradio_app(server, demo, path="/", theme=theme, ssr_mode=False, footer_links=[], auth=auth,
                        allowed_paths=[str(ctx.store.root)])
    print(f"swiftlike web-ui ready on http://{args.server_name}:{args.server_port} (jobs in {ctx.store.root}"
          f"{'; login swiftlike / --api_key' if auth else ''})", flush=True)
    serve(server, args.server_name, args.server_port)
