"""`swiftlike deploy --task_type seq_cls`: a sequence-classification (reward) model behind vLLM's route for
classifiers, `POST /classify`, with vLLM's request and response shapes, so a client of one serves the other.

Not served (vLLM has them for pooling models): `/score` (cross-encoder scoring of text pairs, which a decoder
reward model reading one conversation is not), `/pooling` (raw pooler output) and `/v1/embeddings`. Generation
routes answer 400 naming `/classify`. Scoring runs on the classifier's own batching (classifier.py): the inputs of
one request, and of concurrent requests, share forward passes of up to `--max_batch_size` (pt) or
`--vllm_max_num_seqs` (vLLM) sequences.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Literal

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, ValidationError

from ..arguments.deploy_args import DeployArguments
from ..infer import openai_api
from ..infer.engine.classifier import LocalClassifier
from ..utils import get_logger
from . import plumbing

logger = get_logger("swiftlike.deploy")

# vLLM's /classify fields that change what is scored, refused unless left at vLLM's default (a 400 names them)
NOT_BUILT = ("truncate_prompt_tokens", "padding", "truncation_side", "mm_processor_kwargs", "cache_salt",
             "add_generation_prompt", "continue_final_message", "chat_template", "chat_template_kwargs",
             "media_io_kwargs")


class ClassifyRequest(BaseModel):
    """vLLM's ClassificationRequest: the completion form (`input`: a text, texts, token ids or lists of them) or
    the chat form (`messages`: one conversation, rendered with the model's template)."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    input: str | list[str] | list[int] | list[list[int]] | None = None
    messages: list | None = None
    add_special_tokens: bool | None = None  # vLLM's default: true for `input`, false for `messages`
    use_activation: bool | None = None  # None/true: the classifier's activation; false: the raw logits
    user: str | None = None  # no effect
    request_id: str | None = None
    priority: int = 0
    truncate_prompt_tokens: int | None = None
    padding: Literal["max_length", "do_not_pad"] | None = None
    truncation_side: Literal["left", "right"] | None = None
    mm_processor_kwargs: dict | None = None
    cache_salt: str | None = None
    add_generation_prompt: bool = False
    continue_final_message: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict | None = None
    media_io_kwargs: dict | None = None


def parse_request(body: dict) -> ClassifyRequest:
    try:
        request = ClassifyRequest.model_validate(body)
    except ValidationError as e:
        error = e.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else ""
        if error["type"] == "extra_forbidden":
            raise ValueError(f"`{field}` is not a field of /classify (vLLM's classification request)") from None
        if field == "input":
            raise ValueError("`input` must be a text, a list of texts, a list of token ids or a list of token-id "
                             "lists") from None
        raise ValueError(f"invalid request: `{field}`: {error['msg']}") from None
    for name in NOT_BUILT:
        if getattr(request, name) != ClassifyRequest.model_fields[name].default:
            raise ValueError(f"`{name}` is not supported by this server's /classify; leave it out")
    if request.priority != 0:
        raise ValueError("`priority` is not supported by this server (no priority scheduling); leave it at 0")
    if (request.input is None) == (request.messages is None):
        raise ValueError("send either `input` (a text, a list of texts, token ids or a list of token-id lists) or "
                         "`messages` (one conversation)")
    return request


def token_sequences(request: ClassifyRequest, classifier: LocalClassifier) -> list[list[int]]:
    """The request's inputs as token ids, in order: one per text or token-id list, or the one conversation."""
    if request.messages is not None:
        special = bool(request.add_special_tokens)
        return [classifier.encode_conversation(openai_api.chat_messages(request.messages), special)]
    special = request.add_special_tokens is not False
    value = request.input
    if isinstance(value, str):
        return [classifier.encode_text(value, special)]
    if not value:
        raise ValueError("`input` is an empty list; send at least one text or token-id list")
    if isinstance(value[0], str):
        return [classifier.encode_text(text, special) for text in value]
    if isinstance(value[0], int):
        return [list(value)]
    return [list(ids) for ids in value]


def create_classify_app(classifier: LocalClassifier, args: DeployArguments) -> FastAPI:
    app = FastAPI(title="swiftlike deploy (sequence classification)")
    name = args.served_model_name or classifier.model_name
    limit = asyncio.Semaphore(args.max_concurrency)
    plumbing.install(app, api_key=args.api_key, logger=logger,
                     guarded=lambda path: path.startswith("/v1") or path == "/classify")

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "swiftlike"}]}

    @app.post("/classify")
    async def classify(request: Request):
        body = await openai_api.json_object(request)
        parsed = parse_request(body)
        if parsed.model not in (None, "", name, classifier.model_name):
            raise ValueError(f"unknown model {parsed.model!r}; this server serves: {name}")
        sequences = token_sequences(parsed, classifier)
        async with limit:
            logits = await classifier.classify_ids_async(sequences)
        data = []
        for index, row in enumerate(logits):
            best = max(range(len(row)), key=row.__getitem__)
            probs = row if parsed.use_activation is False else classifier.activate(row)
            data.append({"index": index, "label": classifier.id2label.get(best), "probs": probs,
                         "num_classes": len(row)})
        tokens = sum(len(s) for s in sequences)
        return {"id": f"classify-{parsed.request_id or uuid.uuid4().hex}", "object": "list",
                "created": int(time.time()), "model": name, "data": data,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0,
                          "prompt_tokens_details": None}}

    def not_generative():
        raise ValueError(f"this deployment serves a sequence-classification (reward) model, {name}, which scores "
                         "text and does not generate it; POST /classify with `messages` (one conversation) or "
                         "`input` (texts or token ids) instead")

    for route in ("/v1/chat/completions", "/v1/completions"):
        app.add_api_route(route, not_generative, methods=["POST"])
    return app
