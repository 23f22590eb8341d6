"""Every place swiftlike touches a third-party library below its documented surface: private or undocumented
members we override, patch, call or set. An upgrade of one of these libraries can rename any of them without
notice; `tests/repo/test_contact_points.py` imports each entry and checks it (and the parameters we rely on) still
exists, so an upgrade fails there, by name, and not in a user's run.

`path` is `module:Qualified.name`. `kind` says what we do with it:
  override   a subclass of ours redefines it (the library calls it on itself)
  patch      we replace it on the library's class, process-wide
  call       we call it, or hand the library its name to call (vLLM's collective_rpc targets)
  attribute  we read or set an instance attribute the class creates (`self.<name>` in its source)
`params`: the parameters we pass or receive by name; the test checks each is in the signature.
Add an entry with each new such use; remove one with its last use.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ContactPoint:
    library: str
    path: str
    kind: Literal["override", "patch", "call", "attribute"]
    why: str
    where: str  # our file, relative to swiftlike/
    params: tuple[str, ...] = ()


CONTACT_POINTS: tuple[ContactPoint, ...] = (
    # transformers: the Trainer around which sft, pt, GRPO and GKD run
    ContactPoint("transformers", "transformers.trainer:Trainer._save_checkpoint", "override",
                 "checkpoints are written into a staging directory and renamed into place only when complete",
                 "train/trainer.py", ("model", "trial")),
    ContactPoint("transformers", "transformers.trainer:Trainer._get_output_dir", "override",
                 "points the Trainer's checkpoint writer at the staging directory while it saves",
                 "train/trainer.py", ("trial",)),
    ContactPoint("transformers", "transformers.trainer:Trainer._save", "override",
                 "a Megatron-backend model is saved as an HF checkpoint (LoRA merged), not as a GPTModel state dict",
                 "train/trainer.py", ("output_dir", "state_dict")),
    ContactPoint("transformers", "transformers.trainer:Trainer._prepare_inputs", "override",
                 "GRPO and GKD batches are built (generated, scored) by the trainer itself; the Trainer must not "
                 "move or re-prepare them", "rl/online/grpo_trainer.py, rl/online/gkd_trainer.py", ("inputs",)),
    ContactPoint("transformers", "transformers.trainer:Trainer.get_batch_samples", "override",
                 "GRPO generates and scores one optimizer step's micro-batches before its first backward pass",
                 "rl/online/grpo_trainer.py", ("epoch_iterator", "num_batches", "device")),
    ContactPoint("transformers", "transformers.trainer:Trainer._tr_loss", "attribute",
                 "the non-finite guard zeroes the accumulated loss of a skipped step before it is logged",
                 "rl/online/online_trainer.py"),
    ContactPoint("transformers", "transformers.trainer:Trainer.log", "override",
                 "GRPO and GKD add their metrics to each log record", "rl/online/online_trainer.py, "
                 "rl/online/gkd_trainer.py", ("logs", "start_time")),
    ContactPoint("transformers", "transformers.trainer:Trainer.training_step", "override",
                 "the non-finite guard and GKD's per-step teacher work wrap the Trainer's step",
                 "rl/online/grpo_trainer.py, rl/online/gkd_trainer.py", ("model", "inputs", "num_items_in_batch")),
    ContactPoint("transformers", "transformers.trainer:Trainer.compute_loss", "override",
                 "the GRPO and GKD losses; sft/pt's training loss through the compact LM head",
                 "rl/online/grpo_trainer.py, rl/online/gkd_trainer.py, train/trainer.py",
                 ("model", "inputs", "return_outputs", "num_items_in_batch")),
    ContactPoint("transformers", "transformers.trainer_utils:rotate_checkpoints", "call",
                 "--save_total_limit applied to checkpoints published outside the Trainer's own save path",
                 "train/trainer.py", ("output_dir", "save_total_limit", "best_model_checkpoint", "use_mtime")),
    ContactPoint("transformers", "transformers.integrations:TensorBoardCallback.logging_dir", "attribute",
                 "--logging_dir is given to the writer directly; transformers reads it only from "
                 "TENSORBOARD_LOGGING_DIR, which would outlive the run in the process", "train/run.py"),
    # TRL: the preference trainers, handed rows we encoded with our template
    ContactPoint("trl", "trl.trainer.utils:add_fused_lm_head", "call",
                 "sft and pt compute their loss from the hidden states at labelled positions only",
                 "train/fused_head.py", ("model",)),
    ContactPoint("trl", "trl.trainer.utils:_use_triton", "patch",
                 "TRL's fused LM head asks it whether to project only the labelled positions; on CPU it says no, "
                 "and sft rows and preference pairs are mostly prompt, so it is made to say yes there too",
                 "train/fused_head.py", ("device",)),
    ContactPoint("trl", "trl:DPOTrainer._prepare_dataset", "override",
                 "rows arrive tokenized and length-limited; TRL must not tokenize them again",
                 "rl/preference/trainers.py", ("dataset", "processing_class", "args", "dataset_name")),
    ContactPoint("trl", "trl:KTOTrainer._prepare_dataset", "override",
                 "as DPO's; also where the real per-device batch size is put back after TRL's batch-of-1 check",
                 "rl/preference/trainers.py", ("dataset", "processing_class", "args", "dataset_name")),
    ContactPoint("trl", "trl.experimental.cpo:CPOTrainer.tokenize_row", "override",
                 "rows arrive as the row tokenize_row builds (preference/data.py cpo_row)",
                 "rl/preference/trainers.py", ("feature", "model")),
    ContactPoint("trl", "trl.experimental.orpo:ORPOTrainer.tokenize_row", "override", "as CPO's",
                 "rl/preference/trainers.py", ("feature", "model")),
    # PEFT: merged LoRA weights computed for the rollout engine without touching the base
    ContactPoint("peft", "peft.tuners.lora.layer:Linear.get_delta_weight", "call",
                 "the adapter's delta, added to the base out of place as PEFT's merge adds it",
                 "train/engine_weights.py", ("adapter",)),
    ContactPoint("peft", "peft.tuners.lora.layer:LoraLayer.lora_variant", "attribute",
                 "adapters with a variant (DoRA, ...) are merged by PEFT itself", "train/engine_weights.py"),
    ContactPoint("peft", "peft.tuners.lora.layer:LoraLayer.lora_bias", "attribute",
                 "adapters with a bias are merged by PEFT itself", "train/engine_weights.py"),
    ContactPoint("peft", "peft.utils.other:ModulesToSaveWrapper", "call",
                 "--modules_to_save copies: the trained copy's names mapped back to the HF names",
                 "train/engine_weights.py"),
    ContactPoint("peft", "peft.utils.other:AuxiliaryTrainingWrapper", "call",
                 "other auxiliary wrappers are refused with a clear error", "train/engine_weights.py"),
    # megatron-core: patched process-wide on machines without CUDA
    ContactPoint("megatron-core", "megatron.core.utils:GlobalMemoryBuffer.get_tensor", "patch",
                 "the scratch buffer is allocated on the CPU when there is no CUDA", "train/megatron/shims.py",
                 ("tensor_shape", "dtype", "name", "mem_alloc_context")),
    ContactPoint("megatron-core", "megatron.core.tensor_parallel.random:CudaRNGStatesTracker.fork", "patch",
                 "a no-op without CUDA (no CUDA generator to fork)", "train/megatron/shims.py", ("name",)),
    # vLLM: the in-process engine driven step by step and reloaded from the trainer's tensors
    ContactPoint("vllm", "vllm.v1.worker.gpu_model_runner:GPUModelRunner.reload_weights", "call",
                 "collective_rpc('reload_weights', weights_iterator=...) loads new weights in place",
                 "infer/engine/vllm_engine.py", ("weights_iterator",)),
    ContactPoint("vllm", "vllm.v1.worker.gpu_worker:Worker.model_runner", "attribute",
                 "a collective_rpc function (`_refresh_tied_lm_head`) reaches the model through the worker",
                 "infer/engine/vllm_engine.py"),
    ContactPoint("vllm", "vllm.model_executor.model_loader.reload.layerwise:LAYERWISE_INFO", "attribute",
                 "a closing engine drops its layers' reload records, which would keep its weights alive",
                 "infer/engine/vllm_engine.py"),
    ContactPoint("vllm", "vllm.v1.engine.core:cleanup_dist_env_and_memory", "patch",
                 "an engine that closes while another of the process is open shuts its core down without this "
                 "teardown of the process-wide distributed state (the open one's)", "infer/engine/vllm_engine.py"),
    ContactPoint("vllm", "vllm.v1.engine.llm_engine:LLMEngine.engine_core", "attribute",
                 "a closing engine shuts its core down itself, inside the patch above", "infer/engine/vllm_engine.py"),
    ContactPoint("vllm", "vllm.model_executor.layers.vocab_parallel_embedding:"
                 "UnquantizedEmbeddingMethod.process_weights_after_loading", "call",
                 "a tied LM head's CPU kernel is repacked from the reloaded embeddings", "infer/engine/vllm_engine.py",
                 ("layer",)),
    # vLLM's CPU LoRA ops: the CPU punica wrapper's names for them are rebound (one matmul when the batch has one
    # adapter) and vLLM's own, checked here where they are defined, are called for a batch that mixes adapters
    ContactPoint("vllm", "vllm.lora.ops.torch_ops.lora_ops:bgmv_shrink", "call",
                 "rebound in vllm.lora.punica_wrapper.punica_cpu; called there for mixed adapters",
                 "infer/engine/vllm_cpu_lora.py", ("inputs", "output_tensor", "lora_indices_tensor", "scaling")),
    ContactPoint("vllm", "vllm.lora.ops.torch_ops.lora_ops:bgmv_expand", "call",
                 "as bgmv_shrink", "infer/engine/vllm_cpu_lora.py",
                 ("inputs", "output_tensor", "lora_indices_tensor", "add_inputs")),
    ContactPoint("vllm", "vllm.lora.ops.torch_ops.lora_ops:bgmv_expand_slice", "call",
                 "as bgmv_shrink", "infer/engine/vllm_cpu_lora.py",
                 ("lora_indices_tensor", "slice_offset", "slice_size", "add_inputs")),
    ContactPoint("vllm", "vllm.lora.ops.torch_ops.lora_ops:sgmv_shrink", "call",
                 "as bgmv_shrink, for prefill", "infer/engine/vllm_cpu_lora.py",
                 ("seq_len_tensor", "lora_indices_tensor", "scaling")),
    ContactPoint("vllm", "vllm.lora.ops.torch_ops.lora_ops:sgmv_expand", "call",
                 "as bgmv_shrink, for prefill", "infer/engine/vllm_cpu_lora.py",
                 ("seq_len_tensor", "lora_indices_tensor", "add_inputs")),
    ContactPoint("vllm", "vllm.lora.ops.torch_ops.lora_ops:sgmv_expand_slice", "call",
                 "as bgmv_shrink, for prefill", "infer/engine/vllm_cpu_lora.py",
                 ("seq_len_tensor", "lora_indices_tensor", "slice_offset", "slice_size", "add_inputs")),
    ContactPoint("vllm", "vllm:LLM.llm_engine", "attribute",
                 "streaming and continuous batching drive the engine step by step", "infer/engine/vllm_engine.py"),
    ContactPoint("vllm", "vllm.v1.engine.llm_engine:LLMEngine.add_request", "call",
                 "a streamed or batched request enters the running engine", "infer/engine/vllm_engine.py",
                 ("lora_request",)),
    ContactPoint("vllm", "vllm.v1.engine.llm_engine:LLMEngine.step", "call", "one engine step",
                 "infer/engine/vllm_engine.py"),
    ContactPoint("vllm", "vllm.v1.engine.llm_engine:LLMEngine.abort_request", "call",
                 "a client that went away frees its slot", "infer/engine/vllm_engine.py"),
    ContactPoint("vllm", "vllm.v1.engine.llm_engine:LLMEngine.has_unfinished_requests", "call",
                 "the batching loop sleeps when idle", "infer/engine/vllm_engine.py"),
    ContactPoint("vllm", "vllm.v1.engine.llm_engine:LLMEngine.model_config", "attribute",
                 "the engine's dtype and max_model_len, reported by /info", "infer/engine/vllm_engine.py"),
    # Ray
    ContactPoint("ray", "ray._raylet:Config.initialize", "call",
                 "RAY_AUTH_MODE=token set after Ray was imported is read again, so the driver presents its token",
                 "ray/cluster.py"),
)
