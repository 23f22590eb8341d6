"""The rollout server's HTTP routes. Every client mistake is a 4xx with a message; the server keeps serving.

Routes:
  GET  /health                      liveness and the policy version (no API key needed)
  GET  /info                        model, dtype, engine versions, policy version, adapters, and `weights`: the
                                    fingerprint of the base weights served now (fingerprint.py), which a
                                    LoRA-only trainer checks against its own base before pushing an adapter
  POST /generate                    batched sampling: token ids, per-token log-probs, finish reason, and the
                                    policy version of each token (`version_spans`: [[version, count], ...];
                                    a request in flight at an update continues under the new weights)
  POST /rollout                     multi-turn: rows (messages, tools, data_dict) -> finished trajectories of the
                                    server's --multi_turn_scheduler (trajectories.py), with per-token versions
  POST /update_weights/begin        open a weight update -> update_id; `weight_sync: delta` keeps a copy of it for
                                    later deltas,
                                    `delta_base` (a weights id) opens a delta update: 409 if other weights serve
  POST /update_weights/bucket       one bucket as safetensors bytes (HTTP transport)
  POST /update_weights/bucket_path  one bucket as a safetensors file on a shared path
  POST /update_weights/init_collective, /update_weights/bucket_collective   NCCL (GPU) / gloo buckets
  POST /update_weights/commit       apply the whole update atomically; the policy version increments and the
                                    answer carries the new weights id
  POST /update_weights/abort        drop an open update
  POST /load_adapter                a LoRA adapter by shared path, or its safetensors bytes (adapter-only sync)
  POST /reset_prefix_cache
  GET  /v1/models, POST /v1/chat/completions, POST /v1/completions   OpenAI-compatible (completions with
                                    vLLM's prompt_logprobs also serve a GKD teacher)
  POST /tokenize                    vLLM's: the served tokenizer's ids for a text
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Literal

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field

from ...infer import openai_api, tool_serving
from ...infer.protocol import InferRequest, RequestConfig
from ...deploy import plumbing
from ...rl.core.options import WeightSync
from ...utils import get_logger
from .service import JSON_BODY_LIMIT, RequestTooLarge, RolloutService, StaleDeltaBase
from ..wire.buckets import WeightUpdateError

logger = get_logger("swiftlike.rollout")


class Prompt(BaseModel):
    model_config = ConfigDict(extra="forbid")
    messages: list[dict] | None = None
    input_ids: list[int] | None = None


class GenerateBody(BaseModel):
    """The trainer -> server wire format: prompts, an adapter name, and the engines' own `RequestConfig`
    (validated by its own rules, so the sampling fields are declared once, in infer/protocol.py)."""
    model_config = ConfigDict(extra="forbid")
    prompts: list[Prompt] = Field(min_length=1)
    adapter: str | None = None
    config: RequestConfig = Field(default_factory=RequestConfig)


class RolloutRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    messages: list[dict] = Field(min_length=1)
    tools: list[dict] | None = None
    data_dict: dict = Field(default_factory=dict)  # the row's other columns (--vllm_server_pass_dataset)


class RolloutBody(BaseModel):
    """The trainer's rows for the server's scheduler; `config.max_tokens` is --max_completion_length, bounding
    each turn or the whole trajectory as `completion_length_limit_scope` says."""
    model_config = ConfigDict(extra="forbid")
    rows: list[RolloutRow] = Field(min_length=1)
    adapter: str | None = None
    config: RequestConfig = Field(default_factory=RequestConfig)
    completion_length_limit_scope: Literal["total", "per_round"] = "per_round"


class UpdateId(BaseModel):
    update_id: str


class BeginUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    delta_base: str | None = None
    weight_sync: WeightSync = "full"  # the trainer's --weight_sync; delta: keep a copy of this full update


class BucketPath(BaseModel):
    update_id: str
    path: str


class AdapterPath(BaseModel):
    name: str
    path: str


class CollectiveInit(BaseModel):
    host: str
    port: int
    world_size: int = Field(ge=2)
    rank: int = Field(ge=1)
    backend: str = "nccl"


class TensorSpec(BaseModel):
    name: str
    shape: list[int]
    dtype: str


class CollectiveBucket(BaseModel):
    update_id: str
    tensors: list[TensorSpec] = Field(min_length=1)


def create_app(service: RolloutService) -> FastAPI:
    app = FastAPI(title="swiftlike rollout")
    api_key = service.args.api_key
    bucket_limit = service.args.max_bucket_mb << 20

    def sampling_hint(exc: RequestValidationError) -> str:
        sampling = {f.name for f in dataclasses.fields(RequestConfig)}
        if any(e["type"] == "extra_forbidden" and e["loc"][-1] in sampling for e in exc.errors()):
            return " (sampling settings go in the body's `config` object, the engines' RequestConfig)"
        return ""

    plumbing.install(
        app, api_key=api_key, logger=logger,
        body_limit=lambda path: bucket_limit if path in ("/update_weights/bucket", "/load_adapter") else JSON_BODY_LIMIT,
        errors={StaleDeltaBase: 409, RequestTooLarge: 413}, validation_hint=sampling_hint,
        health=lambda: {"policy_version": service.version})

    @app.get("/info")
    async def info():
        return service.info()

    @app.post("/generate")
    async def generate(body: GenerateBody):
        config = body.config
        requests = [InferRequest(messages=p.messages, input_ids=p.input_ids, adapter=body.adapter)
                    for p in body.prompts]
        responses = await service.generate(requests, config)
        return {"policy_version": service.version, "results": [
            {"prompt_ids": r.prompt_token_ids, "policy_version": r.policy_version,
             "choices": [{"text": c.text, "token_ids": c.token_ids, "finish_reason": c.finish_reason,
                          "logprobs": [t.logprob for t in c.logprobs] if c.logprobs is not None else None,
                          "version_spans": c.version_spans or [[r.policy_version, len(c.token_ids)]]}
                         for c in r.choices]} for r in responses]}

    @app.post("/rollout")
    async def rollout(body: RolloutBody):
        trajectories = await service.rollout([row.model_dump() for row in body.rows], body.config, body.adapter,
                                             body.completion_length_limit_scope)
        return {"policy_version": service.version, "trajectories": trajectories}

    @app.post("/update_weights/begin")
    async def begin(body: BeginUpdate | None = None):
        body = body or BeginUpdate()
        return {"update_id": service.begin(body.delta_base, body.weight_sync), "dtype": service.dtype}

    @app.post("/update_weights/bucket")
    async def bucket(request: Request, update_id: str):
        data = await _read_body(request, bucket_limit)
        return {"tensors": await run_in_threadpool(service.stager.add_bytes, update_id, data)}

    @app.post("/update_weights/bucket_path")
    async def bucket_path(body: BucketPath):
        return {"tensors": await run_in_threadpool(service.stager.add_file, body.update_id, Path(body.path))}

    @app.post("/update_weights/init_collective")
    async def init_collective(body: CollectiveInit):
        service.collective().connect(body.host, body.port, body.world_size, body.rank, body.backend)
        return {"status": "joining"}

    @app.post("/update_weights/bucket_collective")
    async def bucket_collective(body: CollectiveBucket):
        specs = [(t.name, tuple(t.shape), t.dtype) for t in body.tensors]
        service.stager.check_announced(body.update_id, {n: s for n, s, _ in specs})
        service.collective().receive(body.update_id, specs)
        return {"tensors": len(specs)}

    @app.post("/update_weights/commit")
    async def commit(body: UpdateId):
        return await service.change_engine(service.commit, body.update_id)

    @app.post("/update_weights/abort")
    async def abort(body: UpdateId):
        service.stager.abort(body.update_id)
        return {"status": "aborted"}

    @app.post("/load_adapter")
    async def load_adapter(request: Request, name: str | None = None):
        if request.headers.get("content-type", "").startswith("application/json"):
            body = AdapterPath(**json.loads(await request.body()))
            name, path = body.name, Path(body.path)
        else:
            if not name:
                raise ValueError("an adapter sent as bytes needs ?name=<adapter name>")
            path = await run_in_threadpool(_write_adapter, service.adapter_dir(name), await request.body())
        version = await service.change_engine(service.load_adapter, name, path)
        return {"policy_version": version}

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache():
        await service.change_engine(service.engine.reset_prefix_cache)
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        names = [service.engine.model_name, *sorted(service.engine.adapters)]
        return {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "swiftlike"} for n in names]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await openai_api.json_object(request)
        req = openai_api.chat_request(body)
        req.adapter = _adapter_for(service, body)
        config = openai_api.request_config(body, service.args.default_max_tokens)
        response_format_asked = tool_serving.response_format_outputs(body.get("response_format")) is not None
        tool_choice = tool_serving.check_support(service.engine, req, config, response_format_asked)
        if tool_choice.forced:
            raise ValueError("`tool_choice` required / a named function is enforced by swiftlike deploy; the rollout "
                             "server answers tool_choice auto and none")
        service.engine.check_config(config)
        parser = service.engine.template.tool_parser
        config = tool_serving.with_tool_stops(config, parser, tool_choice)
        resp = (await service.generate([req], config, cut_at_updates=False))[0]
        return openai_api.chat_response(resp, body.get("model") or service.engine.model_name,
                                        openai_api.answer_shape(body), parser, tool_choice)

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await openai_api.json_object(request)
        reqs = openai_api.completion_requests(body, service.engine.tokenizer)
        for req in reqs:
            req.adapter = _adapter_for(service, body)
        config = openai_api.request_config(body, service.args.default_max_tokens)
        service.engine.check_config(config)
        resps = await service.generate(reqs, config, cut_at_updates=False)
        tokenizer = service.engine.tokenizer
        return openai_api.completion_response(resps, body.get("model") or service.engine.model_name,
                                              openai_api.answer_shape(body, tokenizer), tokenizer,
                                              prompt_logprobs_asked=body.get("prompt_logprobs") is not None)

    @app.post("/tokenize")
    async def tokenize(request: Request):
        return openai_api.tokenize(await openai_api.json_object(request), service.engine)

    return app


async def _read_body(request: Request, limit: int) -> bytearray:
    """The body in one preallocated buffer (Starlette's `body()` joins chunks into a second copy, which
    for a bucket of hundreds of MiB costs more than the network); the tensors then view it in place."""
    length = request.headers.get("content-length")
    buf = bytearray(int(length)) if length and length.isdigit() else bytearray()
    view, pos = memoryview(buf), 0
    async for chunk in request.stream():
        if pos + len(chunk) > limit:
            raise RequestTooLarge(f"bucket exceeds --max_bucket_mb {limit >> 20}; send smaller buckets")
        if pos + len(chunk) <= len(buf):
            view[pos:pos + len(chunk)] = chunk
        else:
            view.release()
            buf[pos:] = chunk
            view = memoryview(buf)
        pos += len(chunk)
    if pos != len(buf):
        raise ValueError(f"body ended after {pos} of {len(buf)} bytes")
    return buf


def _adapter_for(service: RolloutService, body: dict) -> str | None:
    """OpenAI's `model` field picks a loaded adapter by name; the base model's name (or none) means no adapter."""
    model = body.get("model")
    if model in service.engine.adapters:
        return model
    if model not in (None, "", service.engine.model_name):
        known = ", ".join([service.engine.model_name, *sorted(service.engine.adapters)])
        raise ValueError(f"unknown model {model!r}; this server serves: {known}")
    return None


def _write_adapter(path: Path, data: bytes) -> Path:
    """An adapter sent as safetensors bytes carries its adapter_config.json in the safetensors metadata."""
    from ..wire.buckets import read_header
    read_header(data)
    size = int.from_bytes(data[:8], "little")
    metadata = json.loads(data[8:8 + size]).get("__metadata__") or {}
    if "adapter_config" not in metadata:
        raise WeightUpdateError("adapter bytes need `adapter_config` (the adapter_config.json text) in the "
                                "safetensors metadata")
    json.loads(metadata["adapter_config"])
    (path / "adapter_model.safetensors").write_bytes(data)
    (path / "adapter_config.json").write_text(metadata["adapter_config"])
    return path
