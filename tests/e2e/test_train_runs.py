"""Weight syncs into a real engine, moved from tests/unit/train/test_engine_weights.py (issue 51: the unit tier starts no
vLLM engine): in bf16 a LoRA policy's base stays bit-identical however many times it is merged and synced.

The synced run is the real one: a RolloutWorker with a colocated vLLM engine in bf16 and --weight_sync delta,
whose copy of what the engine was loaded from (`_synced`) is the engine's weights bit for bit (tests/e2e/
test_delta_sync.py shows that copy and the engine agree). Between syncs the adapter moves as training moves it.
"""
import torch
from lora_weights import assert_bits_equal, base_snapshot, changed_elements, lora_model, peft_merged, train_step
from model_ids import TINY

SYNCS = 10


def test_merged_weight_syncs_leave_a_bf16_lora_base_bit_identical(tiny_resolved, tiny_template):
    from swiftlike.arguments import RlhfArguments
    from swiftlike.rl.online.rollout_worker import RolloutWorker
    args = RlhfArguments(rlhf_type="grpo", model=TINY, dataset=["unused"], reward_funcs=["format"], num_generations=2,
                         per_device_train_batch_size=2, tuner_type="lora", torch_dtype="bfloat16", use_vllm=True,
                         vllm_mode="colocate", weight_sync="delta", vllm_max_model_len=256)
    model = lora_model(tiny_resolved)
    base = base_snapshot(model)
    worker = RolloutWorker(args.rollout_options(), args.sampling_options(), args.vllm_options(), tiny_resolved, tiny_template, model)
    try:
        assert worker.engine.dtype == "bfloat16"
        for step in range(SYNCS):
            train_step(model)
            worker.sync(model, step)
            assert changed_elements(model, base) == 0, f"sync {step + 1}"
            assert_bits_equal(worker._synced.tensors, peft_merged(model, torch.bfloat16))
    finally:
        worker.close()
