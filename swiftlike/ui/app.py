"""`swiftlike web-ui`'s page: one tab per command family, and the runtime tab that follows the jobs they start.

The UI is a client of the CLI: each tab builds a `swiftlike <command>` argv from a form generated from that
command's arguments, shows it, and runs it as a job; nothing here trains or serves by itself.
"""
from __future__ import annotations

from ..arguments.webui_args import WebUIArguments
from .jobs import JobStore
from .labels import LABELS
from .pages.command import UIContext
from .pages.runtime import build_runtime
from .pages.serving import build_deploy, build_eval, build_export, build_sample
from .pages.training import build_grpo, build_rlhf, build_train

TABS = [("sft", build_train), ("rlhf", build_rlhf), ("grpo", build_grpo), ("infer", build_deploy),
        ("sample", build_sample), ("eval", build_eval), ("export", build_export)]


def build_ui(args: WebUIArguments):
    """The gr.Blocks of the whole UI, over the jobs dir of `args`."""
    import gradio as gr
    ctx = UIContext(JobStore(args.jobs_dir, args.stop_grace_s), LABELS[args.lang])
    with gr.Blocks(title=ctx.labels["title"], analytics_enabled=False) as demo:
        gr.Markdown(f"## {ctx.labels['title']}")
        with gr.Tabs(elem_id="tabs") as tabs:
            ctx.tabs = tabs
            for key, build in TABS:
                with gr.Tab(ctx.labels[key], id=key, elem_id=f"tab-{key}"):
                    build(ctx)
            with gr.Tab(ctx.labels["runtime"], id="runtime", elem_id="tab-runtime"):
                build_runtime(ctx)
        for page in ctx.pages.values():
            page.wire_start()
    return demo, ctx
