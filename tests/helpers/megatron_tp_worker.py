"""One rank of tests/e2e/test_megatron.py's TP=2 run: forward, loss and backward on TP=2 MegatronCausalLMs over gloo.

Launched by torch.distributed.run with: <inputs.pt> <output prefix> <checkpoint dir>... (one process group for all
the checkpoints, to pay the start-up once). For checkpoint i each rank writes <prefix>.<i>.rank<r>.pt: its
(gathered) logits, the loss, and the gradients and weights under HF names (TP shards gathered).
"""
import sys

import torch
import torch.distributed as dist

from swiftlike.train.megatron import MegatronCausalLM, destroy_parallel, initialize_parallel, mcore_to_hf
from swiftlike.train.megatron.parallel import gather_tensor_parallel


def main(inputs_path: str, prefix: str, *model_dirs: str) -> None:
    initialize_parallel(2, 1)
    inputs = torch.load(inputs_path)
    for index, model_dir in enumerate(model_dirs):
        model = MegatronCausalLM(model_dir)
        out = model(inputs["input_ids"], attention_mask=inputs["attention_mask"], labels=inputs["labels"])
        out.loss.backward()
        grads = {n: p.grad for n, p in model.gpt.named_parameters()}
        hf_grads = mcore_to_hf(gather_tensor_parallel(grads, model.sharded_parameter_names()), model.config)
        torch.save({"logits": out.logits.detach(), "loss": out.loss.item(), "grads": hf_grads,
                    "weights": model.hf_state_dict()}, f"{prefix}.{index}.rank{dist.get_rank()}.pt")
    destroy_parallel()


if __name__ == "__main__":
    main(*sys.argv[1:])
