"""Deploy & chat, eval and export tabs. The deploy tab starts `swiftlike deploy` as a job and chats with it through
its OpenAI API, streaming the reply, as any client of that deployment would."""
from __future__ import annotations

from ...arguments.deploy_args import DeployArguments
from ...arguments.eval_args import EvalArguments
from ...arguments.export_args import ExportArguments
from ..chat import chat_messages
from ..forms import flag_value
from ..jobs import RUNNING
from .command import CommandPage, UIContext, job_choices
from .training import health, server_host

DEPLOY_COMMON = ["model", "adapters", "infer_backend", "port", "served_model_name", "max_new_tokens", "torch_dtype",
                 "api_key", "vllm_max_model_len", "system"]
EVAL_COMMON = ["model", "adapters", "eval_dataset", "eval_limit", "infer_backend", "max_new_tokens", "eval_url",
               "eval_output_dir", "eval_num_samples", "temperature"]
EXPORT_COMMON = ["adapters", "model", "merge_lora", "output_dir", "max_shard_size"]


def build_deploy(ctx: UIContext) -> CommandPage:
    import gradio as gr
    labels, store = ctx.labels, ctx.store
    page = CommandPage(ctx, "infer", {"deploy": DeployArguments}, DEPLOY_COMMON)
    page.render()

    def is_deployment(job):
        return job.record["command"] == "deploy" and job.state == RUNNING

    gr.Markdown(f"### {labels['chat']}")
    with gr.Row():
        picker = gr.Dropdown(job_choices(store, is_deployment), label=labels["deployment"], elem_id="chat-deployment",
                             scale=4)
        refresh = gr.Button(labels["refresh"], elem_id="chat-refresh", scale=1)
    chatbot = gr.Chatbot(elem_id="chat-window", height=360)
    box = gr.Textbox(placeholder=labels["message"], show_label=False, elem_id="chat-input")

    def reply(message: str, history: list[dict], job_id: str | None):
        import openai
        if not job_id:
            raise gr.Error(labels["no_job"])
        job = store.get(job_id)
        argv, port = job.record["argv"], job.record["port"]
        if health(server_host(argv), port) != "healthy":
            raise gr.Error(labels["not_ready"])
        client = openai.OpenAI(base_url=f"http://{server_host(argv)}:{port}/v1",
                               api_key=flag_value(argv, "--api_key") or "none", max_retries=0)
        messages = chat_messages(message, history, None)
        shown = [*history, {"role": "user", "content": message}, {"role": "assistant", "content": ""}]
        yield shown, ""
        try:
            # the last model listed: the deployment's adapter (the checkpoint sent here) when it has one
            stream = client.chat.completions.create(model=client.models.list().data[-1].id, messages=messages,
                                                    stream=True)
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    shown[-1]["content"] += chunk.choices[0].delta.content
                    yield shown, ""
        except openai.APIError as e:
            raise gr.Error(f"the deployment answered: {getattr(e, 'message', e)}") from e

    box.submit(reply, [box, chatbot, picker], [chatbot, box])
    refresh.click(lambda: gr.update(choices=job_choices(store, is_deployment)), None, [picker])
    return page


def build_eval(ctx: UIContext) -> CommandPage:
    page = CommandPage(ctx, "eval", {"eval": EvalArguments}, EVAL_COMMON)
    page.render()
    return page


def build_export(ctx: UIContext) -> CommandPage:
    page = CommandPage(ctx, "export", {"export": ExportArguments}, EXPORT_COMMON, initial={"merge_lora": True})
    page.render()
    return page
