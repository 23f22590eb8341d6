"""Arguments every command shares: which model, which template, which data.

Names follow ms-swift so a user's `swift ...` command runs as `swiftlike ...`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from ..infer.protocol import DEFAULT_MAX_LOGPROBS
from ..model.loader import ATTN_IMPLS
from ..template import AGENT_TEMPLATE_REGISTRY
from ..utils.errors import NotBuiltError, UsageError
from ..utils.fields import arg
from .parser import check_choices

# The commands whose encoding takes --agent_template; rlhf reads it for multi-turn rollouts (RlhfArguments).
AGENT_TEMPLATE_COMMANDS = ("sft", "infer", "deploy")


@dataclass
class BaseArguments:
    """Model, template and data arguments shared by all commands."""

    command: ClassVar[str] = ""
    model: str | None = arg(None, "Local HF directory or hub id (ModelScope; Hugging Face with --use_hf true). "
                            "Offline: HuggingFaceTB/SmolLM2-135M-Instruct or tiny-random/<model_type>.")
    model_type: str | None = arg(None, "Registered model type; detected from the id or config.json when omitted.")
    model_revision: str | None = arg(None, "Hub revision (branch, tag or commit) to download.")
    use_hf: bool = arg(False, "Download models and datasets from the Hugging Face hub instead of ModelScope.")
    torch_dtype: Literal["auto", "float32", "bfloat16", "float16"] = arg(
        "auto", "Weights dtype; auto = float32 on CPU, bfloat16 on GPU.")
    attn_impl: str | None = arg(None, f"Attention implementation where transformers runs the model (training, the "
                                f"pt engine): {', '.join(ATTN_IMPLS)} (flash_attn = flash_attention_2; on a "
                                "machine without CUDA a flash request runs as sdpa, with a warning). Default: "
                                "config.json's choice.")
    template: str | None = arg(None, "Chat template name; defaults to the model type's template.")
    agent_template: str | None = arg(None, "How tools, tool calls and tool results are written for the model: "
                                     f"{', '.join(AGENT_TEMPLATE_REGISTRY)} (ms-swift's names; see docs/agent.md). "
                                     "Default: the template's own (hermes for qwen, qwen2_5 and qwen3; the "
                                     "tokenizer's tool rendering for --template tokenizer); other templates "
                                     "need it for rows with tools in sft; infer and deploy fall back to hermes. Used by sft, infer, deploy "
                                     "and multi-turn rlhf (--multi_turn_scheduler) so far.")
    system: str | None = arg(None, "Default system prompt, as text or the path of a text file. "
                             "A system message in the data takes precedence.")
    max_length: int | None = arg(None, "Longest encoded sample in tokens (prompt + answer).")
    adapters: list[str] = arg([], "LoRA adapter directories (optionally name=path). A checkpoint's args.json "
                              "supplies --model, --model_type, --template and --system when they are not given.")
    dataset: list[str] = arg([], "Datasets: local .jsonl/.json/.csv files, built-in names or hub ids; "
                             "append #N to sample N rows.")
    val_dataset: list[str] = arg([], "Validation / evaluation datasets, same syntax as --dataset.")
    model_name: list[str] = arg([], "Name(s) replacing {{NAME}} in self-cognition data: one, or Chinese then English.")
    model_author: list[str] = arg([], "Author(s) replacing {{AUTHOR}} in self-cognition data.")
    seed: int = arg(42, "Random seed for sampling, data order and initialisation.")

    def __post_init__(self) -> None:
        check_choices(self)
        if self.attn_impl is not None and self.attn_impl not in ATTN_IMPLS:
            raise UsageError(f"--attn_impl {self.attn_impl!r}: choose from {', '.join(ATTN_IMPLS)}")
        self._fill_from_checkpoint()
        if self.agent_template is not None:
            AGENT_TEMPLATE_REGISTRY.lookup(self.agent_template)
            unread = self._agent_template_unread()
            if unread:
                raise NotBuiltError(f"--agent_template with swiftlike {self.command}: not built yet ({unread})")
        if self.max_length is not None and self.max_length <= 0:
            raise UsageError(f"--max_length must be positive, got {self.max_length}")

    def _agent_template_unread(self) -> str | None:
        """Why this run would not read --agent_template (a NotBuiltError names it), or None when it does."""
        if self.command in AGENT_TEMPLATE_COMMANDS:
            return None
        return f"tool calling is built for {', '.join(AGENT_TEMPLATE_COMMANDS)} and multi-turn rlhf so far"

    def model_engine_spec(self, backend: str, options=None, *, max_batch_size: int = 16, max_logprobs: int = DEFAULT_MAX_LOGPROBS):
        """What `build_engine` needs to load this command's --model on `backend` with the backend's `options`
        (VllmOptions, ...; None: its defaults). Each command that serves a model has its own `engine_spec()`,
        which names its backend and builds its options there, so a bad --vllm_* / --sglang_* / --lmdeploy_*
        value fails before any model loads."""
        from ..infer.engine import EngineSpec
        return EngineSpec(backend=backend, model=self.model, model_type=self.model_type, use_hf=self.use_hf,
                          model_revision=self.model_revision, template=self.template, system=self.system,
                          agent_template=self.agent_template,
                          torch_dtype=self.torch_dtype, attn_impl=self.attn_impl, adapters=self.adapter_paths(),
                          max_batch_size=max_batch_size, max_logprobs=max_logprobs, options=options)

    def adapter_paths(self) -> dict[str, str]:
        """`name=path` or bare paths (named after their directory) as {name: path}."""
        out: dict[str, str] = {}
        for spec in self.adapters:
            name, _, path = spec.rpartition("=") if "=" in spec else (Path(spec).name, "", spec)
            if name in out:
                raise UsageError(f"--adapters: two adapters named {name!r}; use name=path to tell them apart")
            out[name] = path
        return out

    def _fill_from_checkpoint(self) -> None:
        """A training checkpoint records how it was made; reuse that instead of asking again.

        The checkpoint is the first adapter, or else a `--model` directory written by a
        full-weight training run or by `swiftlike export`.
        """
        if self.adapters:
            first = Path(next(iter(self.adapter_paths().values())))
            candidates = (first / "args.json", first.parent / "args.json")
        elif self.model is not None and Path(self.model).is_dir():
            candidates = (Path(self.model) / "args.json",)
        else:
            return
        for candidate in candidates:
            if candidate.is_file():
                saved = json.loads(candidate.read_text())
                for key in ("model", "model_type", "template", "system"):
                    if getattr(self, key) is None and saved.get(key) is not None:
                        setattr(self, key, saved[key])
                return
