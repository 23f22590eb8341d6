"""The typed option groups of the RL trainers: what each trainer reads, declared once, frozen and validated here.

Each group is a frozen dataclass whose fields with help text are also the flat ms-swift flags of `swiftlike rlhf`
(`arguments/option_flags.py` generates them from these fields: name, type, default, help and aliases), so a
setting is declared in one place and reaches its code as one typed object: flag -> RlhfArguments field -> the
group `RlhfArguments` builds once after its checks -> the trainer that reads it. Fields without help are filled
by the arguments from a setting shared with other commands or groups (--beta, --loss_type, --temperature).

A group checks its own values in `__post_init__`, naming the flag; what depends on several groups (a batch
divisible by --num_generations, the least --max_staleness for the batch layout) is checked by RlhfArguments.
Groups change only through `dataclasses.replace`, which checks again.

`only=` on a field names the --rlhf_type values that read it; `flags_not_read_by` derives from it the flags
another type refuses.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, get_args

from ...utils.fields import arg, check_choices
from .advantages import AdvantageEstimator, ScaleRewards, default_kl_in_reward, default_scale_rewards
from .correction import RolloutISMode
from .rejection import parse_rollout_rs as rejection_rules
from .losses import LOSS_TYPES, ImportanceSamplingLevel, LossType
from .ppo_options import PpoOptions

PreferenceType = Literal["dpo", "kto", "cpo", "simpo", "orpo", "rm"]
PREFERENCE_TYPES = get_args(PreferenceType)
RlhfType = Literal["dpo", "orpo", "simpo", "kto", "cpo", "rm", "ppo", "grpo", "gkd"]
RLHF_TYPES = get_args(RlhfType)
# TRL's loss names per preference trainer (DPOTrainer, CPOTrainer, KTOTrainer), as ms-swift passes them.
DPO_LOSS_TYPES = ("sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot",
                  "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm")
CPO_LOSS_TYPES = ("sigmoid", "hinge", "ipo", "simpo", "alphapo")
KTO_LOSS_TYPES = ("kto", "apo_zero_unpaired")
PREFERENCE_LOSS_TYPES = {"dpo": DPO_LOSS_TYPES, "cpo": CPO_LOSS_TYPES, "simpo": CPO_LOSS_TYPES, "kto": KTO_LOSS_TYPES}
# How merged weights reach vLLM (rollout/client/remote_engine.py, rl/online/rollout_worker.py).
WeightSync = Literal["full", "delta"]
WEIGHT_SYNC_MODES = get_args(WeightSync)
WeightTransport = Literal["auto", "http", "path", "nccl", "gloo"]
VllmMode = Literal["colocate", "server"]
TrainBackend = Literal["transformers", "megatron"]
# What a reward server call that failed after --reward_server_timeout does to the run (rl/rewards/functions.py).
RewardOnError = Literal["stop", "skip"]
GRPO = ("grpo",)
GKD = ("gkd",)
ONLINE = ("grpo", "gkd")
REWARDED = ("grpo", "ppo")  # trained on rewards: the reward flags
SAMPLING = ("grpo", "gkd", "ppo")  # sample from the policy while training: the rollout flags


@dataclass(frozen=True)
class SamplingOptions:
    """How the student's completions are drawn (GRPO and GKD); the trainer scores tokens under the same rule."""

    max_completion_length: int = arg(512, "Most tokens generated per completion (--response_length: ms-swift's and "
                                     "TRL's PPO name for it).", aliases=("--response_length",))
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if self.max_completion_length < 1:
            raise ValueError(f"--max_completion_length must be >= 1, got {self.max_completion_length}")
        if self.temperature <= 0:
            raise ValueError(f"--temperature must be > 0 for RL sampling (the trainer scores tokens at that "
                             f"temperature), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"--top_p must be in (0, 1], got {self.top_p}")
        if self.top_k != -1 and self.top_k < 1:
            raise ValueError(f"--top_k must be -1 (all) or >= 1, got {self.top_k}")


@dataclass(frozen=True)
class PolicyTrainingOptions:
    """How the policy's training passes run, for every --rlhf_type: dropout, and what a non-finite step does."""

    disable_dropout: bool = arg(True, "Zero every dropout rate (including --lora_dropout) in the policy and the "
                                "reference, so old, new and reference log-probs of a token agree before an update "
                                "(TRL's disable_dropout); false keeps dropout in the policy's training passes.")
    on_nonfinite: Literal["error", "skip"] = arg(
        "error", "A NaN/inf loss, gradient norm or metric: error stops the run at that step, naming the value; skip "
        "drops that step's update (counted in nonfinite/skipped_steps) and keeps training.")

    def __post_init__(self) -> None:
        check_choices(self)


@dataclass(frozen=True)
class GrpoOptions:
    """GRPO: group size, the clipped policy loss, advantages, batch reuse and DAPO's filters."""

    num_generations: int = arg(8, "Completions sampled per prompt (the group size G).")
    epsilon: float = arg(0.2, "Lower clip range of the importance ratio (and upper when --epsilon_high is unset).")
    epsilon_high: float | None = arg(None, "Upper clip range (DAPO clip-higher, e.g. 0.28); default --epsilon.")
    importance_sampling_level: ImportanceSamplingLevel = arg(
        "token", "token: PPO/GRPO ratio per token; sequence: GSPO's length-normalised sequence ratio, the gradient "
        "through it; sequence_token: GSPO-token, its stop-gradient form.")
    advantage_estimator: AdvantageEstimator = arg(
        "grpo", "Each completion's baseline: grpo (its group's mean reward), rloo (the mean of the group's other "
        "completions: unbiased), reinforce_plus_plus (the group mean, whitened over the batch by --scale_rewards "
        "batch).")
    kl_in_reward: bool | None = arg(
        None, "Subtract --beta x each sequence's KL to the reference (summed old - ref log-probs) from its reward "
        "before the advantage, instead of a KL term in the loss; default false for grpo, true for rloo and "
        "reinforce_plus_plus (ms-swift's).", only=GRPO)
    scale_rewards: ScaleRewards | None = arg(
        None, "Advantage denominator: group (the group's std), batch (the batch's), none (Dr. GRPO), or gdpo (each "
        "reward function z-scored in its group, their weighted sum z-scored over the batch); default group for "
        "grpo, none for rloo, batch for reinforce_plus_plus.")
    tau_pos: float = arg(1.0, "--loss_type sapo: temperature of the soft gate where the advantage is positive; larger "
                         "is sharper (closer to a hard clip).")
    tau_neg: float = arg(1.05, "--loss_type sapo: the gate's temperature where the advantage is negative (usually "
                         "above --tau_pos, a tighter bound on pushing tokens down).")
    top_entropy_quantile: float = arg(
        1.0, "Only the top share of completion tokens by the policy's entropy get a policy gradient (0.2: the 80/20 "
        "result); the threshold is over the micro-batch's tokens on every rank. 1.0 trains every token.")
    clip_cov_ratio: float = arg(0.0002, "--loss_type clip_cov: share of completion tokens whose gradient is stopped, "
                                "drawn from those whose advantage-logp covariance is in (--clip_cov_lb, "
                                "--clip_cov_ub).")
    clip_cov_lb: float = arg(1.0, "--loss_type clip_cov: lower bound of the covariance band.")
    clip_cov_ub: float = arg(5.0, "--loss_type clip_cov: upper bound of the covariance band.")
    kl_cov_ratio: float = arg(0.0002, "--loss_type kl_cov: share of completion tokens with the largest "
                              "advantage-logp covariance that get the |logp - old_logp| penalty.")
    ppo_kl_coef: float = arg(1.0, "--loss_type kl_cov: coefficient of that penalty.")
    num_iterations: int = arg(1, "Policy updates per generated batch (mu in the GRPO paper).")
    steps_per_generation: int | None = arg(None, "Micro-batches generated at once; default "
                                           "--gradient_accumulation_steps.")
    dynamic_sample: bool = arg(False, "DAPO dynamic sampling: replace groups whose rewards are all equal (no "
                               "advantage signal) with groups of freshly drawn prompts.", only=GRPO)
    max_resample_times: int = arg(3, "Most extra generation rounds per batch under --dynamic_sample; groups "
                                  "still missing are filled with the zero-std ones so the batch size is fixed.")
    overlong_filter: bool = arg(False, "DAPO overlong filtering: completions cut at --max_completion_length "
                                "(finish_reason length) are left out of the loss.", only=GRPO)
    share_prompt_prefix: bool = arg(True, "Score a group's shared prompt once per micro-batch and run its "
                                    "completions on that prompt's KV cache (gradients flow through it), instead "
                                    "of once per completion; likewise the first tokens all the micro-batch's "
                                    "prompts share (a chat template's system prompt), when there are 8 or more. "
                                    "The same loss up to float rounding, far fewer tokens. Off under "
                                    "--gradient_checkpointing, which drops the cache in training.")
    log_completions: bool = arg(False, "Write prompts, completions and rewards to completions.jsonl in the run dir.")
    teacher_kl_coef: float = arg(1.0, "OPD-RL (--teacher_model or --teacher_model_server with grpo): weight of the teacher's per-token "
                                 "log-ratio (teacher - old log-prob of the sampled token) added to each token's "
                                 "advantage.")
    loss_type: LossType = "grpo"  # --loss_type, which grpo takes exactly one of
    opd: bool = False  # a teacher is given (--teacher_model / --teacher_model_server): OPD-RL inside GRPO
    critic: bool = False  # PPO runs on this machinery: a value model is the baseline, so no group is needed
    beta: float = 0.04  # --beta: the KL coefficient to the reference

    def __post_init__(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"--loss_type {self.loss_type}: grpo takes one of {', '.join(LOSS_TYPES)}")
        check_choices(self)
        for name in ("num_generations", "num_iterations"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if self.num_generations < 2 and not (self.opd or self.critic):
            raise ValueError("--num_generations must be >= 2: advantages compare completions of the same prompt "
                             "(1 is allowed with a --teacher_model, whose per-token signal needs no group)")
        if self.steps_per_generation is not None and self.steps_per_generation < 1:
            raise ValueError(f"--steps_per_generation must be >= 1, got {self.steps_per_generation}")
        if self.beta < 0:
            raise ValueError(f"--beta must be >= 0, got {self.beta}")
        if self.max_resample_times < 0:
            raise ValueError(f"--max_resample_times must be >= 0, got {self.max_resample_times}")
        # ms-swift's per-estimator defaults, settled here so the trainer reads plain values
        if self.scale_rewards is None:
            object.__setattr__(self, "scale_rewards", default_scale_rewards(self.advantage_estimator))
        if self.kl_in_reward is None:
            object.__setattr__(self, "kl_in_reward", default_kl_in_reward(self.advantage_estimator))
        self._check_algorithm_set()

    def _check_algorithm_set(self) -> None:
        """The 2026 options' own ranges, and the pairs that cannot work, named by both flags."""
        if self.scale_rewards == "gdpo" and self.advantage_estimator != "grpo":
            raise ValueError(f"--scale_rewards gdpo with --advantage_estimator {self.advantage_estimator}: gdpo "
                             "normalises each reward function itself and replaces the estimator's baseline; use "
                             "--advantage_estimator grpo")
        if self.scale_rewards == "gdpo" and self.kl_in_reward:
            raise ValueError("--scale_rewards gdpo with --kl_in_reward true: gdpo z-scores each reward function, so "
                             "there is no summed reward to subtract the KL from; set --kl_in_reward false (the KL "
                             "stays a loss term)")
        if not 0.0 < self.top_entropy_quantile <= 1.0:
            raise ValueError(f"--top_entropy_quantile must be in (0, 1], got {self.top_entropy_quantile}")
        if self.tau_pos <= 0 or self.tau_neg <= 0:
            raise ValueError(f"--tau_pos and --tau_neg must be > 0, got {self.tau_pos} and {self.tau_neg}")
        for name in ("clip_cov_ratio", "kl_cov_ratio"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"--{name} must be in (0, 1], got {getattr(self, name)}")
        if self.clip_cov_lb >= self.clip_cov_ub:
            raise ValueError(f"--clip_cov_lb ({self.clip_cov_lb}) must be below --clip_cov_ub ({self.clip_cov_ub})")
        if self.loss_type in ("clip_cov", "kl_cov") and self.importance_sampling_level != "token":
            raise ValueError(f"--loss_type {self.loss_type} with --importance_sampling_level "
                             f"{self.importance_sampling_level}: its covariance and penalty are per token; use "
                             "--importance_sampling_level token")

    @property
    def micro_steps(self) -> int:
        """Micro-steps one generation batch serves: its slices, each used --num_iterations times."""
        return self.steps_per_generation * self.num_iterations


@dataclass(frozen=True)
class RewardOptions:
    """GRPO's rewards: functions, reward models (in-process or served), their weights and the parameters of the
    built-in functions."""

    reward_funcs: list[str] = arg([], "Reward functions by name: accuracy, format, format_hash, cosine, repetition, "
                                  "soft_overlong, code_exec, llm_judge (a served generative judge, "
                                  "--judge_model_server), or names registered in --external_plugins.", only=REWARDED)
    reward_weights: list[float] | None = arg(None, "One weight per reward: the --reward_funcs entries, then the "
                                             "--reward_model entries (ms-swift's order), then the "
                                             "--reward_model_server entries; default 1.0 each.", only=REWARDED)
    reward_model: list[str] = arg([], "Sequence-classification reward models (local dir or model id, resolved like "
                                  "--model); each scores prompt + completion and adds one reward column.", only=REWARDED)
    reward_model_server: list[str] = arg([], "URL(s) of served reward models (`swiftlike deploy --model RM`, or vLLM's "
                                         "server for a classification model): each scores prompt + completion "
                                         "through POST /classify and adds one reward column, named after the served "
                                         "model.", only=REWARDED)
    reward_model_server_api_key: str | None = arg(None, "The reward model servers' --api_key, sent as a Bearer "
                                                  "token.", only=REWARDED)
    judge_model_server: list[str] = arg([], "URL(s) of the OpenAI-compatible chat server of the generative judges "
                                        "(--reward_funcs llm_judge or a registered judge plugin): `swiftlike deploy`, "
                                        "`vllm serve`, a hosted API; several URLs are replicas, the requests spread "
                                        "over them.", only=REWARDED)
    judge_model: str | None = arg(None, "The judge's model name in its requests; default the first model the "
                                  "server lists at GET /v1/models.", only=REWARDED)
    judge_model_server_api_key: str | None = arg(None, "The judge servers' API key, sent as a Bearer token.",
                                                 only=REWARDED)
    judge_prompt_template: str | None = arg(None, "A text file: the judge's prompt for one completion, with "
                                            "{prompt}, {completion}, {conversation} and any dataset column "
                                            "({solution}) as placeholders, and {score_label} for the verdict "
                                            "label the reply ends with; default a built-in template asking for "
                                            "`{score_label}: N` from 0 to 10.", only=REWARDED)
    judge_temperature: float = arg(0.0, "The judge's sampling temperature (0: greedy, the same reply for the same "
                                   "completion).", only=REWARDED)
    judge_max_tokens: int = arg(512, "Most tokens of one judge reply; a reply cut at this limit has no score "
                                "(missing), whatever it holds.")
    judge_max_concurrency: int = arg(32, "Judge requests in flight at once; a batch's completions are judged "
                                     "concurrently.")
    reward_server_timeout: float = arg(60.0, "Seconds a call to a reward server (--reward_model_server, "
                                       "--judge_model_server) is retried with backoff while it does not answer "
                                       "(connection refused or reset, 429, 502-504 with their Retry-After, no "
                                       "answer) before it fails; see --reward_on_error.")
    reward_on_error: RewardOnError = arg("stop", "When a reward server call fails after --reward_server_timeout: "
                                         "stop (the run stops, naming the server and the call) or skip (the groups "
                                         "of the affected completions are dropped, counted in "
                                         "reward_on_error/dropped_groups, and training goes on). Under either, a "
                                         "request the server refuses as invalid (HTTP 400, a prompt over its "
                                         "context) leaves that one completion's reward missing.")
    cosine_min_len_value_wrong: float = arg(-0.5, "cosine reward: value for a wrong answer of length 0.")
    cosine_max_len_value_wrong: float = arg(0.0, "cosine reward: value for a wrong answer at --cosine_max_len.")
    cosine_min_len_value_correct: float = arg(1.0, "cosine reward: value for a right answer of length 0.")
    cosine_max_len_value_correct: float = arg(0.5, "cosine reward: value for a right answer at --cosine_max_len.")
    cosine_max_len: int | None = arg(None, "cosine reward: length scale; default --max_completion_length.")
    repetition_n_grams: int = arg(3, "repetition reward: n-gram size.")
    repetition_max_penalty: float = arg(-1.0, "repetition reward: penalty of a fully repetitive answer (<= 0).")
    soft_max_length: int | None = arg(None, "soft_overlong reward: L_max; default --max_completion_length.")
    soft_cache_length: int | None = arg(None, "soft_overlong reward: L_cache, the punished interval's length.")
    # --use_gym_env (MultiTurnOptions): the environment's return is one more reward column, `env`, after the others
    env_reward: bool = False
    distill: bool = False  # a --teacher_model gives the signal: rewards may be left out (pure OPD-RL distillation)
    trainer: Literal["grpo", "ppo"] = "grpo"  # --rlhf_type: whose rewards these are (named in errors)

    def __post_init__(self) -> None:
        if not self.given and not self.env_reward and not self.distill:
            if self.trainer == "ppo":
                raise ValueError("--rlhf_type ppo needs a reward source: --reward_model <sequence-classification "
                                 "checkpoint> (e.g. a --rlhf_type rm output), --reward_model_server URL, and/or "
                                 "--reward_funcs (e.g. accuracy)")
            raise ValueError("--reward_funcs is required for grpo, e.g. --reward_funcs accuracy format "
                             "(or a --reward_model / --reward_model_server, an environment's reward with "
                             "--use_gym_env, or a --teacher_model for on-policy distillation)")
        bad = [url for url in self.reward_model_server if not url.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"--reward_model_server must be http(s) URLs, got {bad}")
        if len(set(self.reward_model_server)) != len(self.reward_model_server):
            raise ValueError(f"--reward_model_server lists a URL twice ({self.reward_model_server}); each one is a "
                             "reward column")
        if self.reward_model_server_api_key and not self.reward_model_server:
            raise ValueError("--reward_model_server_api_key is the key of --reward_model_server; this run has no "
                             "served reward model")
        bad = [url for url in self.judge_model_server if not url.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"--judge_model_server must be http(s) URLs, got {bad}")
        judge_flags = [f"--{name}" for name in ("judge_model", "judge_model_server_api_key", "judge_prompt_template")
                       if getattr(self, name) is not None]
        if judge_flags and not self.judge_model_server:
            raise ValueError(f"{', '.join(judge_flags)}: settings of the judge at --judge_model_server, which this run "
                             "does not have")
        check_choices(self)
        if self.reward_server_timeout <= 0:
            raise ValueError(f"--reward_server_timeout must be > 0 seconds, got {self.reward_server_timeout}")
        if self.judge_temperature < 0:
            raise ValueError(f"--judge_temperature must be >= 0, got {self.judge_temperature}")
        for name in ("judge_max_tokens", "judge_max_concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        allowed = (self.count, self.count + 1) if self.env_reward else (self.count,)
        if self.reward_weights is not None and len(self.reward_weights) not in allowed:
            env = (" (+ 1 for the environment's reward, which is 1.0 when left out)" if self.env_reward else "")
            raise ValueError(f"got {len(self.reward_weights)} --reward_weights for {len(self.reward_funcs)} "
                             f"--reward_funcs + {len(self.reward_model)} --reward_model + "
                             f"{len(self.reward_model_server)} --reward_model_server{env}; give one weight per "
                             "reward in that order")

    @property
    def count(self) -> int:
        """Reward columns the flags give: functions, in-process reward models, served reward models."""
        return len(self.reward_funcs) + len(self.reward_model) + len(self.reward_model_server)

    @property
    def given(self) -> bool:
        """Any reward from the flags (not counting an environment's)."""
        return self.count > 0

    def weights(self) -> list[float] | None:
        """One weight per reward column in order (functions, reward models, served reward models, then `env`);
        None: 1.0 each."""
        if self.reward_weights is None or not self.env_reward:
            return self.reward_weights
        return list(self.reward_weights) + [1.0] * (self.count + 1 - len(self.reward_weights))

    def function_params(self, max_completion_length: int) -> dict:
        """The values `build_reward_funcs` hands to parameterised reward functions."""
        names = ("cosine_min_len_value_wrong", "cosine_max_len_value_wrong", "cosine_min_len_value_correct",
                 "cosine_max_len_value_correct", "cosine_max_len", "repetition_n_grams", "repetition_max_penalty",
                 "soft_max_length", "soft_cache_length", "judge_prompt_template", "judge_temperature",
                 "judge_max_tokens", "reward_on_error")
        return {**{n: getattr(self, n) for n in names}, "max_completion_length": max_completion_length}


@dataclass(frozen=True)
class RolloutOptions:
    """Where completions come from: the training model (pt), a colocated vLLM engine or rollout servers, how
    weights reach them, and mismatch handling. The vLLM engine's own settings are the shared `--vllm_*` group."""

    use_vllm: bool = arg(False, "Generate with vLLM; false = the training model's own generate().", only=SAMPLING)
    vllm_mode: VllmMode = arg("colocate", "colocate: vLLM in the trainer's process; "
                              "server: one or more `swiftlike rollout` servers.")
    vllm_server_host: list[str] = arg(["127.0.0.1"], "Rollout server host(s) for --vllm_mode server; one host "
                                      "for all ports, or one per --vllm_server_port.")
    vllm_server_port: list[int] = arg([8000], "Rollout server port(s); several servers share each generation "
                                      "batch between them.")
    vllm_server_timeout: float = arg(240.0, "Seconds the trainer keeps trying to reach a rollout server (at start "
                                     "and after a transient error) before it stops with an error.")
    vllm_server_api_key: str | None = arg(None, "The servers' --api_key, sent as a Bearer token.")
    weight_transport: WeightTransport = arg(
        "auto", "How full weights reach rollout servers: http (safetensors over HTTP, any host), path (files "
        "under --weight_sync_path, one host or a shared filesystem), nccl (GPU broadcast), gloo (the same on "
        "CPU). auto = nccl with CUDA, else http.")
    weight_sync_path: str | None = arg(None, "Directory for --weight_transport path; default /dev/shm.")
    weight_bucket_mb: int = arg(512, "Weights are sent to rollout servers in buckets of at most this many MiB.")
    weight_sync: WeightSync = arg(
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
                               "trainer warns once and treats them as on-policy).", only=GRPO)
    max_staleness: int | None = arg(None, "TRL's name: no sample is trained on at any step, its batch's last use "
                                    "included, more than this many optimizer steps after the step whose weights "
                                    "sampled its oldest token. Prefetching goes as far ahead as that allows; a "
                                    "group older anyway is dropped and generated again (staleness/dropped). 0 = "
                                    "synchronous training (a batch reused over several steps is then PPO's old "
                                    "policy). With --async_generate true it must let one batch be prefetched: 1 "
                                    "when a generation batch serves one optimizer step, 2B - 1 when it serves B "
                                    "(the default); else 0, and > 0 needs --async_generate true.", only=GRPO)
    rollout_importance_sampling_mode: RolloutISMode | None = arg(
        None, "Reweight the loss by pi_train / pi_rollout, bounded by the threshold; default off.", only=GRPO)
    rollout_importance_sampling_threshold: float = arg(2.0, "Upper bound of the rollout IS weights.")
    log_rollout_offpolicy_metrics: bool = arg(False, "Log training-inference mismatch metrics (rollout_correction/*) "
                                              "even without --rollout_importance_sampling_mode (with a mode set "
                                              "they are always logged).")
    off_policy_sequence_mask_delta: float | None = arg(
        None, "DeepSeek-V3.2 off-policy sequence mask: drop from the loss negative-advantage sequences whose mean "
        "(rollout logp - current logp) exceeds this many nats; default off.", only=GRPO)
    rollout_rs: str | None = arg(
        None, "Rejection sampling on the training-inference mismatch (verl's names, comma-separated, all must "
        "pass): token_k1/k2/k3, seq_sum_k1/k2/k3, seq_mean_k1/k2/k3 (geometric), seq_max_k2/k3; a rejected token "
        "or sequence gets no loss. Needs --use_vllm true (the engine's log-probs).", only=GRPO)
    rollout_rs_threshold: str | None = arg(
        None, "Bounds for --rollout_rs, one for all or one per option: LOWER_UPPER on pi_rollout / pi_train for k1 "
        "(verl's; e.g. 0.5_2.0), an upper bound for k2/k3 (e.g. 0.01).", only=GRPO)
    rollout_bypass_mode: bool = arg(
        False, "verl's bypass mode: the rollout engine's log-probs are the old policy, so the ratio is pi_theta / "
        "pi_rollout and PPO's clip corrects the mismatch; saves the old-policy forward pass. Needs --use_vllm true; "
        "not with --rollout_importance_sampling_mode (the ratio already is that weight).", only=GRPO)
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
    vllm_enable_lora: bool = False  # --vllm_enable_lora: sync only the LoRA adapter, not the merged weights

    def __post_init__(self) -> None:
        check_choices(self)
        if self.async_generate and not self.server_mode:
            raise ValueError("--async_generate true generates on rollout servers while the trainer learns; it "
                             "needs --use_vllm true --vllm_mode server")
        if self.max_staleness is not None:
            if self.max_staleness < 0:
                raise ValueError(f"--max_staleness must be >= 0 optimizer steps, got {self.max_staleness}")
            if self.max_staleness > 0 and not self.async_generate:
                raise ValueError(f"--max_staleness {self.max_staleness} lets samples lag the trainer, which only "
                                 "--async_generate true does; add it (with --vllm_mode server) or leave "
                                 "--max_staleness 0")
        if self.rollout_importance_sampling_threshold <= 0:
            raise ValueError("--rollout_importance_sampling_threshold must be > 0")
        if self.off_policy_sequence_mask_delta is not None and self.off_policy_sequence_mask_delta < 0:
            raise ValueError(f"--off_policy_sequence_mask_delta must be >= 0, got {self.off_policy_sequence_mask_delta}")
        self._check_rejection_and_bypass()
        if self.weight_sync == "delta" and (not self.use_vllm or self.vllm_enable_lora):
            raise ValueError("--weight_sync delta sends the changed elements of the merged weights to vLLM; it needs "
                             "--use_vllm true, and not --vllm_enable_lora true, whose LoRA-only sync already sends "
                             "just the adapter (leave --weight_sync full there)")
        if self.sleep_level == 2 and self.vllm_enable_lora:
            raise ValueError("--sleep_level 2 drops vLLM's base weights, which LoRA-only sync (--vllm_enable_lora "
                             "true) never sends back; use --sleep_level 1 or merged-weight sync")
        if not self.server_mode:
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

    def _check_rejection_and_bypass(self) -> None:
        if self.rollout_rs is not None:
            rejection_rules(self.rollout_rs, self.rollout_rs_threshold)  # names the bad option or bound
        elif self.rollout_rs_threshold is not None:
            raise ValueError(f"--rollout_rs_threshold {self.rollout_rs_threshold} bounds --rollout_rs, which is "
                             "unset; add e.g. --rollout_rs token_k1")
        needs_engine = [f for f, on in (("--rollout_rs", self.rollout_rs is not None),
                                        ("--rollout_bypass_mode true", self.rollout_bypass_mode)) if on]
        if needs_engine and not self.use_vllm:
            raise ValueError(f"{' and '.join(needs_engine)} compare with the rollout engine's log-probs, which only "
                             "vLLM returns; add --use_vllm true")
        if self.rollout_bypass_mode and self.rollout_importance_sampling_mode is not None:
            raise ValueError(f"--rollout_bypass_mode true with --rollout_importance_sampling_mode "
                             f"{self.rollout_importance_sampling_mode}: in bypass mode the ratio pi_theta / "
                             "pi_rollout already is the importance weight; drop one of them")

    def rejection(self):
        """The --rollout_rs rules, parsed (rl/core/rejection.py); () when off."""
        return () if self.rollout_rs is None else rejection_rules(self.rollout_rs, self.rollout_rs_threshold)

    @property
    def server_mode(self) -> bool:
        return self.use_vllm and self.vllm_mode == "server"

    @property
    def lora_sync(self) -> bool:
        """Only the LoRA adapter goes to vLLM at a sync (else the merged weights, --weight_sync full or delta)."""
        return self.use_vllm and self.vllm_enable_lora

    def server_addresses(self) -> list[tuple[str, int]]:
        """(host, port) of every rollout server."""
        n = max(len(self.vllm_server_host), len(self.vllm_server_port))
        hosts = self.vllm_server_host * n if len(self.vllm_server_host) == 1 else self.vllm_server_host
        ports = self.vllm_server_port * n if len(self.vllm_server_port) == 1 else self.vllm_server_port
        return list(zip(hosts, ports))


LimitScope = Literal["total", "per_round"]
# ms-swift removed --context_manager; what replaces it, for the refusal.
CONTEXT_MANAGER_REMOVED = ("--context_manager was removed (as in ms-swift): to change the conversation between "
                           "turns (compress the history, inject a hint), write a MultiTurnScheduler whose step() "
                           "does it, register it in an --external_plugins file with "
                           "@register_scheduler('my_scheduler') and pass --multi_turn_scheduler my_scheduler")


@dataclass(frozen=True)
class MultiTurnOptions:
    """Multi-turn rollouts (ms-swift's names): a scheduler turns each prompt into a trajectory of sampled turns
    with tool results or environment observations between them, trained on the ids the engine sampled."""

    multi_turn_scheduler: str | None = arg(
        None, "Roll out each prompt over several turns with this scheduler: tool_call_scheduler (runs the "
        "model's tool calls, read with --agent_template), math_tip_trick, gym_scheduler (an environment, "
        "--gym_env), or a name registered in an --external_plugins file. Default: one turn per prompt.",
        only=ONLINE)
    max_turns: int | None = arg(None, "Most assistant turns in one trajectory; default no limit of turns (the "
                                "scheduler, the length limit or the model's context ends it).", only=ONLINE)
    completion_length_limit_scope: LimitScope = arg(
        "per_round", "What --max_completion_length bounds in a multi-turn trajectory: per_round, each sampled "
        "turn; total, all completion ids together (sampled turns and the tool results or observations between "
        "them). A trajectory cut by it is marked truncated.")
    use_gym_env: bool | None = arg(None, "Add the environment's return (the sum of its step rewards) as one more "
                                   "reward column, named env, after the --reward_funcs; it may be the only "
                                   "reward. Default: true when --gym_env is given.", only=ONLINE)
    gym_env: str | None = arg(None, "Environment of gym_scheduler's trajectories (built in: math_env, frozen_lake, "
                              "or registered in an --external_plugins file) for rows whose env_config column "
                              "names none.", only=ONLINE)
    context_manager: str | None = arg(None, "Removed in ms-swift and refused here: write a scheduler instead "
                                      "(--multi_turn_scheduler).", only=ONLINE)
    vllm_server_pass_dataset: bool = arg(False, "--vllm_mode server: send each row's other columns (solution, "
                                         "env_config, ...) to the rollout server, whose scheduler reads them.",
                                         only=ONLINE)
    external_plugins: list[str] = arg([], "Python files imported before any model loads, to register reward "
                                      "functions, multi-turn schedulers, environments or tools by name.",
                                      only=SAMPLING)
    # Rollouts on `swiftlike rollout` servers (set from --vllm_mode, not a flag of its own): the servers own the
    # scheduler, and a trainer that names none takes theirs (rollout_worker), so multi-turn settings without
    # --multi_turn_scheduler are the servers' to check, as in ms-swift's commands.
    on_servers: bool = False

    def __post_init__(self) -> None:
        check_choices(self)
        if self.context_manager is not None:
            raise ValueError(CONTEXT_MANAGER_REMOVED)
        if self.use_gym_env is None:  # ms-swift's default, resolved once so every reader sees a bool
            object.__setattr__(self, "use_gym_env", self.gym_env is not None)
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"--max_turns must be >= 1 (or unset for no limit), got {self.max_turns}")
        if self.multi_turn_scheduler is None and not self.on_servers:
            given = [flag for flag, value in (("--max_turns", self.max_turns is not None),
                                              ("--completion_length_limit_scope total",
                                               self.completion_length_limit_scope == "total"),
                                              ("--use_gym_env true", self.use_gym_env),
                                              ("--gym_env", self.gym_env is not None)) if value]
            if given:
                raise ValueError(f"{', '.join(given)}: multi-turn settings, but no --multi_turn_scheduler is set "
                                 "(one turn per prompt); add e.g. --multi_turn_scheduler "
                                 f"{'gym_scheduler' if self.use_gym_env or self.gym_env else 'tool_call_scheduler'}")

    @property
    def enabled(self) -> bool:
        return self.multi_turn_scheduler is not None


@dataclass(frozen=True)
class TeacherOptions:
    """The teacher of GKD and of GRPO's on-policy distillation (OPD-RL): a model in the trainer's process, the
    student's own base with its adapter disabled, or a served model (ms-swift's names)."""

    teacher_model: str | None = arg(None, "gkd, and grpo's on-policy distillation (OPD-RL): the teacher (local dir "
                                    "or model id, resolved like --model). Equal to --model with --tuner_type lora: "
                                    "the teacher is the model with its adapter disabled (no second copy).",
                                    only=ONLINE)
    teacher_adapters: list[str] = arg([], "gkd / OPD-RL: LoRA adapters merged into the teacher (e.g. the SFT "
                                      "adapter that made it the teacher).", only=ONLINE)
    teacher_model_type: str | None = arg(None, "gkd / OPD-RL: model type of --teacher_model; default detected.",
                                         only=ONLINE)
    teacher_model_revision: str | None = arg(None, "gkd / OPD-RL: hub revision of --teacher_model.")
    teacher_model_server: list[str] = arg([], "gkd / OPD-RL: URL(s) of a served teacher (`swiftlike deploy ... "
                                          "--max_logprobs K` or `swiftlike rollout`, or vLLM's server) that answers "
                                          "prompt log-probs: gkd takes its top --gkd_logits_topk, grpo the sampled "
                                          "token's. Several URLs serve one teacher: batches go to them in turn.",
                                          only=ONLINE)
    teacher_model_server_timeout: float = arg(300.0, "gkd / OPD-RL: seconds to wait for the teacher server's "
                                              "answer to one batch before the run stops with an error.")
    teacher_model_server_api_key: str | None = arg(None, "gkd / OPD-RL: the teacher server's API key (its "
                                                   "--api_key), sent as a Bearer token; a Ray job sets it for its "
                                                   "teacher replicas.", only=ONLINE)
    offload_teacher_model: bool = arg(False, "gkd: keep the in-process teacher on CPU and move it to the "
                                      "accelerator only for its forward pass (CUDA only).", only=GKD)

    def __post_init__(self) -> None:
        """The teacher's own contradictions; what each trainer needs of it is checked by that trainer's group."""
        if self.teacher_model and self.teacher_model_server:
            raise ValueError("--teacher_model and --teacher_model_server both given; choose one teacher")
        if self.teacher_model_server:
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

    @property
    def given(self) -> bool:
        return bool(self.teacher_model or self.teacher_model_server)

    @property
    def served(self) -> bool:
        return bool(self.teacher_model_server)


@dataclass(frozen=True)
class GkdOptions:
    """GKD: on-policy distillation from a teacher, in-process or served (ms-swift's names and defaults)."""

    gkd_logits_topk: int | None = arg(None, "gkd: compare the distributions over the teacher's K most likely "
                                      "tokens only (both renormalised over them); default the full vocabulary. "
                                      "Required with --teacher_model_server (at most the server's --max_logprobs).",
                                      only=GKD)
    lmbda: float = arg(0.5, "gkd: share of micro-batches whose completions the student generates itself "
                       "(on-policy); the rest use the dataset's answers. 1 = fully on-policy.")
    seq_kd: bool = arg(False, "gkd: sequence-level KD: the off-policy micro-batches (1 - --lmbda of them) train on "
                       "answers the teacher samples (at the student's --temperature / --top_p / --top_k, up to "
                       "--max_completion_length) instead of the dataset's, so the data need no answers; on every "
                       "teacher placement (in-process, the student's base with its adapter disabled, served).",
                       only=GKD)
    sft_alpha: float = arg(0.0, "gkd: weight of an NLL (SFT) loss on the completion tokens, added to the "
                           "divergence.")
    beta: float = 0.5  # --beta: the generalized JSD's interpolation (0 forward KL, 1 reverse KL)
    teacher: TeacherOptions = dataclasses.field(default_factory=TeacherOptions)  # the --teacher_* group

    def __post_init__(self) -> None:
        """Every teacher and divergence setting is checked here, before any model is loaded."""
        if not self.teacher.given:
            raise ValueError("--rlhf_type gkd needs a teacher: --teacher_model <model id or dir> (in-process) or "
                             "--teacher_model_server http://host:port --gkd_logits_topk K (served)")
        if self.teacher.served and self.gkd_logits_topk is None:
            raise ValueError("--teacher_model_server sends the teacher's top-k log-probs only, so it needs "
                             "--gkd_logits_topk K (e.g. 20, at most the server's --max_logprobs)")
        if self.gkd_logits_topk is not None and self.gkd_logits_topk < 1:
            raise ValueError(f"--gkd_logits_topk must be >= 1, got {self.gkd_logits_topk}")
        for name in ("lmbda", "beta"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"--{name} must be in [0, 1], got {getattr(self, name)}")
        if self.sft_alpha < 0:
            raise ValueError(f"--sft_alpha must be >= 0, got {self.sft_alpha}")


@dataclass(frozen=True)
class PreferenceOptions:
    """The preference family: reference model and the loss terms of DPO, CPO/SimPO, KTO and reward models."""

    ref_model: str | None = arg(None, "Reference model for dpo/kto with --tuner_type full; default --model. With "
                                "LoRA the reference is the model with its adapter disabled (no second copy).",
                                only=PREFERENCE_TYPES)
    ref_model_type: str | None = arg(None, "Model type of --ref_model; default --model_type.")
    ref_model_revision: str | None = arg(None, "Hub revision of --ref_model.")
    ref_adapters: list[str] = arg([], "LoRA adapters applied to the reference, e.g. the SFT adapter that "
                                  "--adapters continues, so the reference is the SFT model and not the base.",
                                  only=PREFERENCE_TYPES)
    precompute_ref_log_probs: bool = arg(False, "dpo: compute the reference log-probs of the whole dataset once "
                                         "before training (TRL), then free the reference model.")
    label_smoothing: float = arg(0.0, "dpo/cpo: probability that a preference label is flipped (robust DPO, EXO).")
    rpo_alpha: float | None = arg(None, "dpo: weight of an NLL (SFT) loss on the chosen answer, "
                                  "loss = dpo_loss + rpo_alpha * nll (RPO paper; 1.0 recommended); default off.",
                                  only=PREFERENCE_TYPES)
    ld_alpha: float | None = arg(None, "dpo: LD-DPO weight in [0, 1] of the chosen/rejected tokens past their "
                                 "shared length (length desensitisation); default off.", only=PREFERENCE_TYPES)
    discopop_tau: float = arg(0.05, "dpo --loss_type discopop: temperature of the log-ratio modulation.")
    loss_weights: list[float] | None = arg(None, "dpo: one weight per --loss_type entry when several are mixed "
                                           "(MPO); default 1.0 each.", only=PREFERENCE_TYPES)
    cpo_alpha: float = arg(1.0, "cpo/simpo: weight of the NLL loss on the chosen answer; with simpo, 0 is pure "
                           "SimPO and the default 1.0 is CPO-SimPO (as in ms-swift).")
    simpo_gamma: float = arg(1.0, "simpo: target reward margin (the paper suggests 0.5-1.5).")
    desirable_weight: float = arg(1.0, "kto: weight of the desirable (label true) examples' loss.")
    undesirable_weight: float = arg(1.0, "kto: weight of the undesirable (label false) examples' loss.")
    center_rewards_coefficient: float | None = arg(None, "rm: weight of a penalty on the squared mean reward, "
                                                   "which keeps rewards centred on 0 (0.01 recommended).",
                                                   only=PREFERENCE_TYPES)
    rlhf_type: PreferenceType = "dpo"  # --rlhf_type: which of the family
    loss_type: list[str] = dataclasses.field(default_factory=list)  # --loss_type, by default the type's own
    beta: float = 0.1  # --beta: strength of the preference (or the pull to the reference)

    def __post_init__(self) -> None:
        check_choices(self)
        kind = self.rlhf_type
        types = PREFERENCE_LOSS_TYPES.get(kind, ())
        if self.loss_type and not types:
            raise ValueError(f"--loss_type: {kind} has one loss of its own; leave --loss_type unset")
        bad = [t for t in self.loss_type if t not in types]
        if bad:
            raise ValueError(f"--loss_type {' '.join(bad)}: not a {kind} loss; choose from {', '.join(types)}")
        if len(self.loss_type) > 1 and kind != "dpo":
            raise ValueError(f"several --loss_type values mix losses for dpo only, got {len(self.loss_type)} "
                             f"for {kind}")
        if self.loss_weights is not None:
            if kind != "dpo":
                raise ValueError("--loss_weights weighs mixed dpo losses; it is for --rlhf_type dpo")
            if len(self.loss_weights) != len(self.loss_type):
                raise ValueError(f"{len(self.loss_weights)} --loss_weights for {len(self.loss_type)} --loss_type "
                                 "values; give one weight per loss")
        if self.beta <= 0:
            raise ValueError(f"--beta must be > 0 for {kind}, got {self.beta}")
        if not 0 <= self.label_smoothing < 0.5:
            raise ValueError(f"--label_smoothing must be in [0, 0.5), got {self.label_smoothing}")
        if self.ld_alpha is not None and not 0 <= self.ld_alpha <= 1:
            raise ValueError(f"--ld_alpha must be in [0, 1], got {self.ld_alpha}")
        if self.rpo_alpha is not None and self.rpo_alpha < 0:
            raise ValueError(f"--rpo_alpha must be >= 0, got {self.rpo_alpha}")
        for name in ("desirable_weight", "undesirable_weight"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be > 0, got {getattr(self, name)}")
        if not self.uses_ref and (self.ref_model or self.ref_adapters or self.precompute_ref_log_probs):
            raise ValueError(f"--ref_model / --ref_adapters / --precompute_ref_log_probs: {kind} has no "
                             "reference model (only dpo and kto have one)")
        if self.precompute_ref_log_probs and kind != "dpo":
            raise ValueError("--precompute_ref_log_probs is built for dpo (TRL's DPOTrainer)")

    @property
    def uses_ref(self) -> bool:
        return self.rlhf_type in ("dpo", "kto")


@dataclass(frozen=True)
class RayOptions:
    """Ray placement of the train, rollout and teacher roles from one YAML (docs/ray.md)."""

    use_ray: bool = arg(False, "Run the roles of the --config YAML as Ray actors in placement groups. The YAML is "
                        "ms-swift's: shared arguments at the top, then one group per role (train, rollout, teacher) "
                        "with its device count `gpus:` (CPU slots on a machine without a GPU) and its own "
                        "arguments, and optional `colocate_groups: [[train, rollout]]` (time-sharing the same "
                        "devices) instead of separate placement.")
    ray_address: str | None = arg(None, "Ray cluster to join: the head's host:port (what `ray start --head` "
                                  "prints). Default: Ray's own RAY_ADDRESS, else the cluster `ray start` runs on "
                                  "this machine, else a local cluster started for this run and stopped after it.")
    train_backend: TrainBackend = arg(
        "transformers", "Model backend of the train role: transformers, or megatron (megatron-core's GPTModel, "
        "Llama and Qwen2 families; `swiftlike megatron rlhf` sets it, as ms-swift's `megatron rlhf` does).")

    def __post_init__(self) -> None:
        check_choices(self)


# Every group whose flags `swiftlike rlhf` has, in the order their flags are listed.
OPTION_GROUPS = (PolicyTrainingOptions, SamplingOptions, GrpoOptions, PpoOptions, RewardOptions, RolloutOptions,
                 MultiTurnOptions, TeacherOptions, GkdOptions, PreferenceOptions, RayOptions)


def flags_not_read_by(rlhf_type: str) -> dict[tuple[str, ...], tuple[str, ...]]:
    """The flags (by field name) that `--rlhf_type rlhf_type` does not read, keyed by the types that do
    (their `only=`), in declaration order."""
    out: dict[tuple[str, ...], list[str]] = {}
    for group in OPTION_GROUPS:
        for f in dataclasses.fields(group):
            readers = f.metadata.get("only", ())
            if readers and rlhf_type not in readers:
                out.setdefault(readers, []).append(f.name)
    return {readers: tuple(names) for readers, names in out.items()}


def flags_only_for(readers: tuple[str, ...]) -> tuple[str, ...]:
    """The flags read by exactly the types `readers` (e.g. GKD's teacher flags for ("gkd",))."""
    return tuple(f.name for group in OPTION_GROUPS for f in dataclasses.fields(group)
                 if f.metadata.get("only", ()) == readers)
