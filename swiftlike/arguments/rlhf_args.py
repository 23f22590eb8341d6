"""Arguments of `swiftlike rlhf`: GRPO and the preference family (DPO, KTO, CPO, SimPO, ORPO, reward models).

Names and defaults follow ms-swift's RLHF and GRPO arguments; `beta` and `loss_type` take their default from
`--rlhf_type`, as in ms-swift.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..utils import get_logger
from ..utils.errors import NotBuiltError
from .base import arg
from ..rl.core.staleness import min_async_staleness
from .infer_args import SamplingArguments, VllmArguments
from .train_args import TrainArguments

logger = get_logger("swiftlike.arguments")


@dataclass
class GrpoArguments:
    """GRPO: sampling, rewards, advantages and the clipped policy loss."""

    num_generations: int = arg(8, "Completions sampled per prompt (the group size G).")
    max_completion_length: int = arg(512, "Most tokens generated per completion.")
    epsilon: float = arg(0.2, "Lower clip range of the importance ratio (and upper when --epsilon_high is unset).")
    epsilon_high: float | None = arg(None, "Upper clip range (DAPO clip-higher, e.g. 0.28); default --epsilon.")
    importance_sampling_level: Literal["token", "sequence", "sequence_token"] = arg(
        "token", "token: PPO/GRPO ratio per token; sequence: GSPO's length-normalised sequence ratio.")
    scale_rewards: Literal["group", "batch", "none"] = arg(
        "group", "Advantage denominator: group std, batch std, or none (Dr. GRPO).")
    num_iterations: int = arg(1, "Policy updates per generated batch (mu in the GRPO paper).")
    steps_per_generation: int | None = arg(None, "Micro-batches generated at once; default "
                                           "--gradient_accumulation_steps.")
    reward_funcs: list[str] = arg([], "Reward functions by name: accuracy, format, format_hash, cosine, repetition, "
                                  "soft_overlong, or names registered in --external_plugins.")
    reward_weights: list[float] | None = arg(None, "One weight per reward: the --reward_funcs entries, then the "
                                             "--reward_model entries (ms-swift's order); default 1.0 each.")
    reward_model: list[str] = arg([], "Sequence-classification reward models (local dir or model id, resolved like "
                                  "--model); each scores prompt + completion and adds one reward column.")
    dynamic_sample: bool = arg(False, "DAPO dynamic sampling: replace groups whose rewards are all equal (no "
                               "advantage signal) with groups of freshly drawn prompts.")
    max_resample_times: int = arg(3, "Most extra generation rounds per batch under --dynamic_sample; groups "
                                  "still missing are filled with the zero-std ones so the batch size is fixed.")
    overlong_filter: bool = arg(False, "DAPO overlong filtering: completions cut at --max_completion_length "
                                "(finish_reason length) are left out of the loss.")
    disable_dropout: bool = arg(True, "Zero every dropout rate (including --lora_dropout) in the policy and the "
                                "reference, so old, new and reference log-probs of a token agree before an update "
                                "(TRL's disable_dropout); false keeps dropout in the policy's training passes.")
    share_prompt_prefix: bool = arg(True, "Score a group's shared prompt once per micro-batch and run its "
                                    "completions on that prompt's KV cache (gradients flow through it), instead "
                                    "of once per completion: the same loss up to float rounding, about half the "
                                    "tokens. Off under --gradient_checkpointing, which drops the cache in training.")
    on_nonfinite: Literal["error", "skip"] = arg(
        "error", "A NaN/inf loss, gradient norm or metric: error stops the run at that step, naming the value; skip "
        "drops that step's update (counted in nonfinite/skipped_steps) and keeps training.")
    external_plugins: list[str] = arg([], "Python files imported first, e.g. to register reward functions.")
    log_completions: bool = arg(False, "Write prompts, completions and rewards to completions.jsonl in the run dir.")
    # reward function parameters
    cosine_min_len_value_wrong: float = arg(-0.5, "cosine reward: value for a wrong answer of length 0.")
    cosine_max_len_value_wrong: float = arg(0.0, "cosine reward: value for a wrong answer at --cosine_max_len.")
    cosine_min_len_value_correct: float = arg(1.0, "cosine reward: value for a right answer of length 0.")
    cosine_max_len_value_correct: float = arg(0.5, "cosine reward: value for a right answer at --cosine_max_len.")
    cosine_max_len: int | None = arg(None, "cosine reward: length scale; default --max_completion_length.")
    repetition_n_grams: int = arg(3, "repetition reward: n-gram size.")
    repetition_max_penalty: float = arg(-1.0, "repetition reward: penalty of a fully repetitive answer (<= 0).")
    soft_max_length: int | None = arg(None, "soft_overlong reward: L_max; default --max_completion_length.")
    soft_cache_length: int | None = arg(None, "soft_overlong reward: L_cache, the punished interval's length.")


@dataclass
class RolloutArguments:
    """Where completions come from: the training model (pt), a colocated vLLM engine or rollout servers, how
    weights reach them, and mismatch handling. The vLLM engine's own settings are the shared `--vllm_*` group."""

    use_vllm: bool = arg(False, "Generate with vLLM; false = the training model's own generate().")
    vllm_mode: Literal["colocate", "server"] = arg("colocate", "colocate: vLLM in the trainer's process; "
                                                   "server: one or more `swiftlike rollout` servers.")
    vllm_server_host: list[str] = arg(["127.0.0.1"], "Rollout server host(s) for --vllm_mode server; one host "
                                      "for all ports, or one per --vllm_server_port.")
    vllm_server_port: list[int] = arg([8000], "Rollout server port(s); several servers share each generation "
                                      "batch between them.")
    vllm_server_timeout: float = arg(240.0, "Seconds the trainer keeps trying to reach a rollout server (at start "
                                     "and after a transient error) before it stops with an error.")
    vllm_server_api_key: str | None = arg(None, "The servers' --api_key, sent as a Bearer token.")
    weight_transport: Literal["auto", "http", "path", "nccl", "gloo"] = arg(
        "auto", "How full weights reach rollout servers: http (safetensors over HTTP, any host), path (files "
        "under --weight_sync_path, one host or a shared filesystem), nccl (GPU broadcast), gloo (the same on "
        "CPU). auto = nccl with CUDA, else http.")
    weight_sync_path: str | None = arg(None, "Directory for --weight_transport path; default /dev/shm.")
    weight_bucket_mb: int = arg(512, "Weights are sent to rollout servers in buckets of at most this many MiB.")
    weight_sync: Literal["full", "delta"] = arg(
        "full", "Merged-weight sync to vLLM: full sends every weight each time; delta (SLIME's "
        "--update-weight-mode delta) sends full weights once, then only the elements whose value in the engine's "
        "dtype changed (positions or a bitmask, with the values), and the engine reloads from a patched copy, so "
        "it holds what a full sync would give, bit for bit. Costs one copy of the model in the engine's dtype on "
        "the trainer and on each rollout server. It saves bytes on the wire (server mode); colocated, the engine "
        "still reloads every weight. Not with --vllm_enable_lora, which already sends only the adapter.")
    async_generate: bool = arg(False, "Server mode: the rollout servers generate the next generation batches "
                               "while the trainer learns (up to --max_staleness optimizer steps ahead), and a "
                               "weight sync does not wait for them: a request in flight continues under the new "
                               "weights (partial rollout). Samples are off-policy; only "
                               "--rollout_importance_sampling_mode corrects the loss for it (without it the "
                               "trainer warns once and treats them as on-policy).")
    max_staleness: int | None = arg(None, "TRL's name: no sample is trained on at any step, its batch's last use "
                                    "included, more than this many optimizer steps after the step whose weights "
                                    "sampled its oldest token. Prefetching goes as far ahead as that allows; a "
                                    "group older anyway is dropped and generated again (staleness/dropped). 0 = "
                                    "synchronous training (a batch reused over several steps is then PPO's old "
                                    "policy). With --async_generate true it must let one batch be prefetched: 1 "
                                    "when a generation batch serves one optimizer step, 2B - 1 when it serves B "
                                    "(the default); else 0, and > 0 needs --async_generate true.")
    rollout_importance_sampling_mode: Literal["token_truncate", "token_mask", "sequence_truncate",
                                              "sequence_mask"] | None = arg(
        None, "Reweight the loss by pi_train / pi_rollout, bounded by the threshold; default off.")
    rollout_importance_sampling_threshold: float = arg(2.0, "Upper bound of the rollout IS weights.")
    log_rollout_offpolicy_metrics: bool = arg(False, "Log training-inference mismatch metrics (rollout_correction/*) "
                                              "even without --rollout_importance_sampling_mode (with a mode set "
                                              "they are always logged).")
    off_policy_sequence_mask_delta: float | None = arg(
        None, "DeepSeek-V3.2 off-policy sequence mask: drop from the loss negative-advantage sequences whose mean "
        "(rollout logp - current logp) exceeds this many nats; default off.")
    sleep_level: Literal[0, 1, 2] = arg(0, "Put the colocated vLLM engine to sleep after each generation (vLLM "
                                        "sleep mode, CUDA only): 1 frees the KV cache and offloads weights, 2 also "
                                        "drops the weights (needs merged-weight sync, not --vllm_enable_lora); "
                                        "after a level-2 sleep the weights are pushed again on waking, so a step "
                                        "that generates more than once (dynamic sampling, "
                                        "--steps_per_generation < --gradient_accumulation_steps) pays one push "
                                        "per generation.")
    offload_model: bool = arg(False, "Move the training model to CPU while vLLM generates (CUDA and "
                              "--use_vllm only).")
    offload_optimizer: bool = arg(False, "Move the optimizer state to CPU while vLLM generates (CUDA and "
                                  "--use_vllm only).")


@dataclass
class GkdArguments:
    """GKD: on-policy distillation from a teacher, in-process or served (ms-swift's names and defaults)."""

    teacher_model: str | None = arg(None, "gkd: the teacher (local dir or model id, resolved like --model). Equal to "
                                    "--model with --tuner_type lora: the teacher is the model with its adapter "
                                    "disabled (no second copy).")
    teacher_adapters: list[str] = arg([], "gkd: LoRA adapters merged into the teacher (e.g. the SFT adapter that "
                                      "made it the teacher).")
    teacher_model_type: str | None = arg(None, "gkd: model type of --teacher_model; default detected.")
    teacher_model_revision: str | None = arg(None, "gkd: hub revision of --teacher_model.")
    teacher_model_server: list[str] = arg([], "gkd: URL(s) of a served teacher (`swiftlike deploy ... --max_logprobs "
                                          "K` or `swiftlike rollout`, or vLLM's server) that answers top-k prompt "
                                          "log-probs; needs --gkd_logits_topk. Several URLs serve one teacher: "
                                          "batches go to them in turn.")
    teacher_model_server_timeout: float = arg(300.0, "gkd: seconds to wait for the teacher server's answer to one "
                                              "batch before the run stops with an error.")
    teacher_model_server_api_key: str | None = arg(None, "gkd: the teacher server's API key (its --api_key), sent as "
                                                   "a Bearer token; a Ray job sets it for its teacher replicas.")
    gkd_logits_topk: int | None = arg(None, "gkd: compare the distributions over the teacher's K most likely "
                                      "tokens only (both renormalised over them); default the full vocabulary. "
                                      "Required with --teacher_model_server (at most the server's --max_logprobs).")
    offload_teacher_model: bool = arg(False, "gkd: keep the in-process teacher on CPU and move it to the "
                                      "accelerator only for its forward pass (CUDA only).")
    lmbda: float = arg(0.5, "gkd: share of micro-batches whose completions the student generates itself "
                       "(on-policy); the rest use the dataset's answers. 1 = fully on-policy.")
    seq_kd: bool = arg(False, "gkd: sequence-level KD, where the teacher generates the off-policy answers (not "
                       "built; the dataset's answers are used).")
    sft_alpha: float = arg(0.0, "gkd: weight of an NLL (SFT) loss on the completion tokens, added to the "
                           "divergence.")


@dataclass
class RayArguments:
    """Ray placement of the train, rollout and teacher roles from one YAML (docs/ray.md)."""

    use_ray: bool = arg(False, "Run the roles of the --config YAML as Ray actors in placement groups. The YAML is "
                        "ms-swift's: shared arguments at the top, then one group per role (train, rollout, teacher) "
                        "with its device count `gpus:` (CPU slots on a machine without a GPU) and its own "
                        "arguments, and optional `colocate_groups: [[train, rollout]]` (time-sharing the same "
                        "devices) instead of separate placement.")
    ray_address: str | None = arg(None, "Ray cluster to join: the head's host:port (what `ray start --head` "
                                  "prints). Default: Ray's own RAY_ADDRESS, else the cluster `ray start` runs on "
                                  "this machine, else a local cluster started for this run and stopped after it.")
    train_backend: Literal["transformers", "megatron"] = arg(
        "transformers", "Model backend of the train role: transformers, or megatron (megatron-core's GPTModel, "
        "Llama and Qwen2 families; `swiftlike megatron rlhf` sets it, as ms-swift's `megatron rlhf` does).")


PREFERENCE_TYPES = ("dpo", "kto", "cpo", "simpo", "orpo", "rm")
NOT_BUILT_TYPES = {"ppo": "PPO (a value model and GAE) is not built; for RL with rewards use --rlhf_type grpo"}
PREFERENCE_ONLY = ("ref_model", "ref_adapters", "loss_weights", "rpo_alpha", "ld_alpha", "center_rewards_coefficient")
GKD_ONLY = ("teacher_model", "teacher_adapters", "teacher_model_type", "teacher_model_server", "gkd_logits_topk",
            "offload_teacher_model", "seq_kd", "teacher_model_server_api_key")
GRPO_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
DPO_LOSS_TYPES = ("sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot",
                  "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm")
CPO_LOSS_TYPES = ("sigmoid", "hinge", "ipo", "simpo", "alphapo")
KTO_LOSS_TYPES = ("kto", "apo_zero_unpaired")
# ms-swift's defaults per --rlhf_type (swift/arguments/rlhf_args.py): beta, then loss_type.
DEFAULT_BETA = {"grpo": 0.04, "simpo": 2.0, "gkd": 0.5}
DEFAULT_TEMPERATURE = {"gkd": 0.9}
DEFAULT_LOSS_TYPE = {"grpo": "grpo", "dpo": "sigmoid", "cpo": "sigmoid", "simpo": "simpo", "kto": "kto"}


@dataclass
class PreferenceArguments:
    """The preference family: reference model and the loss terms of DPO, CPO/SimPO, KTO and reward models."""

    ref_model: str | None = arg(None, "Reference model for dpo/kto with --tuner_type full; default --model. With "
                                "LoRA the reference is the model with its adapter disabled (no second copy).")
    ref_model_type: str | None = arg(None, "Model type of --ref_model; default --model_type.")
    ref_model_revision: str | None = arg(None, "Hub revision of --ref_model.")
    ref_adapters: list[str] = arg([], "LoRA adapters applied to the reference, e.g. the SFT adapter that "
                                  "--adapters continues, so the reference is the SFT model and not the base.")
    precompute_ref_log_probs: bool = arg(False, "dpo: compute the reference log-probs of the whole dataset once "
                                         "before training (TRL), then free the reference model.")
    label_smoothing: float = arg(0.0, "dpo/cpo: probability that a preference label is flipped (robust DPO, EXO).")
    rpo_alpha: float | None = arg(None, "dpo: weight of an NLL (SFT) loss on the chosen answer, "
                                  "loss = dpo_loss + rpo_alpha * nll (RPO paper; 1.0 recommended); default off.")
    ld_alpha: float | None = arg(None, "dpo: LD-DPO weight in [0, 1] of the chosen/rejected tokens past their "
                                 "shared length (length desensitisation); default off.")
    discopop_tau: float = arg(0.05, "dpo --loss_type discopop: temperature of the log-ratio modulation.")
    loss_weights: list[float] | None = arg(None, "dpo: one weight per --loss_type entry when several are mixed "
                                           "(MPO); default 1.0 each.")
    cpo_alpha: float = arg(1.0, "cpo/simpo: weight of the NLL loss on the chosen answer; with simpo, 0 is pure "
                           "SimPO and the default 1.0 is CPO-SimPO (as in ms-swift).")
    simpo_gamma: float = arg(1.0, "simpo: target reward margin (the paper suggests 0.5-1.5).")
    desirable_weight: float = arg(1.0, "kto: weight of the desirable (label true) examples' loss.")
    undesirable_weight: float = arg(1.0, "kto: weight of the undesirable (label false) examples' loss.")
    center_rewards_coefficient: float | None = arg(None, "rm: weight of a penalty on the squared mean reward, "
                                                   "which keeps rewards centred on 0 (0.01 recommended).")


@dataclass
class RlhfArguments(TrainArguments, PreferenceArguments, GkdArguments, GrpoArguments, SamplingArguments,
                    RolloutArguments, VllmArguments, RayArguments):
    """swiftlike rlhf: preference training (dpo, kto, cpo, simpo, orpo, rm), RL with rewards (grpo) and
    on-policy distillation (gkd)."""

    command = "rlhf"
    rlhf_type: Literal["dpo", "orpo", "simpo", "kto", "cpo", "rm", "ppo", "grpo", "gkd"] = arg(
        "dpo", "Algorithm: dpo, kto, cpo, simpo, orpo (preference pairs or labelled answers), rm (a reward model "
        "from preference pairs), grpo (sampled groups scored by rewards), gkd (distillation from a teacher on the "
        "student's own samples). ppo is not built.")
    beta: float | None = arg(None, "dpo/kto/cpo/orpo: strength of the preference (or the pull to the "
                             "reference); grpo: KL coefficient to the reference (0 = no reference); gkd: the "
                             "generalized JSD's interpolation (0 forward KL, 1 reverse KL). Default by "
                             "--rlhf_type: 0.04 grpo, 2.0 simpo, 0.5 gkd, 0.1 the others.")
    loss_type: list[str] | None = arg(None, "dpo: one or more of TRL's DPO losses (sigmoid, ipo, hinge, robust, "
                                      "bco_pair, sppo_hard, nca_pair, apo_zero, ...; several mix with "
                                      "--loss_weights); cpo: sigmoid, hinge, ipo, simpo, alphapo; kto: kto, "
                                      "apo_zero_unpaired; grpo: grpo, bnpo, dr_grpo, dapo. Default by "
                                      "--rlhf_type: sigmoid (dpo, cpo), simpo, kto, grpo.")

    def __post_init__(self) -> None:
        if self.rlhf_type in NOT_BUILT_TYPES:  # before any other check: the answer does not depend on them
            raise NotBuiltError(f"--rlhf_type {self.rlhf_type}: {NOT_BUILT_TYPES[self.rlhf_type]}")
        if self.beta is None:
            self.beta = DEFAULT_BETA.get(self.rlhf_type, 0.1)
        if self.temperature is None:
            self.temperature = DEFAULT_TEMPERATURE.get(self.rlhf_type, 1.0)
        if isinstance(self.loss_type, str):  # the Python API may pass one name
            self.loss_type = [self.loss_type]
        if isinstance(self.teacher_model_server, str):  # ms-swift's form: one URL
            self.teacher_model_server = [self.teacher_model_server]
        if self.loss_type is None:
            self.loss_type = [DEFAULT_LOSS_TYPE[self.rlhf_type]] if self.rlhf_type in DEFAULT_LOSS_TYPE else []
        super().__post_init__()
        if self.rlhf_type == "grpo":
            self._check_grpo()
        elif self.rlhf_type == "gkd":
            self._check_gkd()
        else:
            self._check_preference()
        if self.steps_per_generation is None:
            self.steps_per_generation = self.gradient_accumulation_steps
        if self.train_backend == "megatron":
            self._check_megatron_backend()

    @property
    def grpo_loss_type(self) -> str:
        """GRPO takes exactly one --loss_type (checked in _check_grpo)."""
        return self.loss_type[0]

    @property
    def is_preference(self) -> bool:
        return self.rlhf_type in PREFERENCE_TYPES

    def _check_data_flags(self) -> None:
        """Before sft's own checks of these flags, whose advice (--max_steps for --streaming, ...) misleads here."""
        what = {"grpo": "GRPO, whose batches are rollouts generated at every step, not encoded dataset samples",
                "gkd": "GKD, whose batches are built at every step from the student's samples or the dataset's "
                       "answers"}.get(self.rlhf_type, f"{self.rlhf_type}, whose pairs are encoded up front and "
                                                     "padded per batch by TRL's collator")
        batch_flags = [f"--{name}" for name in ("streaming", "lazy_tokenize", "padding_free", "packing")
                       if getattr(self, name)]
        if batch_flags:
            raise ValueError(f"{', '.join(batch_flags)}: not built for {what}")
        if self.loss_scale == "all":
            answers = {"grpo": "sampled completions", "gkd": "completions"}.get(self.rlhf_type,
                                                                                "chosen/rejected answers")
            raise ValueError(f"--loss_scale all: {self.rlhf_type}'s loss is on the {answers} only (what default "
                             "and last_round both mean here)")
        super()._check_data_flags()

    def _check_preference(self) -> None:
        allowed = {"dpo": DPO_LOSS_TYPES, "cpo": CPO_LOSS_TYPES, "simpo": CPO_LOSS_TYPES, "kto": KTO_LOSS_TYPES}
        types = allowed.get(self.rlhf_type, ())
        if self.loss_type and not types:
            raise ValueError(f"--loss_type: {self.rlhf_type} has one loss of its own; leave --loss_type unset")
        bad = [t for t in self.loss_type if t not in types]
        if bad:
            raise ValueError(f"--loss_type {' '.join(bad)}: not a {self.rlhf_type} loss; choose from "
                             f"{', '.join(types)}")
        if len(self.loss_type) > 1 and self.rlhf_type != "dpo":
            raise ValueError(f"several --loss_type values mix losses for dpo only, got {len(self.loss_type)} "
                             f"for {self.rlhf_type}")
        if self.loss_weights is not None:
            if self.rlhf_type != "dpo":
                raise ValueError("--loss_weights weighs mixed dpo losses; it is for --rlhf_type dpo")
            if len(self.loss_weights) != len(self.loss_type):
                raise ValueError(f"{len(self.loss_weights)} --loss_weights for {len(self.loss_type)} --loss_type "
                                 "values; give one weight per loss")
        if self.beta <= 0:
            raise ValueError(f"--beta must be > 0 for {self.rlhf_type}, got {self.beta}")
        if not 0 <= self.label_smoothing < 0.5:
            raise ValueError(f"--label_smoothing must be in [0, 0.5), got {self.label_smoothing}")
        if self.ld_alpha is not None and not 0 <= self.ld_alpha <= 1:
            raise ValueError(f"--ld_alpha must be in [0, 1], got {self.ld_alpha}")
        if self.rpo_alpha is not None and self.rpo_alpha < 0:
            raise ValueError(f"--rpo_alpha must be >= 0, got {self.rpo_alpha}")
        for name in ("desirable_weight", "undesirable_weight"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be > 0, got {getattr(self, name)}")
        uses_ref = self.rlhf_type in ("dpo", "kto")
        if not uses_ref and (self.ref_model or self.ref_adapters or self.precompute_ref_log_probs):
            raise ValueError(f"--ref_model / --ref_adapters / --precompute_ref_log_probs: {self.rlhf_type} has no "
                             "reference model (only dpo and kto have one)")
        if self.ref_model and self.tuner_type == "lora":
            raise ValueError("--ref_model with --tuner_type lora: the reference is the model with its adapter "
                             "disabled; use --ref_adapters to give the reference an adapter of its own")
        if self.precompute_ref_log_probs and self.rlhf_type != "dpo":
            raise ValueError("--precompute_ref_log_probs is built for dpo (TRL's DPOTrainer)")
        self._refuse(GKD_ONLY, "GKD's teacher arguments")
        grpo_only = [f"--{name}" for name in ("reward_funcs", "reward_model", "external_plugins") if getattr(self, name)]
        if grpo_only or self.use_vllm:
            raise ValueError(f"{', '.join(grpo_only + ['--use_vllm'] * self.use_vllm)}: GRPO's rollout and reward "
                             f"arguments; {self.rlhf_type} learns from the answers in the dataset")

    def _check_grpo(self) -> None:
        if len(self.loss_type) != 1 or self.loss_type[0] not in GRPO_LOSS_TYPES:
            raise ValueError(f"--loss_type {' '.join(self.loss_type)}: grpo takes one of {', '.join(GRPO_LOSS_TYPES)}")
        self._refuse(PREFERENCE_ONLY, "preference-training arguments")
        self._refuse(GKD_ONLY, "GKD's teacher arguments")
        if not self.reward_funcs and not self.reward_model:
            raise ValueError("--reward_funcs is required for grpo, e.g. --reward_funcs accuracy format "
                             "(or a --reward_model)")
        n_rewards = len(self.reward_funcs) + len(self.reward_model)
        if self.reward_weights is not None and len(self.reward_weights) != n_rewards:
            raise ValueError(f"got {len(self.reward_weights)} --reward_weights for {len(self.reward_funcs)} "
                             f"--reward_funcs + {len(self.reward_model)} --reward_model; give one weight per "
                             "reward, functions first")
        for name in ("num_generations", "num_iterations"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if self.num_generations < 2:
            raise ValueError("--num_generations must be >= 2: advantages compare completions of the same prompt")
        if self.steps_per_generation is not None and self.steps_per_generation < 1:
            raise ValueError(f"--steps_per_generation must be >= 1, got {self.steps_per_generation}")
        spg = self.steps_per_generation or self.gradient_accumulation_steps
        batch = self.per_device_train_batch_size * spg
        if batch % self.num_generations:
            raise ValueError(
                f"--per_device_train_batch_size ({self.per_device_train_batch_size}) * steps per generation ({spg}, "
                f"--steps_per_generation or --gradient_accumulation_steps) = {batch} completions must be divisible "
                f"by --num_generations ({self.num_generations}) so every prompt's group is generated together")
        if self.beta < 0:
            raise ValueError(f"--beta must be >= 0, got {self.beta}")
        if self.rollout_importance_sampling_threshold <= 0:
            raise ValueError("--rollout_importance_sampling_threshold must be > 0")
        if self.off_policy_sequence_mask_delta is not None and self.off_policy_sequence_mask_delta < 0:
            raise ValueError(f"--off_policy_sequence_mask_delta must be >= 0, got {self.off_policy_sequence_mask_delta}")
        if self.max_resample_times < 0:
            raise ValueError(f"--max_resample_times must be >= 0, got {self.max_resample_times}")
        self._check_sampling_and_rollout()

    def _check_gkd(self) -> None:
        """Every teacher and divergence setting is checked here, before any model is loaded."""
        if self.loss_type:
            raise ValueError("--loss_type: gkd's loss is the generalized JSD (set its shape with --beta); leave "
                             "--loss_type unset")
        self._refuse(PREFERENCE_ONLY, "preference-training arguments")
        grpo_only = ("reward_funcs", "reward_model", "reward_weights", "dynamic_sample", "overlong_filter",
                     "async_generate", "max_staleness", "rollout_importance_sampling_mode",
                     "off_policy_sequence_mask_delta")
        self._refuse(grpo_only, "GRPO's reward and correction arguments")
        if not self.teacher_model and not self.teacher_model_server:
            raise ValueError("--rlhf_type gkd needs a teacher: --teacher_model <model id or dir> (in-process) or "
                             "--teacher_model_server http://host:port --gkd_logits_topk K (served)")
        if self.teacher_model and self.teacher_model_server:
            raise ValueError("--teacher_model and --teacher_model_server both given; choose one teacher")
        if self.teacher_model_server:
            if self.gkd_logits_topk is None:
                raise ValueError("--teacher_model_server sends the teacher's top-k log-probs only, so it needs "
                                 "--gkd_logits_topk K (e.g. 20, at most the server's --max_logprobs)")
            if self.teacher_adapters or self.teacher_model_type or self.offload_teacher_model:
                raise ValueError("--teacher_adapters / --teacher_model_type / --offload_teacher_model describe an "
                                 "in-process teacher; a served teacher is configured where it is served")
            bad = [url for url in self.teacher_model_server if not url.startswith(("http://", "https://"))]
            if bad:
                raise ValueError(f"--teacher_model_server must be http(s) URLs, got {bad}")
        if self.teacher_model_server_api_key and not self.teacher_model_server:
            raise ValueError("--teacher_model_server_api_key is the key of --teacher_model_server; this run has no "
                             "served teacher")
        if self.teacher_model_server_timeout <= 0:
            raise ValueError(f"--teacher_model_server_timeout must be > 0 seconds, got "
                             f"{self.teacher_model_server_timeout}")
        if self.gkd_logits_topk is not None and self.gkd_logits_topk < 1:
            raise ValueError(f"--gkd_logits_topk must be >= 1, got {self.gkd_logits_topk}")
        for name in ("lmbda", "beta"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"--{name} must be in [0, 1], got {getattr(self, name)}")
        if self.sft_alpha < 0:
            raise ValueError(f"--sft_alpha must be >= 0, got {self.sft_alpha}")
        if self.seq_kd:
            raise NotBuiltError("--seq_kd true (the teacher generates the off-policy answers) is not built; leave "
                                "it false and the dataset's answers are used")
        self._check_sampling_and_rollout()

    def _check_sampling_and_rollout(self) -> None:
        """What GRPO and GKD share: the student's sampling settings and where its completions come from."""
        if self.max_completion_length < 1:
            raise ValueError(f"--max_completion_length must be >= 1, got {self.max_completion_length}")
        if self.temperature <= 0:
            raise ValueError(f"--temperature must be > 0 for {self.rlhf_type} sampling, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"--top_p must be in (0, 1], got {self.top_p}")
        if self.top_k != -1 and self.top_k < 1:
            raise ValueError(f"--top_k must be -1 (all) or >= 1, got {self.top_k}")
        self._check_server_mode()
        if self.vllm_enable_lora and self.tuner_type != "lora":
            raise ValueError("--vllm_enable_lora true syncs a LoRA adapter; it needs --tuner_type lora")
        if self.weight_sync == "delta" and (not self.use_vllm or self.vllm_enable_lora):
            raise ValueError("--weight_sync delta sends the changed elements of the merged weights to vLLM; it needs "
                             "--use_vllm true, and not --vllm_enable_lora true, whose LoRA-only sync already sends "
                             "just the adapter (leave --weight_sync full there)")
        if self.vllm_enable_lora and self.lora_rank > self.vllm_max_lora_rank:
            raise ValueError(f"--lora_rank {self.lora_rank} exceeds --vllm_max_lora_rank {self.vllm_max_lora_rank}")
        if self.use_vllm:
            self.vllm_options()  # the engine's options check their own values, named by flag
        if self.sleep_level == 2 and self.vllm_enable_lora:
            raise ValueError("--sleep_level 2 drops vLLM's base weights, which LoRA-only sync (--vllm_enable_lora "
                             "true) never sends back; use --sleep_level 1 or merged-weight sync")

    def _check_megatron_backend(self) -> None:
        """What the Megatron backend (train/megatron/) does not have, refused before any model loads; the two
        options it makes meaningless are turned off with a note."""
        if self.rlhf_type not in ("grpo", "gkd"):
            raise ValueError(f"--train_backend megatron trains grpo and gkd; --rlhf_type {self.rlhf_type} runs on "
                             "transformers (leave --train_backend unset)")
        refused = {"--vllm_enable_lora true": self.vllm_enable_lora,
                   "--resume_from_checkpoint": self.resume_from_checkpoint, "--deepspeed": self.deepspeed,
                   "--adapters": self.adapters}
        given = [name for name, value in refused.items() if value]
        if given:
            raise NotBuiltError(f"{', '.join(given)}: not built for --train_backend megatron (its checkpoints are HF "
                                "weights with LoRA merged, and its LoRA layers carry Megatron's fused names); "
                                "sync merged weights and start from a checkpoint with --model")
        generates = self.rlhf_type == "grpo" or self.lmbda > 0
        if generates and not self.use_vllm:
            raise NotBuiltError(f"--train_backend megatron (swiftlike megatron rlhf) with --use_vllm false: "
                                f"{self.rlhf_type} samples completions, and the Megatron backend has no generate of "
                                "its own (no KV cache); set --use_vllm true (a colocated vLLM engine, or --vllm_mode "
                                "server with rollout servers)" + (", or --lmbda 0 to distill on the dataset's "
                                                                  "answers only" if self.rlhf_type == "gkd" else ""))
        if self.gradient_checkpointing or self.share_prompt_prefix:
            self.gradient_checkpointing = self.share_prompt_prefix = False
            logger.info("--train_backend megatron: no activation recompute and no KV cache in this backend, so "
                        "--gradient_checkpointing and --share_prompt_prefix are off")

    def _refuse(self, names: tuple[str, ...], what: str) -> None:
        given = [f"--{name}" for name in names if getattr(self, name) not in (None, [], False)]
        if given:
            raise ValueError(f"{', '.join(given)}: {what}, not used by --rlhf_type {self.rlhf_type}")

    def _check_server_mode(self) -> None:
        server = self.use_vllm and self.vllm_mode == "server"
        if self.async_generate and not server:
            raise ValueError("--async_generate true generates on rollout servers while the trainer learns; it "
                             "needs --use_vllm true --vllm_mode server")
        spg = self.steps_per_generation or self.gradient_accumulation_steps
        least = min_async_staleness(spg * self.num_iterations, self.gradient_accumulation_steps)
        if self.max_staleness is None:
            self.max_staleness = least if self.async_generate else 0
        if self.max_staleness < 0:
            raise ValueError(f"--max_staleness must be >= 0 optimizer steps, got {self.max_staleness}")
        if self.max_staleness > 0 and not self.async_generate:
            raise ValueError(f"--max_staleness {self.max_staleness} lets samples lag the trainer, which only "
                             "--async_generate true does; add it (with --vllm_mode server) or leave "
                             "--max_staleness 0")
        if 0 < self.max_staleness < least:
            raise ValueError(
                f"--max_staleness {self.max_staleness} leaves no room to generate ahead: a generation batch "
                f"serves {spg} micro-batches x {self.num_iterations} iteration(s) at --gradient_accumulation_steps "
                f"{self.gradient_accumulation_steps}, so a batch generated one batch ahead is last trained on "
                f"{least} optimizer steps after it was sampled. Set --max_staleness {least} or more (leave it unset "
                "for that default), or 0 for synchronous training")
        if not server:
            return
        hosts, ports = self.vllm_server_host, self.vllm_server_port
        if not hosts or not ports or (len(hosts) > 1 and len(ports) > 1 and len(hosts) != len(ports)):
            raise ValueError(f"--vllm_server_host ({len(hosts)} given) and --vllm_server_port ({len(ports)} given): "
                             "give one host for all ports, one port for all hosts, or as many of each")
        if self.vllm_server_timeout <= 0:
            raise ValueError(f"--vllm_server_timeout must be > 0 seconds, got {self.vllm_server_timeout}")
        if self.weight_bucket_mb < 1:
            raise ValueError(f"--weight_bucket_mb must be >= 1, got {self.weight_bucket_mb}")
        if self.sleep_level or self.offload_model or self.offload_optimizer:
            raise ValueError("--sleep_level / --offload_* share one GPU between trainer and a colocated engine; "
                             "with --vllm_mode server the engine has its own devices, so leave them off")

    def server_addresses(self) -> list[tuple[str, int]]:
        """(host, port) of every rollout server."""
        n = max(len(self.vllm_server_host), len(self.vllm_server_port))
        hosts = self.vllm_server_host * n if len(self.vllm_server_host) == 1 else self.vllm_server_host
        ports = self.vllm_server_port * n if len(self.vllm_server_port) == 1 else self.vllm_server_port
        return list(zip(hosts, ports))

    def reward_params(self) -> dict:
        """The values `build_reward_funcs` hands to parameterised reward functions."""
        names = ("cosine_min_len_value_wrong", "cosine_max_len_value_wrong", "cosine_min_len_value_correct",
                 "cosine_max_len_value_correct", "cosine_max_len", "repetition_n_grams", "repetition_max_penalty",
                 "soft_max_length", "soft_cache_length", "max_completion_length")
        return {n: getattr(self, n) for n in names}
