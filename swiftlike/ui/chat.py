"""`swiftlike app`: a Gradio chat page over a model, or over a running OpenAI-compatible endpoint.

The page always talks to an OpenAI API, through the engine interface's `OpenAIEngine` (the `openai` client
behind `stream_async`). With --base_url that is the endpoint the user names; with --model it is the `swiftlike deploy` API that this process mounts under /v1 next to the page
(one server, one port). One path either way, so the page shows exactly what any client of the deployment would
get, and the deploy server's batching, adapters-by-name and limits apply to the page too.
"""
from __future__ import annotations

from ..arguments.app_args import AppArguments
from ..infer.engine import InferEngine
from ..infer.protocol import InferRequest, RequestConfig
from ..utils import get_logger

logger = get_logger("swiftlike.ui")

LABELS = {
    "en": {"model": "Model", "system": "System prompt", "temperature": "Temperature", "max_tokens": "Max new tokens",
           "settings": "Settings", "placeholder": "Type a message and press Enter"},
    "zh": {"model": "模型", "system": "系统提示词", "temperature": "温度", "max_tokens": "最大生成长度",
           "settings": "参数设置", "placeholder": "输入消息后按回车"},
}


def text_of(content) -> str:
    """Gradio hands a message's content as a string or as a list of typed parts; the API wants text."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return content.get("text") or ""
    return "".join(text_of(part) for part in content or [])


def chat_messages(message: str, history: list[dict], system: str | None) -> list[dict]:
    """The OpenAI `messages` for the next turn: optional system prompt, the page's history, the new message."""
    messages = [{"role": "system", "content": system}] if system and system.strip() else []
    messages += [{"role": turn["role"], "content": text_of(turn["content"])} for turn in history
                 if turn.get("role") in ("user", "assistant")]
    return messages + [{"role": "user", "content": message}]


class ChatReplies:
    """The page's chat function: streams one reply from the engine and counts what it served."""

    def __init__(self, engine: InferEngine, args: AppArguments):
        self.engine = engine
        self.args = args
        self.replies = 0

    async def reply(self, message: str, history: list[dict], model: str, system: str, temperature: float,
                    max_tokens: int):
        import gradio as gr
        import openai
        request = InferRequest(messages=chat_messages(message, history, system),
                               adapter=None if model == self.engine.model_name else model)
        config = RequestConfig(max_tokens=int(max_tokens), temperature=temperature, top_p=self.args.top_p,
                               top_k=self.args.top_k, repetition_penalty=self.args.repetition_penalty)
        try:
            if self.args.stream:
                text = ""
                async for delta in self.engine.stream_async(request, config):
                    text += delta.text
                    yield text
            else:
                yield (await self.engine.generate_async(request, config)).text
        except (openai.APIError, ValueError) as e:
            raise gr.Error(f"the model server answered: {getattr(e, 'message', e)}") from e
        self.replies += 1


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
        ],
        additional_inputs_accordion=gr.Accordion(labels["settings"], open=False),
        analytics_enabled=False,
        concurrency_limit=None,  # the API behind the page bounds and batches the load
        flagging_mode="never",
    )


def loopback(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
