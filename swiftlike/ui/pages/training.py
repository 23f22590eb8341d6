"""The training tabs: sft / pt, rlhf (every --rlhf_type), and GRPO with its rollout-server panel.

Which fields come first is the only thing written here; the forms themselves come from the argument dataclasses.
"""
from __future__ import annotations

import requests

from ...arguments.rlhf_args import RlhfArguments
from ...arguments.rollout_args import RolloutServerArguments
from ...arguments.train_args import PtArguments, TrainArguments
from ..forms import flag_value
from ..jobs import RUNNING, JobStore
from .command import CommandPage, UIContext, job_choices

TRAIN_COMMON = ["model", "dataset", "tuner_type", "output_dir", "max_steps", "num_train_epochs", "learning_rate",
                "per_device_train_batch_size", "gradient_accumulation_steps", "max_length", "lora_rank",
                "logging_steps", "save_steps", "torch_dtype", "system", "agent_template", "val_dataset"]
RLHF_COMMON = ["rlhf_type", "model", "dataset", "tuner_type", "output_dir", "beta", "loss_type", "max_steps",
               "learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "max_length",
               "ref_model", "teacher_model", "reward_model", "reward_funcs", "num_ppo_epochs", "kl_coef",
               "logging_steps", "save_steps", "torch_dtype"]
GRPO_COMMON = ["model", "dataset", "reward_funcs", "external_plugins", "reward_weights", "num_generations",
               "max_completion_length", "use_vllm", "vllm_mode", "vllm_server_host", "vllm_server_port",
               "tuner_type", "output_dir", "max_steps", "learning_rate", "per_device_train_batch_size",
               "gradient_accumulation_steps", "beta", "temperature", "loss_type", "logging_steps", "save_steps",
               "torch_dtype", "multi_turn_scheduler", "max_turns", "agent_template"]
ROLLOUT_COMMON = ["model", "port", "host", "torch_dtype", "vllm_max_model_len", "vllm_gpu_memory_utilization",
                  "vllm_enable_lora", "api_key", "adapters"]


def build_train(ctx: UIContext) -> CommandPage:
    page = CommandPage(ctx, "sft", {"sft": TrainArguments, "pt": PtArguments}, TRAIN_COMMON)
    page.render()
    return page


def build_rlhf(ctx: UIContext) -> CommandPage:
    page = CommandPage(ctx, "rlhf", {"rlhf": RlhfArguments}, RLHF_COMMON)
    page.render()
    return page


def build_grpo(ctx: UIContext) -> list[CommandPage]:
    import gradio as gr
    page = CommandPage(ctx, "grpo", {"rlhf": RlhfArguments}, GRPO_COMMON, fixed={"rlhf_type": "grpo"})
    page.render()
    with gr.Accordion(ctx.labels["rollout_servers"], open=False, elem_id="rollout-panel"):
        servers = CommandPage(ctx, "rollout", {"rollout": RolloutServerArguments}, ROLLOUT_COMMON, follow=False)
        servers.render()
        build_server_list(ctx)
    return [page, servers]


def health(host: str, port: int | None) -> str:
    """What the server's GET /health answers now."""
    if port is None:
        return "no port"
    try:
        r = requests.get(f"http://{host}:{port}/health", timeout=0.5)
        return "healthy" if r.status_code == 200 else f"HTTP {r.status_code}"
    except requests.RequestException:
        return "not answering"


def server_host(argv: list[str]) -> str:
    """The address to reach a server the UI started: its --host, or loopback for a wildcard bind."""
    host = flag_value(argv, "--host") or "127.0.0.1"
    return "127.0.0.1" if host in ("0.0.0.0", "::") else host


def servers_table(store: JobStore) -> list[list]:
    rows = []
    for job in store.list():
        if job.record["command"] != "rollout":
            continue
        port = job.record.get("port")
        rows.append([job.id, port, job.status,
                     health(server_host(job.record["argv"]), port) if job.state == RUNNING else ""])
    return rows


def build_server_list(ctx: UIContext) -> None:
    """Running `swiftlike rollout` jobs: their health, and a Stop for each."""
    import gradio as gr
    labels, store = ctx.labels, ctx.store

    def is_server(job):
        return job.record["command"] == "rollout"

    with gr.Row():
        picker = gr.Dropdown(job_choices(store, is_server), label=labels["servers"], elem_id="rollout-picker",
                             scale=4)
        check = gr.Button(labels["health"], elem_id="rollout-health", scale=1)
        stop = gr.Button(labels["stop_server"], variant="stop", elem_id="rollout-stop", scale=1)
    table = gr.Dataframe(headers=["id", "port", "state", "health"], value=servers_table(store), interactive=False,
                         elem_id="rollout-servers")

    def show(job_id):
        return gr.update(choices=job_choices(store, is_server)), servers_table(store)

    def stop_server(job_id):
        if job_id:
            store.stop(job_id)
        return show(job_id)

    check.click(show, [picker], [picker, table])
    stop.click(stop_server, [picker], [picker, table])
    gr.Timer(5.0).tick(show, [picker], [picker, table], show_progress="hidden")
