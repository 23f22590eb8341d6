"""`swiftlike deploy`: the OpenAI API over our engines, with streaming (SSE), adapters as model names,
OpenAI-style errors, an API key, a concurrency limit and a graceful shutdown (SIGTERM lets in-flight
requests finish)."""
from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from ..arguments.deploy_args import DeployArguments
from ..infer import openai_api, tool_serving
from ..infer.engine import InferEngine
from ..infer.protocol import InferRequest, RequestConfig, StreamDelta
from ..utils import get_logger
from . import plumbing

logger = get_logger("swiftlike.deploy")

GRACEFUL_SHUTDOWN_S = 60


@dataclass
class ServeSettings:
    """What the OpenAI routes read of `swiftlike deploy`'s arguments: a server started by another command (eval
    serving a model, or a training run's live one, to a harness) fills it without a whole DeployArguments."""

    max_new_tokens: int
    max_concurrency: int = 256
    served_model_name: str | None = None
    api_key: str | None = None

    @classmethod
    def of(cls, args: DeployArguments) -> ServeSettings:
        return cls(args.max_new_tokens, args.max_concurrency, args.served_model_name, args.api_key)


def create_app(engine: InferEngine, settings: ServeSettings) -> FastAPI:
    """The OpenAI routes over `engine`, whose `generate_async` / `stream_async` serve concurrent requests."""
    app = FastAPI(title="swiftlike deploy")
    base_name = settings.served_model_name or engine.model_name
    limit = asyncio.Semaphore(settings.max_concurrency)

    plumbing.install(app, api_key=settings.api_key, logger=logger, guarded=lambda path: path.startswith("/v1"))

    @app.get("/v1/models")
    async def models():
        names = [base_name, *sorted(engine.adapters)]
        return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "swiftlike"}
                                           for n in names]}

    def adapter_for(body: dict) -> str | None:
        model = body.get("model")
        if model in engine.adapters:
            return model
        if model not in (None, "", base_name, engine.model_name):
            known = ", ".join([base_name, *sorted(engine.adapters)])
            raise ValueError(f"unknown model {model!r}; this server serves: {known}")
        return None

    async def answer(body: dict, reqs: list[InferRequest], chat: bool):
        for req in reqs:
            req.adapter = adapter_for(body)
        config = openai_api.request_config({**body, "stream": False}, settings.max_new_tokens)
        response_format_asked = tool_serving.response_format_outputs(body.get("response_format")) is not None
        tool_choice = tool_serving.check_support(engine, reqs[0], config, response_format_asked)
        engine.check_config(config)
        parser = engine.template.tool_parser
        config = tool_serving.with_tool_stops(config, parser, tool_choice)
        model = body.get("model") or base_name
        shape = openai_api.answer_shape(body, engine.tokenizer)
        if body.get("stream"):
            if len(reqs) > 1:
                raise ValueError("stream=true takes one prompt; send a batch of prompts without streaming")
            if shape.echo or shape.return_token_ids or shape.tokens_as_ids:
                raise ValueError("echo, return_token_ids and return_tokens_as_token_ids are answered without "
                                 "streaming; send them with stream=false")
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            tools = (parser, tool_choice) if chat and tool_choice.mode != "none" else None
            return StreamingResponse(_sse(engine, limit, reqs[0], config, model, chat, include_usage, tools),
                                     media_type="text/event-stream")

        async def one(req: InferRequest):
            async with limit:
                return await tool_serving.generate(engine, req, config)
        resps = await asyncio.gather(*(one(req) for req in reqs))
        if chat:
            return openai_api.chat_response(resps[0], model, shape, parser, tool_choice)
        return openai_api.completion_response(resps, model, shape, engine.tokenizer,
                                              prompt_logprobs_asked=body.get("prompt_logprobs") is not None)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await openai_api.json_object(request)
        return await answer(body, [openai_api.chat_request(body)], chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await openai_api.json_object(request)
        return await answer(body, openai_api.completion_requests(body, engine.tokenizer), chat=False)

    @app.post("/tokenize")
    async def tokenize(request: Request):
        """vLLM's route: the served tokenizer's ids for a text, so a client (GKD's served teacher) can check
        that it shares the tokenizer before it reads token ids from this server."""
        return openai_api.tokenize(await openai_api.json_object(request), engine)

    @app.post("/detokenize")
    async def detokenize(request: Request):
        return openai_api.detokenize(await openai_api.json_object(request), engine)

    @app.get("/tokenizer_info")
    async def tokenizer_info():
        """vLLM's route (behind its --enable-tokenizer-info-endpoint): what a remote-tokenizer client needs."""
        return openai_api.tokenizer_info(engine)

    return app


async def _deltas(engine: InferEngine, req: InferRequest, config: RequestConfig, forced: bool):
    """The engine's deltas; a forced tool call is generated whole (in constrained steps) and sent as one."""
    if not forced:
        async for chunk in engine.stream_async(req, config):
            yield chunk
        return
    resp = await tool_serving.generate(engine, req, config)
    for c in resp.choices:
        yield StreamDelta(c.index, c.text, c.token_ids, c.finish_reason)


async def _sse(engine: InferEngine, limit, req: InferRequest, config: RequestConfig, model: str, chat: bool,
               include_usage: bool, tools: tuple | None = None):
    """Server-sent events in OpenAI's chunk format; the last data line is [DONE]. With `tools` (the agent
    template and the tool choice) each choice's text goes through a ToolCallStream: content as it comes, calls
    as OpenAI's tool_calls deltas (index, id, name, arguments) and finish_reason tool_calls."""
    kind, prefix = ("chat.completion.chunk", "chatcmpl") if chat else ("text_completion", "cmpl")
    base = {"id": f"{prefix}-{uuid.uuid4().hex}", "object": kind, "created": int(time.time()), "model": model}
    completion_tokens = 0
    prompt_tokens = len(engine.prompt_ids(req))
    async with limit:
        if chat:
            first = [{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None,
                      "logprobs": None} for i in range(config.n)]
            yield f"data: {json.dumps({**base, 'choices': first})}\n\n"
        streams = {}
        try:
            async for chunk in _deltas(engine, req, config, tools is not None and tools[1].forced):
                completion_tokens += len(chunk.token_ids)
                if tools is None:
                    choice = openai_api.stream_choice(chunk, chat)
                    yield f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"
                    continue
                stream = streams.setdefault(chunk.index, tool_serving.ToolCallStream(*tools))
                for choice in _tool_chunk_choices(stream, chunk):
                    yield f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"
        except ValueError as e:
            yield f"data: {json.dumps({'error': {'message': str(e), 'type': 'invalid_request_error'}})}\n\n"
    if include_usage:
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n"
    yield "data: [DONE]\n\n"


def _tool_chunk_choices(stream: tool_serving.ToolCallStream, chunk: StreamDelta) -> list[dict]:
    """The chunk choices one delta makes: its content (if any can go out), and at its end the calls."""
    out = []
    content = stream.feed(chunk.text)
    if chunk.finish_reason is None:
        if content:
            out.append({"index": chunk.index, "delta": {"content": content}, "finish_reason": None, "logprobs": None})
        return out
    rest, calls, finish = stream.finish(chunk.finish_reason)
    if content + rest:
        out.append({"index": chunk.index, "delta": {"content": content + rest}, "finish_reason": None,
                    "logprobs": None})
    if calls:
        out.append({"index": chunk.index, "delta": {"tool_calls": calls}, "finish_reason": None, "logprobs": None})
    out.append({"index": chunk.index, "delta": {}, "finish_reason": finish, "logprobs": None})
    return out


def serve(app: FastAPI, host: str, port: int) -> None:
    """Serve until SIGTERM or Ctrl-C; requests in flight get up to GRACEFUL_SHUTDOWN_S to finish."""
    import uvicorn
    # uvicorn drains in-flight requests on SIGTERM, then re-raises the signal to the previous handler; with
    # the default one the process would die there, before the caller closes its engine and reports.
    signal.signal(signal.SIGTERM, lambda *_: None)
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
