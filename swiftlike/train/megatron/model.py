"""A megatron-core GPTModel behind the calling convention of a transformers CausalLM.

The trainers call `model(input_ids=..., attention_mask=..., position_ids=..., logits_to_keep=...)` and read
`.logits` / `.loss`; the weight sync to vLLM and the export want HF-named tensors. This module gives a GPTModel
(local layer spec, tensor parallel) exactly that surface, so the callers need not know which backend runs.

GPTModel.forward is not used: it builds one RoPE table for positions 0..s-1 (no per-row position ids) on CUDA, and
runs the output layer on every position. The embedding, decoder and output layer are driven here instead, with a
RoPE table from the caller's position ids and a boolean mask from HF's padding mask.
"""
from __future__ import annotations

import copy
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from ...model import ResolvedModel
from ...utils.checkpoint import STAGING_DIR, publish
from .convert import gpt_model_kwargs, hf_to_mcore, mcore_to_hf, transformer_config
from .parallel import gather_tensor_parallel
from .rope import inverse_frequencies, rotary_table

IGNORE_INDEX = -100
# What `save_pretrained` copies from the source directory besides the weights and config.json.
TOKENIZER_FILE_PATTERNS = ("tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab.*", "merges.txt",
                           "chat_template.*", "generation_config.json")


def read_hf_weights(model_dir: Path) -> dict[str, Tensor]:
    from safetensors.torch import load_file

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{model_dir} has no *.safetensors weights; the Megatron backend reads safetensors only "
                         "(load and re-save the checkpoint with transformers to convert it)")
    state: dict[str, Tensor] = {}
    for path in files:
        state.update(load_file(path))
    return state


def attention_block_mask(attention_mask: Tensor | None, position_ids: Tensor) -> Tensor:
    """Megatron's boolean mask, True where a query may not look: the future, padding keys, and (HF's packed
    rows: no padding mask and position ids that restart) keys of another sequence in the row.

    Shape [batch or 1, 1, seq, seq]. Rows of padding queries may end up fully masked; megatron fills masked
    scores with -10000, so they stay finite (their outputs are garbage, as in transformers, and unused).
    """
    batch, seq = position_ids.shape
    blocked = torch.ones(seq, seq, dtype=torch.bool, device=position_ids.device).triu(1)[None, None]
    if attention_mask is not None:
        if attention_mask.dim() != 2 or tuple(attention_mask.shape) != (batch, seq):
            raise ValueError(f"attention_mask must be HF's (batch, seq) = {(batch, seq)} padding mask of 1/0, "
                             f"got shape {tuple(attention_mask.shape)}")
        return blocked | (attention_mask == 0)[:, None, None, :]
    restarts = torch.diff(position_ids, prepend=position_ids[:, :1] - 1, dim=-1) != 1
    if restarts.any():
        segment = restarts.cumsum(-1)
        blocked = blocked | (segment[:, None, :, None] != segment[:, None, None, :])
    return blocked


class _GatherVocab(torch.autograd.Function):
    """Concatenate the TP ranks' vocabulary slices of the logits; the gradient goes back as this rank's slice.

    megatron's own gather (`runtime_gather_output=True`) allocates its buffer on `torch.cuda.current_device()`,
    which fails without CUDA; this one allocates where the logits are, and is what runs on a GPU too. Every rank
    computes the same loss from the full logits, so the slice of its gradient is the whole gradient of the shard.
    """

    @staticmethod
    def forward(ctx, local: Tensor, group) -> Tensor:
        ctx.group, ctx.width = group, local.shape[-1]
        pieces = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
        dist.all_gather(pieces, local.contiguous(), group=group)
        return torch.cat(pieces, dim=-1)

    @staticmethod
    def backward(ctx, grad: Tensor):
        rank = dist.get_rank(ctx.group)
        return grad[..., rank * ctx.width:(rank + 1) * ctx.width].contiguous(), None


def shifted_cross_entropy(logits: Tensor, labels: Tensor, num_items_in_batch: int | Tensor | None = None) -> Tensor:
    """transformers' causal LM loss: token t predicts label t+1, -100 ignored, mean over the counted tokens
    (or sum / `num_items_in_batch` when the Trainer passes it for gradient accumulation)."""
    if labels.shape != logits.shape[:2]:
        raise ValueError(f"labels must be (batch, seq) = {tuple(logits.shape[:2])}, got {tuple(labels.shape)}")
    shift_logits = logits[:, :-1].reshape(-1, logits.shape[-1])
    shift_labels = labels[:, 1:].reshape(-1).to(logits.device)
    if num_items_in_batch is None:
        return F.cross_entropy(shift_logits, shift_labels, ignore_index=IGNORE_INDEX)
    return F.cross_entropy(shift_logits, shift_labels, ignore_index=IGNORE_INDEX, reduction="sum") / num_items_in_batch


def mark_tensor_parallel_weights(gpt: torch.nn.Module) -> None:
    """Tag each split weight as megatron does when it initialises it (`tensor_model_parallel`, `partition_dim`).

    megatron-core sets these attributes only inside its weight initialisation, which is skipped here because the
    weights come from the checkpoint; without them the weights of the parallel layers pass for replicated ones, so
    gathering them (`hf_state_dict`) or megatron's gradient-norm clipping (which counts replicated parameters on TP
    rank 0 only) would treat each rank's slice as the whole tensor. Biases are tagged by megatron either way.
    """
    from megatron.core import tensor_parallel

    split_dims = ((tensor_parallel.ColumnParallelLinear, 0), (tensor_parallel.VocabParallelEmbedding, 0),
                  (tensor_parallel.RowParallelLinear, 1))
    for module in gpt.modules():
        weight = getattr(module, "weight", None)
        for layer_type, dim in split_dims:
            if (isinstance(module, layer_type) and isinstance(weight, torch.nn.Parameter)
                    and not hasattr(weight, "tensor_model_parallel")):
                tensor_parallel.set_tensor_model_parallel_attributes(weight, True, dim, 1)


class MegatronCausalLM(torch.nn.Module):
    """GPTModel built from an HF Llama / Qwen2 checkpoint, on this rank's slice of the tensor-parallel group.

    Call `initialize_parallel(tp, pp)` first. `config` is the HF config (callers read it); `gpt` is the
    megatron-core GPTModel, whose parameters are this module's (optimisers and DDP wrappers take them as usual).
    """

    def __init__(self, model: str | Path | ResolvedModel, params_dtype: torch.dtype = torch.float32):
        super().__init__()
        from megatron.core import parallel_state
        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from transformers import AutoConfig

        if not parallel_state.model_parallel_is_initialized():
            raise RuntimeError("megatron's process groups are not set up: call "
                               "swiftlike.train.megatron.initialize_parallel(tp, pp) before building the model")
        pipeline = parallel_state.get_pipeline_model_parallel_world_size()
        if pipeline > 1:
            raise NotImplementedError(f"pipeline_model_parallel_size={pipeline}: the Megatron backend loads and runs "
                                      "whole models only (PP=1); use tensor parallelism to split the model")
        self.model_dir = Path(model.model_dir if isinstance(model, ResolvedModel) else model)
        if not (self.model_dir / "config.json").is_file():
            raise ValueError(f"{self.model_dir} is not an HF checkpoint directory (no config.json)")
        self.config = AutoConfig.from_pretrained(self.model_dir)
        self.tp_size = parallel_state.get_tensor_model_parallel_world_size()
        self.tp_rank = parallel_state.get_tensor_model_parallel_rank()
        self.params_dtype = params_dtype
        mcore_config = transformer_config(self.config, tensor_model_parallel_size=self.tp_size,
                                          params_dtype=params_dtype)
        self.gpt = GPTModel(mcore_config, get_gpt_layer_local_spec(normalization="RMSNorm"), parallel_output=True,
                            **gpt_model_kwargs(self.config, self.tp_size))
        mark_tensor_parallel_weights(self.gpt)
        # The local spec's torch norms ignore params_dtype; megatron's trainers cast the whole model
        # (Float16Module), so the same is done here: every parameter, and what hf_state_dict exports, in one dtype.
        self.gpt.to(dtype=params_dtype)
        self._load_hf_weights()
        self.register_buffer("inv_freq", inverse_frequencies(self.config, self.device), persistent=False)

    @property
    def device(self) -> torch.device:
        return self.gpt.embedding.word_embeddings.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.params_dtype

    def _load_hf_weights(self) -> None:
        state = hf_to_mcore(read_hf_weights(self.model_dir), self.config, self.tp_rank, self.tp_size)
        result = self.gpt.load_state_dict(state, strict=False)
        missing = [k for k in result.missing_keys if not k.endswith("_extra_state")]
        if missing or result.unexpected_keys:
            raise RuntimeError(f"converted weights do not fit the GPTModel: missing {missing[:3]}, "
                               f"unexpected {result.unexpected_keys[:3]} (megatron-core's local spec changed names?)")

    def _logits(self, hidden: Tensor) -> Tensor:
        """[s, b, h] -> [b, s, vocab] float32, gathered over TP and cut back to HF's vocabulary."""
        from megatron.core import parallel_state

        weight = self.gpt.shared_embedding_or_output_weight() if self.gpt.share_embeddings_and_output_weights else None
        logits, _ = self.gpt.output_layer(hidden, weight=weight, runtime_gather_output=False)
        if self.tp_size > 1:
            logits = _GatherVocab.apply(logits, parallel_state.get_tensor_model_parallel_group())
        return logits[..., :self.config.vocab_size].transpose(0, 1).float()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, position_ids: Tensor | None = None,
                logits_to_keep: int | Tensor = 0, labels: Tensor | None = None, past_key_values: Any = None,
                num_items_in_batch: int | Tensor | None = None, **unused: Any):
        """transformers' CausalLM forward: logits (batch, kept positions, vocab) in float32, loss if `labels`.

        `logits_to_keep` is an int N (the last N positions; 0 = all) or a 1-D tensor of positions. The loss is
        over every position whatever `logits_to_keep` says (it needs them all). Keyword arguments transformers
        takes and this backend has no use for (`use_cache`, `return_dict`, ...) are accepted and ignored.
        """
        from transformers.modeling_outputs import CausalLMOutputWithPast

        if past_key_values is not None:
            raise NotImplementedError("the Megatron backend has no KV cache: pass past_key_values=None (for GRPO, "
                                      "--share_prompt_prefix false)")
        if unused.get("inputs_embeds") is not None:
            raise NotImplementedError("the Megatron backend embeds input_ids itself; inputs_embeds is not supported")
        batch, seq = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(seq, device=input_ids.device).expand(batch, -1)
        elif position_ids.shape[0] != batch:
            position_ids = position_ids.expand(batch, -1)
        mask = attention_block_mask(attention_mask, position_ids)
        hidden = self._embed(input_ids, position_ids)
        hidden = self.gpt.decoder(hidden_states=hidden, attention_mask=mask,
                                  rotary_pos_emb=rotary_table(self.inv_freq, position_ids))
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep.to(hidden.device)
        if labels is None:
            return CausalLMOutputWithPast(logits=self._logits(hidden[keep]))
        logits = self._logits(hidden)
        loss = shifted_cross_entropy(logits, labels, num_items_in_batch)
        return CausalLMOutputWithPast(loss=loss, logits=logits[:, keep])

    def _embed(self, input_ids: Tensor, position_ids: Tensor) -> Tensor:
        """The embedding lookup, [s, b, h]. transformers' Llama and Qwen2 build their embedding with
        `padding_idx=config.pad_token_id`, so the embedding row of that token never gets a gradient from its
        lookups, wherever it occurs (for many chat models it is the end-of-turn token, inside every prompt);
        megatron's embedding has no padding index, so the lookups of that token are cut from the graph here.
        Without it, the same batch updates that row differently on the two backends."""
        hidden = self.gpt.embedding(input_ids=input_ids, position_ids=position_ids)
        pad = self.config.pad_token_id
        if pad is None or not torch.is_grad_enabled():
            return hidden
        frozen = (input_ids == pad).transpose(0, 1).unsqueeze(-1)
        return torch.where(frozen, hidden.detach(), hidden)

    def hf_state_dict(self) -> dict[str, Tensor]:
        """The full model under HF names, on every rank (each TP shard is all-gathered over the TP group).

        Every rank of a TP group must call it. The tensors are detached and in the training dtype, on the model's
        device; replicated ones (the norms) share storage with the parameters, so clone before changing them.
        LoRA adapters (lora.py) are not in it: `merged_hf_state_dict()` has them folded in.
        """
        return self._hf_state({})

    def merged_hf_state_dict(self) -> dict[str, Tensor]:
        """`hf_state_dict` with any LoRA adapters folded in: each adapted weight a new tensor, the base untouched."""
        from .lora import merged_weights
        return self._hf_state(merged_weights(self.gpt))

    def _hf_state(self, replaced: dict[str, Tensor]) -> dict[str, Tensor]:
        local = {k: replaced.get(k, v.detach()) for k, v in self.gpt.state_dict().items()
                 if not k.endswith("_extra_state") and ".lora." not in k}
        return mcore_to_hf(gather_tensor_parallel(local, self.sharded_parameter_names()), self.config)

    # The adapter interface the trainers use on a PEFT model, for lora.py's adapters.
    def disable_adapter(self):
        from .lora import disabled
        return disabled(self)

    def get_output_embeddings(self):
        """The layer whose weight has the vocabulary rows (the output layer, or the tied embedding)."""
        if self.gpt.share_embeddings_and_output_weights:
            return self.gpt.embedding.word_embeddings
        return self.gpt.output_layer

    def sharded_parameter_names(self) -> set[str]:
        """Names (in `gpt`) of the parameters split over TP ranks; the rest are replicated."""
        return {name for name, p in self.gpt.named_parameters() if getattr(p, "tensor_model_parallel", False)}

    def save_pretrained(self, out_dir: str | Path) -> Path:
        """Write an HF checkpoint (config.json, tokenizer files from the source, model.safetensors) that
        transformers and vLLM load, LoRA adapters merged in. Every rank calls it; global rank 0 writes. The
        directory appears complete or not at all: it is written under `<parent>/.staging/` and renamed into place
        (replacing an older one)."""
        out = Path(out_dir)
        state = self.merged_hf_state_dict()
        if not dist.is_initialized() or dist.get_rank() == 0:
            staging_root = out.parent / STAGING_DIR
            staging_root.mkdir(parents=True, exist_ok=True)
            staged = Path(tempfile.mkdtemp(dir=staging_root, prefix=f"{out.name}."))
            try:
                self.write_hf_files(state, staged)
                publish(staged, out)
            except BaseException:
                shutil.rmtree(staged, ignore_errors=True)
                raise
        if dist.is_initialized():
            dist.barrier()
        return out

    def write_hf_files(self, state: dict[str, Tensor], directory: Path) -> None:
        """The files of an HF checkpoint of `state` into an existing `directory` (a Trainer's checkpoint directory,
        which the Trainer publishes whole)."""
        from safetensors.torch import save_file

        config = copy.deepcopy(self.config)
        config.dtype = self.params_dtype
        config.save_pretrained(directory)
        for pattern in TOKENIZER_FILE_PATTERNS:
            for path in self.model_dir.glob(pattern):
                if path.is_file():
                    shutil.copy2(path, directory / path.name)
        tensors = {k: v.to("cpu").contiguous() for k, v in state.items()}
        save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
