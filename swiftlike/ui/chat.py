"""`swiftlike app`: a Gradio chat page over a model, or over a running OpenAI-compatible endpoint.

The page always talks to an OpenAI API, through the engine interface's `OpenAIEngine` (the `openai` client
behind `stream_async`). With --base_url that is the endpoint the user names; with --model it is the `swiftlike deploy` API that this process mounts under /v1 next to the page
(one server, one port). One path either way, so the page shows exactly what any client of the deployment would
get, and the deploy server's batching, adapters-by-name and limits apply to the page too.
"""
from __future__ import annotations

from ..arguments.app_args import AppArguments
from ..infer.engine.openai_engine import OpenAIEngine
from ..infer.protocol import InferRequest, RequestConfig
from ..utils import get_logger
from .tool_chat import TOOL_CHOICES, answer_with_tools, offered_tools, openai_messages

logger = get_logger("swiftlike.ui")

LABELS = {
    "en": {"model": "Model", "system": "System prompt", "temperature": "Temperature", "max_tokens": "Max new tokens",
           "settings": "Settings", "placeholder": "Type a message and press Enter", "tools": "Tools",
           "tools_info": "Built-in tools the model may call; each call runs here and its result goes back to it",
           "tool_choice": "Tool choice", "seed": "Seed (empty: random)"},
    "zh": {"model": "模型", "system": "系统提示词", "temperature": "温度", "max_tokens": "最大生成长度",
           "settings": "参数设置", "placeholder": "输入消息后按回车", "tools": "工具",
           "tools_info": "模型可调用的内置工具；调用在此运行，结果返回给模型", "tool_choice": "工具选择",
           "seed": "随机种子（留空：随机）"},
}


def chat_messages(message: str, history: list[dict], system: str | None) -> list[dict]:
    """The OpenAI `messages` for the next turn: optional system prompt, the page's history (its tool bubbles as
    the tool turns they show), the new message."""
    messages = [{"role": "system", "content": system}] if system and system.strip() else []
    return messages + openai_messages(history) + [{"role": "user", "content": message}]


class ChatReplies:
    """The page's chat function: streams one reply from the engine and counts what it served."""

    def __init__(self, engine: OpenAIEngine, args: AppArguments):
        self.engine = engine
        self.args = args
        self.replies = 0

    async def reply(self, message: str, history: list[dict], model: str, system: str, temperature: float,
                    max_tokens: int, tools: list[str] | None = None, tool_choice: str = "auto",
                    seed: float | None = None):
        import gradio as gr
        import openai
        messages = chat_messages(message, history, system)
        adapter = None if model == self.engine.model_name else model
        config = RequestConfig(max_tokens=int(max_tokens), temperature=temperature, top_p=self.args.top_p,
                               top_k=self.args.top_k, repetition_penalty=self.args.repetition_penalty,
                               seed=None if seed is None else int(seed))
        try:
            offered = offered_tools(tools)
            if offered:  # the engine interface carries text; a tool loop needs the API's tool_calls
                async for bubbles in answer_with_tools(self.engine.async_client, messages, offered, tool_choice,
                                                       **self.engine.request_body(adapter, config)):
                    yield bubbles
            elif self.args.stream:
                text = ""
                async for delta in self.engine.stream_async(InferRequest(messages=messages, adapter=adapter), config):
                    text += delta.text
                    yield text
            else:
                yield (await self.engine.generate_async(InferRequest(messages=messages, adapter=adapter), config)).text
        except (openai.APIError, ValueError) as e:
            raise gr.Error(f"the model server answered: {getattr(e, 'message', e)}") from e
        self.replies += 1


def tool_inputs(labels: dict) -> list:
    """The tools a chat offers (none ticked: a text-only chat, as before) and the tool_choice of its first round."""
    import gradio as gr
    from ..tools import TOOL_REGISTRY
    return [gr.CheckboxGroup(list(TOOL_REGISTRY), value=[], label=labels["tools"], info=labels["tools_info"],
                             elem_id="chat-tools"),
            gr.Radio(list(TOOL_CHOICES), value="auto", label=labels["tool_choice"], elem_id="chat-tool-choice")]


def build_page(replies: ChatReplies, models: list[str], args: AppArguments):
    import gradio as gr
    labels = LABELS[args.lang]
    return gr.ChatInterface(
        replies.reply,
        title=args.studio_title or f"swiftlike · {models[0]}",
        textbox=gr.Textbox(placeholder=labels["placeholder"], show_label=False, elem_id="chat-input"),
        chatbot=gr.Chatbot(elem_id="chat-window", height=480),
        additional_inputs=[
            gr.Dropdown(models, value=models[0], label=labels["model"]),
            gr.Textbox(args.system or "", label=labels["system"], lines=2),
            gr.Slider(0.0, 2.0, value=args.temperature, step=0.05, label=labels["temperature"]),
            gr.Slider(1, max(args.max_new_tokens, 2048), value=args.max_new_tokens, step=1,
                      label=labels["max_tokens"]),
            *tool_inputs(labels),
            gr.Number(None, label=labels["seed"], precision=0, elem_id="chat-seed"),
        ],
        additional_inputs_accordion=gr.Accordion(labels["settings"], open=False),
        analytics_enabled=False,
        concurrency_limit=None,  # the API behind the page bounds and batches the load
        flagging_mode="never",
    )


def loopback(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
