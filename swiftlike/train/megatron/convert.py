"""Hugging Face Llama / Qwen2 checkpoints <-> megatron-core GPTModel (local layer spec), config and weights.

Pure functions: nothing here needs a process group, so the layout can be tested (and a checkpoint resharded)
without one. The layout facts, as megatron-core 0.16's local spec stores them:

- `linear_qkv` fuses q, k and v per query group: for each of the `num_key_value_heads` groups, the group's
  `heads / groups` query heads, then its key head, then its value head, `head_dim` rows each. Tensor parallelism
  cuts dim 0 into contiguous blocks, which is why a rank holds whole query groups (groups % TP must be 0).
- `linear_fc1` holds [gate; up], and megatron applies SwiGLU to each rank's local output by halving it, so a TP
  rank holds [its slice of gate; its slice of up], not a contiguous block of the full [gate; up].
- Column-parallel weights (qkv, fc1, and the vocabulary of the embedding and output layer) split on dim 0,
  row-parallel ones (`linear_proj`, `linear_fc2`) on dim 1; norms are replicated.
- The vocabulary is padded with zero rows to a multiple of `VOCAB_PADDING_MULTIPLE * TP` (as Megatron's training
  scripts do: every rank gets an equal slice and the GEMM a friendly size); the way back drops the padding, so the
  HF side always has exactly `vocab_size` rows.
"""
from __future__ import annotations

import re
from typing import Any

import torch
from torch import Tensor

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")
SUPPORTED_ROPE_TYPES = ("default", "llama3")
VOCAB_PADDING_MULTIPLE = 128
# In HF checkpoints but not weights: older transformers saved the rotary frequencies as a buffer.
_IGNORED_HF_KEYS = re.compile(r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq")


def _fail(hf_config: Any, field: str, value: Any, why: str) -> None:
    raise ValueError(f"{hf_config.model_type} config {field}={value!r}: {why}")


def rope_settings(hf_config: Any) -> dict[str, Any]:
    """The RoPE parameters, read from `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling` (4.x)."""
    params = getattr(hf_config, "rope_parameters", None)
    if params is None:
        params = dict(getattr(hf_config, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    params = dict(params)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        _fail(hf_config, "rope_parameters['rope_type']", rope_type,
              f"only {', '.join(SUPPORTED_ROPE_TYPES)} RoPE is implemented for the Megatron backend")
    partial = params.get("partial_rotary_factor", getattr(hf_config, "partial_rotary_factor", None) or 1.0)
    if partial != 1.0:
        _fail(hf_config, "partial_rotary_factor", partial, "only full-width RoPE is implemented")
    params["rope_type"] = rope_type
    return params


def attention_dims(hf_config: Any) -> tuple[int, int, int]:
    """(query heads, query groups, head_dim); head_dim may differ from hidden_size / heads (its own field)."""
    heads = hf_config.num_attention_heads
    groups = getattr(hf_config, "num_key_value_heads", None) or heads
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads
    if heads % groups:
        _fail(hf_config, "num_key_value_heads", groups, f"must divide num_attention_heads={heads}")
    return heads, groups, head_dim


def check_supported(hf_config: Any, tensor_model_parallel_size: int = 1) -> None:
    """Refuse what the Megatron layers here would compute differently from transformers."""
    if hf_config.model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"model_type {hf_config.model_type!r} has no Megatron conversion; supported: "
                         f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        _fail(hf_config, "hidden_act", hf_config.hidden_act, "only SwiGLU (silu) MLPs are converted")
    if getattr(hf_config, "use_sliding_window", False):
        _fail(hf_config, "use_sliding_window", True, "sliding-window attention is not implemented; set it to false")
    layer_types = set(getattr(hf_config, "layer_types", None) or ["full_attention"])
    if layer_types != {"full_attention"}:
        _fail(hf_config, "layer_types", sorted(layer_types), "only full_attention layers are implemented")
    if getattr(hf_config, "attention_bias", False):
        _fail(hf_config, "attention_bias", True, "megatron's add_qkv_bias has no o_proj bias to match it")
    if getattr(hf_config, "mlp_bias", False):
        _fail(hf_config, "mlp_bias", True, "the MLP projections are converted without biases")
    rope_settings(hf_config)
    heads, groups, _ = attention_dims(hf_config)
    tp = tensor_model_parallel_size
    for field, value in (("num_attention_heads", heads), ("num_key_value_heads", groups),
                         ("intermediate_size", hf_config.intermediate_size)):
        if value % tp:
            _fail(hf_config, field, value, f"must be divisible by tensor_model_parallel_size={tp}")


def padded_vocab_size(hf_config: Any, tensor_model_parallel_size: int = 1) -> int:
    multiple = VOCAB_PADDING_MULTIPLE * tensor_model_parallel_size
    return -(-hf_config.vocab_size // multiple) * multiple


def transformer_config(hf_config: Any, *, tensor_model_parallel_size: int = 1, pipeline_model_parallel_size: int = 1,
                       params_dtype: torch.dtype = torch.float32, use_cpu_initialization: bool | None = None):
    """megatron-core TransformerConfig for an HF Llama / Qwen2 config.

    TransformerConfig has no field for the rotary base or the position embedding type; GPTModel reads them from
    attributes of the config when present, so they are set as such (see `gpt_model_kwargs` for the rest of what
    GPTModel takes). Weights are not initialised (they come from the checkpoint), the kernels that need
    Transformer Engine or Apex are off, and dropout follows the checkpoint (HF applies `attention_dropout` in
    training too; these families have no hidden dropout). `use_cpu_initialization` defaults to "no CUDA".
    """
    from megatron.core.transformer import TransformerConfig

    check_supported(hf_config, tensor_model_parallel_size)
    if hf_config.num_hidden_layers % pipeline_model_parallel_size:
        _fail(hf_config, "num_hidden_layers", hf_config.num_hidden_layers,
              f"must be divisible by pipeline_model_parallel_size={pipeline_model_parallel_size}")
    heads, groups, head_dim = attention_dims(hf_config)
    config = TransformerConfig(
        num_layers=hf_config.num_hidden_layers, hidden_size=hf_config.hidden_size,
        ffn_hidden_size=hf_config.intermediate_size, num_attention_heads=heads, num_query_groups=groups,
        kv_channels=head_dim, normalization="RMSNorm", layernorm_epsilon=hf_config.rms_norm_eps,
        gated_linear_unit=True, activation_func=torch.nn.functional.silu, add_bias_linear=False,
        add_qkv_bias=hf_config.model_type == "qwen2", hidden_dropout=0.0,
        attention_dropout=float(getattr(hf_config, "attention_dropout", 0.0)),
        init_method_std=getattr(hf_config, "initializer_range", 0.02), perform_initialization=False,
        use_cpu_initialization=not torch.cuda.is_available() if use_cpu_initialization is None
        else use_cpu_initialization,
        params_dtype=params_dtype, bf16=params_dtype == torch.bfloat16, fp16=params_dtype == torch.float16,
        pipeline_dtype=params_dtype, tensor_model_parallel_size=tensor_model_parallel_size,
        pipeline_model_parallel_size=pipeline_model_parallel_size, sequence_parallel=False,
        masked_softmax_fusion=False, bias_activation_fusion=False, bias_dropout_fusion=False,
        apply_rope_fusion=False, gradient_accumulation_fusion=False, persist_layer_norm=False,
    )
    config.position_embedding_type = "rope"
    config.rotary_base = rope_settings(hf_config)["rope_theta"]
    return config


def gpt_model_kwargs(hf_config: Any, tensor_model_parallel_size: int = 1) -> dict[str, Any]:
    """The GPTModel arguments besides the config and the layer spec."""
    return {
        "vocab_size": padded_vocab_size(hf_config, tensor_model_parallel_size),
        "max_sequence_length": hf_config.max_position_embeddings,
        "share_embeddings_and_output_weights": bool(getattr(hf_config, "tie_word_embeddings", False)),
        "position_embedding_type": "rope",
        "rotary_base": rope_settings(hf_config)["rope_theta"],
    }


def fuse_qkv(q: Tensor, k: Tensor, v: Tensor, heads: int, groups: int, head_dim: int) -> Tensor:
    """HF's q, k, v projections (weights or biases) -> megatron's per-group [q..., k, v] rows."""
    per_group = heads // groups
    rest = q.shape[1:]
    parts = (q.reshape(groups, per_group * head_dim, *rest), k.reshape(groups, head_dim, *rest),
             v.reshape(groups, head_dim, *rest))
    return torch.cat(parts, dim=1).reshape(groups * (per_group + 2) * head_dim, *rest)


def split_qkv(qkv: Tensor, heads: int, groups: int, head_dim: int) -> tuple[Tensor, Tensor, Tensor]:
    """The inverse of `fuse_qkv`."""
    per_group = heads // groups
    rest = qkv.shape[1:]
    q, k, v = qkv.reshape(groups, (per_group + 2) * head_dim, *rest).split(
        [per_group * head_dim, head_dim, head_dim], dim=1)
    return (q.reshape(heads * head_dim, *rest).contiguous(), k.reshape(groups * head_dim, *rest).contiguous(),
            v.reshape(groups * head_dim, *rest).contiguous())


def _pad_rows(weight: Tensor, rows: int) -> Tensor:
    if weight.shape[0] == rows:
        return weight
    return torch.cat([weight, weight.new_zeros(rows - weight.shape[0], *weight.shape[1:])])


def _shard(tensor: Tensor, dim: int, tp_rank: int, tp_size: int) -> Tensor:
    return tensor.chunk(tp_size, dim=dim)[tp_rank].contiguous()


def _take(hf_state: dict[str, Tensor], key: str, used: set[str]) -> Tensor:
    if key not in hf_state:
        raise ValueError(f"HF state dict has no {key!r}: not a Llama / Qwen2 checkpoint of this config, "
                         "or a PEFT / sharded subset of one")
    used.add(key)
    return hf_state[key]


def _layer_to_mcore(hf_state, i, hf_config, tp_rank, tp_size, used) -> dict[str, Tensor]:
    heads, groups, head_dim = attention_dims(hf_config)
    src, dst = f"model.layers.{i}.", f"decoder.layers.{i}."
    out = {
        dst + "input_layernorm.weight": _take(hf_state, src + "input_layernorm.weight", used),
        dst + "pre_mlp_layernorm.weight": _take(hf_state, src + "post_attention_layernorm.weight", used),
        dst + "self_attention.linear_proj.weight":
            _shard(_take(hf_state, src + "self_attn.o_proj.weight", used), 1, tp_rank, tp_size),
        dst + "mlp.linear_fc2.weight": _shard(_take(hf_state, src + "mlp.down_proj.weight", used), 1, tp_rank, tp_size),
    }
    kinds = ("weight", "bias") if hf_config.model_type == "qwen2" else ("weight",)
    for kind in kinds:
        q, k, v = (_take(hf_state, f"{src}self_attn.{name}_proj.{kind}", used) for name in "qkv")
        out[f"{dst}self_attention.linear_qkv.{kind}"] = _shard(fuse_qkv(q, k, v, heads, groups, head_dim), 0,
                                                               tp_rank, tp_size)
    gate = _shard(_take(hf_state, src + "mlp.gate_proj.weight", used), 0, tp_rank, tp_size)
    up = _shard(_take(hf_state, src + "mlp.up_proj.weight", used), 0, tp_rank, tp_size)
    out[dst + "mlp.linear_fc1.weight"] = torch.cat([gate, up])
    return out


def hf_to_mcore(hf_state: dict[str, Tensor], hf_config: Any, tp_rank: int = 0, tp_size: int = 1) -> dict[str, Tensor]:
    """One TP rank's GPTModel state dict (PP=1, no `_extra_state`) from a full HF state dict.

    Strict both ways: a missing HF tensor or one this conversion would silently drop is an error. A tied
    checkpoint's `lm_head.weight` (present in `model.state_dict()`, absent from the saved file) is ignored.
    """
    if not 0 <= tp_rank < tp_size:
        raise ValueError(f"tp_rank={tp_rank} must be in [0, tp_size={tp_size})")
    check_supported(hf_config, tp_size)
    tied = bool(getattr(hf_config, "tie_word_embeddings", False))
    vocab_rows = padded_vocab_size(hf_config, tp_size)
    used: set[str] = set()
    out = {"embedding.word_embeddings.weight":
           _shard(_pad_rows(_take(hf_state, "model.embed_tokens.weight", used), vocab_rows), 0, tp_rank, tp_size),
           "decoder.final_layernorm.weight": _take(hf_state, "model.norm.weight", used)}
    if not tied:
        out["output_layer.weight"] = _shard(_pad_rows(_take(hf_state, "lm_head.weight", used), vocab_rows), 0,
                                            tp_rank, tp_size)
    for i in range(hf_config.num_hidden_layers):
        out.update(_layer_to_mcore(hf_state, i, hf_config, tp_rank, tp_size, used))
    left = sorted(k for k in hf_state if k not in used and not _IGNORED_HF_KEYS.fullmatch(k)
                  and not (tied and k == "lm_head.weight"))
    if left:
        raise ValueError(f"HF state dict has {len(left)} tensors this conversion does not map, e.g. {left[:3]}; "
                         f"is it a {hf_config.model_type} checkpoint with this config?")
    return out


def _per_rank(shards: list[dict[str, Tensor]], key: str, used: set[str]) -> list[Tensor]:
    missing = [rank for rank, state in enumerate(shards) if key not in state]
    if missing:
        raise ValueError(f"Megatron state of TP rank(s) {missing} has no {key!r}: not a PP=1 GPTModel state of "
                         "this config")
    used.add(key)
    return [state[key] for state in shards]


def _layer_to_hf(shards, i, hf_config, used) -> dict[str, Tensor]:
    heads, groups, head_dim = attention_dims(hf_config)
    src, dst = f"decoder.layers.{i}.", f"model.layers.{i}."
    out = {
        dst + "input_layernorm.weight": _per_rank(shards, src + "input_layernorm.weight", used)[0],
        dst + "post_attention_layernorm.weight": _per_rank(shards, src + "pre_mlp_layernorm.weight", used)[0],
        dst + "self_attn.o_proj.weight": torch.cat(_per_rank(shards, src + "self_attention.linear_proj.weight", used),
                                                   dim=1),
        dst + "mlp.down_proj.weight": torch.cat(_per_rank(shards, src + "mlp.linear_fc2.weight", used), dim=1),
    }
    kinds = ("weight", "bias") if hf_config.model_type == "qwen2" else ("weight",)
    for kind in kinds:
        qkv = torch.cat(_per_rank(shards, f"{src}self_attention.linear_qkv.{kind}", used))
        q, k, v = split_qkv(qkv, heads, groups, head_dim)
        out.update({f"{dst}self_attn.q_proj.{kind}": q, f"{dst}self_attn.k_proj.{kind}": k,
                    f"{dst}self_attn.v_proj.{kind}": v})
    halves = [fc1.chunk(2) for fc1 in _per_rank(shards, src + "mlp.linear_fc1.weight", used)]
    out[dst + "mlp.gate_proj.weight"] = torch.cat([gate for gate, _ in halves])
    out[dst + "mlp.up_proj.weight"] = torch.cat([up for _, up in halves])
    return out


def mcore_to_hf(mcore_states: list[dict[str, Tensor]], hf_config: Any) -> dict[str, Tensor]:
    """The full HF state dict (what `save_pretrained` writes) from every TP rank's GPTModel state (PP=1).

    `mcore_states[r]` is TP rank r's state; `_extra_state` entries are ignored. A tied checkpoint gets no
    `lm_head.weight`, as in the files transformers writes. The vocabulary is cut back to `vocab_size`.
    """
    if not mcore_states:
        raise ValueError("mcore_to_hf needs one Megatron state dict per TP rank; got none")
    tp = len(mcore_states)
    check_supported(hf_config, tp)
    shards = [{k: v for k, v in state.items() if not k.endswith("_extra_state")} for state in mcore_states]
    vocab = hf_config.vocab_size
    used: set[str] = set()
    embedding = torch.cat(_per_rank(shards, "embedding.word_embeddings.weight", used))
    out = {"model.embed_tokens.weight": embedding[:vocab].contiguous(),
           "model.norm.weight": _per_rank(shards, "decoder.final_layernorm.weight", used)[0]}
    if not getattr(hf_config, "tie_word_embeddings", False):
        out["lm_head.weight"] = torch.cat(_per_rank(shards, "output_layer.weight", used))[:vocab].contiguous()
    for i in range(hf_config.num_hidden_layers):
        out.update(_layer_to_hf(shards, i, hf_config, used))
    left = sorted({k for state in shards for k in state} - used)
    if left:
        raise ValueError(f"Megatron state has {len(left)} tensors with no HF counterpart, e.g. {left[:3]}: "
                         "a state of another config, or of a pipeline stage (PP>1 is not converted)")
    return out
