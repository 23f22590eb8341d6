"""Chat templates declared as data. Each also carries an equivalent Jinja template."""
from __future__ import annotations

from ..utils.registry import Registry
from .agent import get_agent_template
from .base import Template, TemplateMeta
from .tokenizer_template import TOKENIZER_TEMPLATE, TOKENIZER_TEMPLATE_META, TokenizerTemplate

TEMPLATE_REGISTRY: Registry[TemplateMeta] = Registry("template", "--template")


def register_template(meta: TemplateMeta) -> TemplateMeta:
    return TEMPLATE_REGISTRY.register(meta.name, meta)


def get_template_meta(name: str) -> TemplateMeta:
    return TEMPLATE_REGISTRY.lookup(name)


def get_template(name: str, tokenizer, system: str | None = None, agent_template: str | None = None) -> Template:
    """A registered format, or with `tokenizer` the tokenizer's own chat template.

    `agent_template` (--agent_template) writes tools, calls and results; without it a registered format uses
    its own default (ms-swift's: hermes for the Qwen formats) and the tokenizer's template its own tool
    rendering, where it has one."""
    agent = get_agent_template(agent_template) if agent_template is not None else None
    if name == TOKENIZER_TEMPLATE:
        return TokenizerTemplate(tokenizer, system, registered=tuple(sorted(set(TEMPLATE_REGISTRY) - {name})),
                                 agent=agent)
    meta = get_template_meta(name)
    if agent is None and meta.agent_template is not None:
        agent = get_agent_template(meta.agent_template)
    return Template(meta, tokenizer, system, agent)


def _chatml_jinja(default_system: str | None) -> str:
    head = ""
    if default_system is not None:
        head = ("{% if loop.first and messages[0]['role'] != 'system' %}"
                "{{ '<|im_start|>system\\n" + default_system + "<|im_end|>\\n' }}{% endif %}")
    return ("{% for message in messages %}" + head +
            "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def _chatml(name: str, default_system: str | None, description: str, agent_template: str | None = None) -> TemplateMeta:
    return TemplateMeta(
        name=name,
        system_format="<|im_start|>system\n{content}<|im_end|>\n",
        user_format="<|im_start|>user\n{content}<|im_end|>\n",
        assistant_prefix="<|im_start|>assistant\n",
        assistant_suffix="<|im_end|>",
        turn_separator="\n",
        chat_template=_chatml_jinja(default_system),
        default_system=default_system,
        stop_words=("<|im_end|>", "<|endoftext|>"),
        agent_template=agent_template,
        description=description,
    )


_QWEN3_JINJA = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}"
    "{%- set content = m['content'] -%}{%- set reasoning = '' -%}"
    "{%- if '</think>' in content -%}"
    "{%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{%- if loop.index0 > ns.last_user and (loop.last or reasoning) -%}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}"
    "{%- else -%}{{- '<|im_start|>assistant\\n' + content }}{%- endif -%}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif -%}"
    "{%- endif -%}"
)

_LLAMA3_JINJA = (
    "{% for message in messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = '<|begin_of_text|>' + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)


def _register_builtin() -> None:
    register_template(TOKENIZER_TEMPLATE_META)
    register_template(_chatml("chatml", None, "plain ChatML, no default system prompt"))
    register_template(_chatml("qwen", "You are a helpful assistant.", "Qwen2 ChatML", "hermes"))
    register_template(_chatml(
        "qwen2_5", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", "Qwen2.5 ChatML",
        "hermes"))
    register_template(_chatml(
        "smollm2", "You are a helpful AI assistant named SmolLM, trained by Hugging Face", "SmolLM2 ChatML"))
    register_template(TemplateMeta(
        name="qwen3",
        system_format="<|im_start|>system\n{content}<|im_end|>\n",
        user_format="<|im_start|>user\n{content}<|im_end|>\n",
        assistant_prefix="<|im_start|>assistant\n",
        assistant_suffix="<|im_end|>",
        turn_separator="\n",
        chat_template=_QWEN3_JINJA,
        stop_words=("<|im_end|>", "<|endoftext|>"),
        thinking=True,
        agent_template="hermes",
        description="Qwen3 ChatML with <think> blocks on the final answer",
    ))
    register_template(TemplateMeta(
        name="llama3",
        system_format="<|start_header_id|>system<|end_header_id|>\n\n{content}<|eot_id|>",
        user_format="<|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|>",
        assistant_prefix="<|start_header_id|>assistant<|end_header_id|>\n\n",
        assistant_suffix="<|eot_id|>",
        turn_separator="",
        chat_template=_LLAMA3_JINJA,
        bos="<|begin_of_text|>",
        stop_words=("<|eot_id|>", "<|end_of_text|>"),
        strip_content=True,
        description="Llama 3 instruct header format",
    ))


_register_builtin()
