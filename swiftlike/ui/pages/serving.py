"""Deploy & chat, sample, eval and export tabs. The deploy tab starts `swiftlike deploy` as a job and chats with it through
its OpenAI API, streaming the reply, as any client of that deployment would; ticked built-in tools are offered
with the request and the calls the model makes run here (ui/tool_chat.py)."""
from __future__ import annotations

from ...arguments.deploy_args import DeployArguments
from ...arguments.eval_args import EVAL_BACKENDS, EvalArguments
from ...arguments.export_args import ExportArguments
from ...arguments.sample_args import SampleArguments
from ..chat import chat_messages, tool_inputs
from ..forms import flag_value
from ..jobs import RUNNING
from ..tool_chat import answer_with_tools, offered_tools
from .command import CommandPage, UIContext, job_choices
from .training import health, server_host

DEPLOY_COMMON = ["model", "adapters", "infer_backend", "port", "served_model_name", "max_new_tokens", "torch_dtype",
                 "api_key", "vllm_max_model_len", "system", "agent_template"]
EVAL_COMMON = ["model", "adapters", "eval_backend", "eval_dataset", "eval_limit", "eval_dataset_args",
               "infer_backend", "max_new_tokens", "eval_url", "eval_output_dir", "eval_num_samples", "temperature"]
EXPORT_COMMON = ["adapters", "model", "merge_lora", "output_dir", "max_shard_size"]
SAMPLE_COMMON = ["model", "adapters", "dataset", "sampler_type", "sampler_engine", "num_return_sequences",
                 "n_best_to_keep", "orm_model", "prm_model", "temperature", "max_new_tokens", "output_dir",
                 "output_file", "resume"]


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
    with gr.Row():
        tools, tool_choice = tool_inputs(labels)

    async def reply(message: str, history: list[dict], job_id: str | None, tool_names: list[str], choice: str):
        import openai
        if not job_id:
            raise gr.Error(labels["no_job"])
        job = store.get(job_id)
        argv, port = job.record["argv"], job.record["port"]
        if health(server_host(argv), port) != "healthy":
            raise gr.Error(labels["not_ready"])
        client = openai.AsyncOpenAI(base_url=f"http://{server_host(argv)}:{port}/v1",
                                    api_key=flag_value(argv, "--api_key") or "none", max_retries=0)
        messages = chat_messages(message, history, None)
        asked = [*history, {"role": "user", "content": message}]
        yield [*asked, {"role": "assistant", "content": ""}], ""
        try:
            # the last model listed: the deployment's adapter (the checkpoint sent here) when it has one
            model = (await client.models.list()).data[-1].id
            async for bubbles in answer_with_tools(client, messages, offered_tools(tool_names), choice, model=model):
                yield [*asked, *bubbles], ""
        except openai.APIError as e:
            raise gr.Error(f"the deployment answered: {getattr(e, 'message', e)}") from e
        finally:
            await client.close()

    box.submit(reply, [box, chatbot, picker, tools, tool_choice], [chatbot, box])
    refresh.click(lambda: gr.update(choices=job_choices(store, is_deployment)), None, [picker])
    return page


def build_sample(ctx: UIContext) -> CommandPage:
    page = CommandPage(ctx, "sample", {"sample": SampleArguments}, SAMPLE_COMMON)
    page.render()
    return page


def build_eval(ctx: UIContext) -> CommandPage:
    import gradio as gr
    labels = ctx.labels
    page = CommandPage(ctx, "eval", {"eval": EvalArguments}, EVAL_COMMON)
    page.render()
    with gr.Accordion(labels["datasets"], open=False, elem_id="eval-datasets"):
        with gr.Row():
            backend = gr.Dropdown(list(EVAL_BACKENDS), value="swiftlike", label="eval_backend",
                                  elem_id="eval-datasets-backend", scale=2)
            text = gr.Textbox(label=labels["dataset_search"], elem_id="eval-datasets-text", scale=3)
            go = gr.Button(labels["search"], elem_id="eval-datasets-search", scale=1)
        found = gr.Markdown(elem_id="eval-datasets-found")

    def listed(name: str, needle: str) -> str:
        from ...eval.catalog import search
        try:
            names, total = search(name, needle or "")
        except (RuntimeError, FileNotFoundError, ImportError) as e:
            return f"**{name}**: {e}"
        more = f" (first {len(names)} shown)" if total > len(names) else ""
        return f"**{name}**: {total} {labels['matches']}{more}\n\n" + ", ".join(f"`{n}`" for n in names)
    go.click(listed, [backend, text], [found])
    text.submit(listed, [backend, text], [found])
    return page


def build_export(ctx: UIContext) -> CommandPage:
    page = CommandPage(ctx, "export", {"export": ExportArguments}, EXPORT_COMMON, initial={"merge_lora": True})
    page.render()
    return page
