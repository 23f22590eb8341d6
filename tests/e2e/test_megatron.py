"""The Megatron backend against transformers: weight layout, logits, loss, gradients, export, and TP=2 on gloo.

Four tiny checkpoints: the packaged tiny-random Qwen2.5 and Llama 3 (tied embeddings, as many KV heads as query
heads) and two built here with grouped-query attention, untied embeddings and a vocabulary that megatron pads
(the Llama one with Llama 3.1's RoPE scaling), so a wrong per-group QKV order, a gate/up swap or a vocabulary
slip shows up as a logit difference rather than hiding behind a symmetric layout.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install 'swiftlike[megatron]')")

from swiftlike.train.megatron import (MegatronCausalLM, destroy_parallel, hf_to_mcore,  # noqa: E402
                                      initialize_parallel, mcore_to_hf, transformer_config)
from swiftlike.train.megatron.convert import fuse_qkv, padded_vocab_size, split_qkv  # noqa: E402
from swiftlike.train.megatron.model import read_hf_weights  # noqa: E402
from model_ids import TINY, TINY_LLAMA  # noqa: E402
from paths import HELPERS, REPO  # noqa: E402

WORKER = HELPERS / "megatron_tp_worker.py"
PACKAGED = (TINY, TINY_LLAMA)  # the packaged tiny checkpoints
GQA = ("gqa-qwen2", "gqa-llama")
ALL = PACKAGED + GQA
PAD_ID = 0


def build_gqa_checkpoint(kind: str, out: Path) -> Path:
    from transformers import AutoConfig, AutoModelForCausalLM

    common = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=False,
                  rms_norm_eps=1e-6)
    if kind == "gqa-qwen2":
        config = AutoConfig.for_model("qwen2", rope_parameters={"rope_type": "default", "rope_theta": 1e6}, **common)
    else:
        rope = {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        config = AutoConfig.for_model("llama", rope_parameters=rope, **common)
    torch.manual_seed(3)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.1)  # the norms and biases too, so no tensor is trivially symmetric
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    from swiftlike.model import resolve_model

    dirs = {name: resolve_model(name).model_dir for name in PACKAGED}
    root = tmp_path_factory.mktemp("megatron-ckpt")
    dirs.update({kind: build_gqa_checkpoint(kind, root / kind) for kind in GQA})
    return dirs


@pytest.fixture(scope="module")
def parallel():
    initialize_parallel(1, 1)
    yield
    destroy_parallel()


def hf_model(model_dir: Path):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def hf_config(model_dir: Path):
    from transformers import AutoConfig
    return AutoConfig.from_pretrained(model_dir)


def padded_batch(lengths: tuple[int, int], side: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two random sequences of different lengths padded to the longer one on `side`; (input_ids, attention_mask)."""
    gen = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((2, width), PAD_ID)
    mask = torch.zeros(2, width, dtype=torch.long)
    for row, n in enumerate(lengths):
        span = slice(0, n) if side == "right" else slice(width - n, width)
        ids[row, span] = torch.randint(1, 900, (n,), generator=gen)
        mask[row, span] = 1
    return ids, mask


def max_diff_at_real_positions(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    real = mask.bool()
    return (a[real] - b[real]).abs().max().item()


# --- conversion, no process group ---

def test_fused_qkv_is_per_query_group_and_fc1_shards_are_gate_then_up():
    heads, groups, head_dim = 4, 2, 1
    q, k, v = torch.tensor([[0.], [1.], [2.], [3.]]), torch.tensor([[10.], [11.]]), torch.tensor([[20.], [21.]])
    fused = fuse_qkv(q, k, v, heads, groups, head_dim)
    assert fused.flatten().tolist() == [0, 1, 10, 20, 2, 3, 11, 21]
    assert all(torch.equal(a, b) for a, b in zip(split_qkv(fused, heads, groups, head_dim), (q, k, v)))


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("name", ALL)
def test_hf_to_megatron_to_hf_is_bit_exact(checkpoints, name, tp):
    config = hf_config(checkpoints[name])
    hf_state = read_hf_weights(checkpoints[name])
    shards = [hf_to_mcore(hf_state, config, rank, tp) for rank in range(tp)]
    vocab_rows = padded_vocab_size(config, tp)
    assert vocab_rows % (128 * tp) == 0 and vocab_rows >= config.vocab_size
    assert shards[0]["embedding.word_embeddings.weight"].shape[0] == vocab_rows // tp
    back = mcore_to_hf(shards, config)
    assert sorted(back) == sorted(hf_state)
    unequal = [k for k in hf_state if not torch.equal(back[k], hf_state[k])]
    assert not unequal, f"changed by the round trip: {unequal}"


def test_tp2_shard_of_fc1_holds_its_gate_slice_then_its_up_slice(checkpoints):
    config = hf_config(checkpoints["gqa-qwen2"])
    hf_state = read_hf_weights(checkpoints["gqa-qwen2"])
    gate, up = hf_state["model.layers.0.mlp.gate_proj.weight"], hf_state["model.layers.0.mlp.up_proj.weight"]
    half = config.intermediate_size // 2
    rank1 = hf_to_mcore(hf_state, config, 1, 2)["decoder.layers.0.mlp.linear_fc1.weight"]
    assert torch.equal(rank1, torch.cat([gate[half:], up[half:]]))


@pytest.mark.parametrize("change, field", [
    ({"model_type": "mistral"}, "model_type 'mistral'"),
    ({"use_sliding_window": True}, "use_sliding_window"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}}, "rope_type"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"layer_types": ["full_attention", "sliding_attention"]}, "layer_types"),
])
def test_unsupported_configs_are_refused_naming_the_field(checkpoints, change, field):
    config = hf_config(checkpoints["gqa-qwen2"])
    for key, value in change.items():
        setattr(config, key, value)
    with pytest.raises(ValueError, match=field):
        transformer_config(config)


def test_tensor_parallel_size_must_divide_the_kv_heads(checkpoints):
    with pytest.raises(ValueError, match="num_key_value_heads=2: must be divisible by tensor_model_parallel_size=4"):
        transformer_config(hf_config(checkpoints["gqa-qwen2"]), tensor_model_parallel_size=4)


def test_transformer_config_carries_the_checkpoint(checkpoints):
    config = transformer_config(hf_config(checkpoints["gqa-llama"]))
    assert (config.num_query_groups, config.kv_channels, config.ffn_hidden_size) == (2, 16, 128)
    assert config.gated_linear_unit and config.normalization == "RMSNorm" and not config.add_qkv_bias
    assert config.rotary_base == 5e5 and config.layernorm_epsilon == 1e-6
    assert transformer_config(hf_config(checkpoints["gqa-qwen2"])).add_qkv_bias


def test_a_foreign_tensor_in_the_hf_state_is_an_error(checkpoints):
    config = hf_config(checkpoints["gqa-qwen2"])
    hf_state = read_hf_weights(checkpoints["gqa-qwen2"])
    hf_state["model.layers.0.self_attn.q_norm.weight"] = torch.ones(16)
    with pytest.raises(ValueError, match="does not map"):
        hf_to_mcore(hf_state, config)


# --- the model, TP=1 in this process ---

@pytest.fixture(scope="module")
def models(parallel, checkpoints):
    return {name: (MegatronCausalLM(path).eval(), hf_model(path)) for name, path in checkpoints.items()}


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("name", ALL)
def test_logits_match_transformers_at_real_positions(models, name, side):
    megatron, hf = models[name]
    ids, mask = padded_batch((9, 6), side)
    with torch.no_grad():
        ours, theirs = megatron(ids, attention_mask=mask).logits, hf(input_ids=ids, attention_mask=mask).logits
    assert ours.dtype == torch.float32 and ours.shape == (2, 9, hf.config.vocab_size)
    diff = max_diff_at_real_positions(ours, theirs.float(), mask)
    print(f"{name} {side}-padded max |logit diff| {diff:.2e}")
    assert diff < 1e-4


@pytest.mark.parametrize("name", ["gqa-qwen2", TINY_LLAMA])
def test_logits_to_keep_and_explicit_position_ids(models, name):
    megatron, hf = models[name]
    ids, mask = padded_batch((9, 6), "left")
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # what GRPO passes for left-padded prompts
    with torch.no_grad():
        last = megatron(ids, attention_mask=mask, position_ids=positions, logits_to_keep=3).logits
        ref = hf(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=3).logits
        assert last.shape == (2, 3, hf.config.vocab_size)
        assert (last - ref).abs().max().item() < 1e-4
        right_ids, right_mask = padded_batch((9, 6), "right")
        picked = torch.tensor([0, 2, 5])
        ours = megatron(right_ids, attention_mask=right_mask, logits_to_keep=picked).logits
        theirs = hf(input_ids=right_ids, attention_mask=right_mask, logits_to_keep=picked).logits
    assert ours.shape == (2, 3, hf.config.vocab_size)
    assert (ours - theirs).abs().max().item() < 1e-4


def test_packed_row_without_mask_attends_within_each_sequence(models):
    megatron, hf = models["gqa-llama"]
    ids = torch.randint(1, 900, (1, 10), generator=torch.Generator().manual_seed(5))
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 0, 1, 2]])
    with torch.no_grad():
        ours = megatron(ids, position_ids=positions).logits
        theirs = hf(input_ids=ids, position_ids=positions, use_cache=False).logits  # with a cache HF does not unpack
        alone = hf(input_ids=ids[:, 4:7]).logits
    assert (ours - theirs).abs().max().item() < 1e-4
    assert (ours[:, 4:7] - alone).abs().max().item() < 1e-4


def labels_for(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :2] = -100  # a "prompt" that is not trained on
    return labels


@pytest.mark.parametrize("name", ALL)
def test_loss_and_gradients_match_transformers(parallel, checkpoints, name):
    megatron, hf = MegatronCausalLM(checkpoints[name]), hf_model(checkpoints[name])
    ids, mask = padded_batch((9, 6), "right", seed=1)
    labels = labels_for(ids, mask)
    ours = megatron(ids, attention_mask=mask, labels=labels, logits_to_keep=1)
    theirs = hf(input_ids=ids, attention_mask=mask, labels=labels)
    assert ours.logits.shape[1] == 1
    loss_diff = abs(ours.loss.item() - theirs.loss.item())
    print(f"{name} loss {ours.loss.item():.6f} |diff| {loss_diff:.2e}")
    assert loss_diff < 1e-5
    ours.loss.backward()
    theirs.loss.backward()
    missing = [n for n, p in megatron.named_parameters() if p.requires_grad and p.grad is None]
    infinite = [n for n, p in megatron.named_parameters() if p.grad is not None and not p.grad.isfinite().all()]
    assert not missing and not infinite, (missing, infinite)
    grads = mcore_to_hf([{n: p.grad for n, p in megatron.gpt.named_parameters()}], megatron.config)
    reference = {n: p.grad for n, p in hf.named_parameters()}
    worst = max((grads[n] - reference[n]).abs().max().item() / (reference[n].abs().max().item() + 1e-12)
                for n in grads)
    print(f"{name} max relative |grad diff| {worst:.2e}")
    assert worst < 1e-4


def test_bf16_model_is_bf16_throughout_and_close_to_transformers(parallel, checkpoints):
    from transformers import AutoModelForCausalLM

    megatron = MegatronCausalLM(checkpoints["gqa-qwen2"], params_dtype=torch.bfloat16)
    hf = AutoModelForCausalLM.from_pretrained(checkpoints["gqa-qwen2"], dtype=torch.bfloat16)
    assert {p.dtype for p in megatron.parameters()} == {torch.bfloat16}  # the torch norms too
    assert {t.dtype for t in megatron.hf_state_dict().values()} == {torch.bfloat16}
    ids, mask = padded_batch((9, 6), "right", seed=1)
    labels = labels_for(ids, mask)
    ours = megatron(ids, attention_mask=mask, labels=labels)
    assert ours.logits.dtype == torch.float32
    assert abs(ours.loss.item() - hf(input_ids=ids, attention_mask=mask, labels=labels).loss.item()) < 2e-2


def test_bf16_lora_merged_weights_leave_the_base_bit_identical(parallel, checkpoints):
    """What a weight sync and an export read (`merged_hf_state_dict`) has every adapter folded in, while the
    base stays bit-identical however often it is read; the adapters still act and can be disabled."""
    from swiftlike.train.megatron.lora import adapters, apply_lora

    model = MegatronCausalLM(checkpoints["gqa-qwen2"], params_dtype=torch.bfloat16)
    apply_lora(model, rank=4, alpha=16, dropout=0.0)
    torch.manual_seed(0)
    with torch.no_grad():
        for _, adapter in adapters(model):
            adapter.lora_B.normal_(0, 0.5)
    base = {k: v.clone() for k, v in model.hf_state_dict().items()}
    for _ in range(10):
        merged = model.merged_hf_state_dict()
    assert all(torch.equal(model.hf_state_dict()[k], v) for k, v in base.items())
    changed = [k for k in base if not torch.equal(merged[k], base[k])]
    assert "model.layers.0.self_attn.q_proj.weight" in changed and "model.layers.0.mlp.down_proj.weight" in changed
    assert not any("norm" in k or "embed" in k for k in changed)
    ids, mask = padded_batch((9, 6), "right", seed=1)
    with torch.no_grad():
        adapted = model(ids, attention_mask=mask).logits
        with model.disable_adapter():
            plain = model(ids, attention_mask=mask).logits
    assert not torch.equal(adapted, plain)

def test_perturbed_megatron_parameter_shows_in_the_right_hf_tensor(parallel, checkpoints):
    megatron = MegatronCausalLM(checkpoints["gqa-qwen2"])
    before = {k: v.clone() for k, v in megatron.hf_state_dict().items()}
    layer = megatron.gpt.decoder.layers[1]
    head_dim, per_group_rows, ffn = 16, (2 + 2) * 16, 128
    with torch.no_grad():
        # query group 1, its key head, row 3 -> k_proj row 16 + 3
        layer.self_attention.linear_qkv.weight[per_group_rows + 2 * head_dim + 3, 7] += 1.0
        layer.self_attention.linear_qkv.bias[per_group_rows + 1] += 1.0  # group 1, first query head -> q row 33
        layer.mlp.linear_fc1.weight[ffn + 5, 2] += 1.0  # the up half -> up_proj row 5
    after = megatron.hf_state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    prefix = "model.layers.1."
    assert changed == {prefix + "self_attn.k_proj.weight", prefix + "self_attn.q_proj.bias",
                       prefix + "mlp.up_proj.weight"}
    assert (after[prefix + "self_attn.k_proj.weight"] - before[prefix + "self_attn.k_proj.weight"]).nonzero().tolist() \
        == [[16 + 3, 7]]
    assert (after[prefix + "self_attn.q_proj.bias"] - before[prefix + "self_attn.q_proj.bias"]).nonzero().tolist() \
        == [[2 * head_dim + 1]]
    assert (after[prefix + "mlp.up_proj.weight"] - before[prefix + "mlp.up_proj.weight"]).nonzero().tolist() \
        == [[5, 2]]


@pytest.mark.parametrize("name", [TINY, "gqa-llama"])
def test_save_pretrained_loads_in_transformers_with_the_same_logits(models, checkpoints, tmp_path, name):
    from transformers import AutoTokenizer

    megatron, _ = models[name]
    out = tmp_path / "export"
    megatron.save_pretrained(out)
    megatron.save_pretrained(out)  # replacing an existing export
    assert not (tmp_path / ".staging").exists()
    assert {"config.json", "model.safetensors"} <= {p.name for p in out.iterdir()}
    reloaded = hf_model(out)
    ids, mask = padded_batch((9, 6), "right", seed=2)
    with torch.no_grad():
        diff = max_diff_at_real_positions(megatron(ids, attention_mask=mask).logits,
                                          reloaded(input_ids=ids, attention_mask=mask).logits, mask)
    assert diff < 1e-4
    if name in PACKAGED:
        assert AutoTokenizer.from_pretrained(out)("hello").input_ids == \
            AutoTokenizer.from_pretrained(checkpoints[name])("hello").input_ids


def test_every_split_weight_is_tagged_tensor_parallel(models):
    megatron, _ = models["gqa-qwen2"]
    split = {"embedding.word_embeddings.weight", "output_layer.weight"} | {
        f"decoder.layers.{i}.{name}" for i in range(2) for name in (
            "self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias", "self_attention.linear_proj.weight",
            "mlp.linear_fc1.weight", "mlp.linear_fc2.weight")}
    assert megatron.sharded_parameter_names() == split
    row_parallel = {n for n in split if "linear_proj" in n or "linear_fc2" in n}
    params = dict(megatron.gpt.named_parameters())
    assert {n: params[n].partition_dim for n in split} == {n: 1 if n in row_parallel else 0 for n in split}


def test_bad_inputs_are_refused_clearly(models):
    megatron, _ = models["gqa-qwen2"]
    ids = torch.ones(2, 5, dtype=torch.long)
    with pytest.raises(NotImplementedError, match="no KV cache"):
        megatron(ids, past_key_values=object())
    with pytest.raises(NotImplementedError, match="inputs_embeds"):
        megatron(ids, inputs_embeds=torch.zeros(2, 5, 64))
    with pytest.raises(ValueError, match=r"attention_mask must be HF's \(batch, seq\)"):
        megatron(ids, attention_mask=torch.ones(2, 1, 5, 5))


def test_parallel_setup_errors_name_the_fix(parallel, checkpoints, monkeypatch):
    from megatron.core import parallel_state

    with pytest.raises(RuntimeError, match="already initialised"):
        initialize_parallel(1, 1)
    monkeypatch.setattr(parallel_state, "get_pipeline_model_parallel_world_size", lambda: 2)
    with pytest.raises(NotImplementedError, match="pipeline_model_parallel_size=2"):
        MegatronCausalLM(checkpoints["gqa-qwen2"])
    monkeypatch.setattr(parallel_state, "model_parallel_is_initialized", lambda: False)
    with pytest.raises(ValueError, match="divide the world size 1"):
        initialize_parallel(2, 1)
    with pytest.raises(RuntimeError, match=r"initialize_parallel\(tp, pp\) before building"):
        MegatronCausalLM(checkpoints["gqa-qwen2"])


# --- TP=2: two processes on gloo ---

TP2_MODELS = ("gqa-qwen2", TINY_LLAMA)
TP2_BATCH = padded_batch((9, 6), "left", seed=4)


@pytest.fixture(scope="module")
def tp2_results(checkpoints, tmp_path_factory) -> dict[str, list[dict]]:
    """Both TP ranks' outputs for each of TP2_MODELS, from one `torch.distributed.run --nproc_per_node 2`."""
    root = tmp_path_factory.mktemp("tp2")
    ids, mask = TP2_BATCH
    torch.save({"input_ids": ids, "attention_mask": mask, "labels": labels_for(ids, mask)}, root / "inputs.pt")
    env = {**os.environ, "PYTHONPATH": str(REPO), "SWIFTLIKE_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             str(WORKER), str(root / "inputs.pt"), str(root / "out"),
                             *(str(checkpoints[name]) for name in TP2_MODELS)],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-6000:]
    return {name: [torch.load(root / f"out.{i}.rank{r}.pt") for r in range(2)] for i, name in enumerate(TP2_MODELS)}


@pytest.mark.parametrize("name", TP2_MODELS)
def test_tp2_on_gloo_matches_tp1(parallel, checkpoints, tp2_results, name):
    ids, mask = TP2_BATCH
    megatron = MegatronCausalLM(checkpoints[name])
    ref = megatron(ids, attention_mask=mask, labels=labels_for(ids, mask))
    ref.loss.backward()
    ref_grads = mcore_to_hf([{n: p.grad for n, p in megatron.gpt.named_parameters()}], megatron.config)
    source = read_hf_weights(checkpoints[name])
    for got in tp2_results[name]:
        logit_diff = max_diff_at_real_positions(got["logits"], ref.logits.detach(), mask)
        loss_diff = abs(got["loss"] - ref.loss.item())
        grad_diff = max((got["grads"][n] - ref_grads[n]).abs().max().item() for n in ref_grads)
        print(f"{name} TP=2 vs TP=1: logits {logit_diff:.2e} loss {loss_diff:.2e} grads {grad_diff:.2e}")
        assert logit_diff < 1e-4 and loss_diff < 1e-5 and grad_diff < 1e-4
        assert sorted(got["weights"]) == sorted(source)
        assert all(torch.equal(got["weights"][k], source[k]) for k in source)
