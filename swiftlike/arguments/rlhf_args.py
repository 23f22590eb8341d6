"""Arguments of `swiftlike rlhf`: GRPO, PPO, GKD and the preference family (DPO, KTO, CPO, SimPO, ORPO, reward
models).

Names and defaults follow ms-swift's RLHF and GRPO arguments; `beta` and `loss_type` take their default from
`--rlhf_type`, as in ms-swift.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..rl.core.losses import LOSS_TYPES
from ..rl.core.options import (GKD, GRPO, ONLINE, PREFERENCE_TYPES, REWARDED, SAMPLING, GkdOptions, GrpoOptions,
                               MultiTurnOptions, PolicyTrainingOptions, PreferenceOptions, RayOptions, RewardOptions,
                               RlhfType, RolloutOptions, SamplingOptions, TeacherOptions, flags_not_read_by)
from ..rl.core.ppo_options import PPO, PpoOptions
from ..rl.core.staleness import min_async_staleness
from ..utils import get_logger
from ..utils.errors import NotBuiltError, UsageError
from ..utils.fields import field_default
from .base import arg
from .infer_args import SamplingArguments, VllmArguments
from .option_flags import flag_values, option_flags
from .sandbox_args import SandboxArguments
from .train_args import TrainArguments

logger = get_logger("swiftlike.arguments")


PolicyTrainingArguments = option_flags(PolicyTrainingOptions, "", "PolicyTrainingArguments", module=__name__,
                                       doc=PolicyTrainingOptions.__doc__)
CompletionArguments = option_flags(SamplingOptions, "", "CompletionArguments", module=__name__,
                                   doc="How long a sampled completion may be (GRPO and GKD; the sampling rule itself "
                                       "is the shared --temperature / --top_p / --top_k group).")
GrpoArguments = option_flags(GrpoOptions, "", "GrpoArguments", module=__name__, doc=GrpoOptions.__doc__)
PpoArguments = option_flags(PpoOptions, "", "PpoArguments", module=__name__, doc=PpoOptions.__doc__)
RewardArguments = option_flags(RewardOptions, "", "RewardArguments", module=__name__, doc=RewardOptions.__doc__)
RolloutPlacementArguments = option_flags(RolloutOptions, "", "RolloutPlacementArguments", module=__name__,
                                         doc=RolloutOptions.__doc__)
MultiTurnArguments = option_flags(MultiTurnOptions, "", "MultiTurnArguments", module=__name__,
                                  doc=MultiTurnOptions.__doc__)
TeacherArguments = option_flags(TeacherOptions, "", "TeacherArguments", module=__name__, doc=TeacherOptions.__doc__)
GkdArguments = option_flags(GkdOptions, "", "GkdArguments", module=__name__, doc=GkdOptions.__doc__)
PreferenceArguments = option_flags(PreferenceOptions, "", "PreferenceArguments", module=__name__,
                                   doc=PreferenceOptions.__doc__)
RayArguments = option_flags(RayOptions, "", "RayArguments", module=__name__, doc=RayOptions.__doc__)

# What the flags only some types read are, by those types (their `only=`), for the refusal message.
READERS_NAMES = {PREFERENCE_TYPES: "preference-training arguments", GKD: "GKD's teacher arguments",
                 GRPO: "GRPO's rollout and reward arguments", ONLINE: "rollout and teacher arguments of grpo and gkd",
                 PPO: "PPO's arguments", REWARDED: "reward arguments of grpo and ppo",
                 SAMPLING: "rollout arguments of grpo, gkd and ppo"}
# ms-swift's defaults per --rlhf_type (swift/arguments/rlhf_args.py): beta, then loss_type.
DEFAULT_BETA = {"grpo": 0.04, "simpo": 2.0, "gkd": 0.5}
DEFAULT_TEMPERATURE = {"gkd": 0.9, "ppo": 0.7}  # ppo: TRL's PPOConfig
DEFAULT_LOSS_TYPE = {"grpo": "grpo", "dpo": "sigmoid", "cpo": "sigmoid", "simpo": "simpo", "kto": "kto"}


@dataclass
class RlhfArguments(TrainArguments, PreferenceArguments, GkdArguments, TeacherArguments, MultiTurnArguments, GrpoArguments,
                    PpoArguments, RewardArguments, PolicyTrainingArguments, CompletionArguments, SamplingArguments,
                    RolloutPlacementArguments, VllmArguments, RayArguments, SandboxArguments):
    """swiftlike rlhf: preference training (dpo, kto, cpo, simpo, orpo, rm), RL with rewards (grpo, and ppo with a
    critic) and on-policy distillation (gkd)."""

    command = "rlhf"
    rlhf_type: RlhfType = arg(
        "dpo", "Algorithm: dpo, kto, cpo, simpo, orpo (preference pairs or labelled answers), rm (a reward model "
        "from preference pairs), grpo (sampled groups scored by rewards), ppo (sampled completions, a critic's "
        "per-token values and GAE), gkd (distillation from a teacher on the student's own samples).")
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
        if self.rlhf_type == "ppo":  # GRPO's --beta is PPO's --kl_coef (a resumed run's args.json holds both)
            if self.beta not in (None, self.kl_coef):
                raise UsageError("--beta: ppo's KL weight is --kl_coef (a per-token penalty in the reward); leave "
                                 "--beta unset")
            self.beta = self.kl_coef
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
        if self.use_gym_env is None:  # ms-swift's default
            self.use_gym_env = self.gym_env is not None
        super().__post_init__()
        self._refuse_unread_flags()
        if self.rlhf_type == "ppo":
            self._settle_ppo_flags()
        if self.steps_per_generation is None:
            self.steps_per_generation = self.gradient_accumulation_steps
        if self.rlhf_type == "grpo" and (len(self.loss_type) != 1 or self.loss_type[0] not in LOSS_TYPES):
            raise UsageError(f"--loss_type {' '.join(self.loss_type)}: grpo takes one of {', '.join(LOSS_TYPES)}")
        if self.rlhf_type == "gkd" and self.loss_type:
            raise UsageError("--loss_type: gkd's loss is the generalized JSD (set its shape with --beta); leave "
                             "--loss_type unset")
        if self.rlhf_type == "ppo" and self.loss_type:
            raise UsageError("--loss_type: ppo's loss is the clipped surrogate plus --vf_coef x the clipped value "
                             "loss; leave --loss_type unset")
        if self.train_backend == "megatron":
            self._check_megatron_backend()
        # The groups this type reads, each built once here and frozen: the trainers receive these, not `self`.
        self._groups = self._build_groups()

    # ------------------------------------------------------------------ the option groups
    def policy_training_options(self) -> PolicyTrainingOptions:
        return self._group(PolicyTrainingOptions)

    def sampling_options(self) -> SamplingOptions:
        return self._group(SamplingOptions)

    def grpo_options(self) -> GrpoOptions:
        return self._group(GrpoOptions)

    def reward_options(self) -> RewardOptions:
        return self._group(RewardOptions)

    def rollout_options(self) -> RolloutOptions:
        return self._group(RolloutOptions)

    def gkd_options(self) -> GkdOptions:
        return self._group(GkdOptions)

    def ppo_options(self) -> PpoOptions:
        return self._group(PpoOptions)

    def teacher_options(self) -> TeacherOptions:
        return self._group(TeacherOptions)

    def multi_turn_options(self) -> MultiTurnOptions:
        return self._group(MultiTurnOptions)

    def preference_options(self) -> PreferenceOptions:
        return self._group(PreferenceOptions)

    def ray_options(self) -> RayOptions:
        return self._group(RayOptions)

    def _group(self, cls: type):
        if cls not in self._groups:
            raise UsageError(f"--rlhf_type {self.rlhf_type} reads no {cls.__name__}; it reads "
                             f"{', '.join(c.__name__ for c in self._groups)}")
        return self._groups[cls]

    def _build_groups(self) -> dict[type, object]:
        """Each group checks its own values as it is built; what spans groups is checked here, in between."""
        groups: dict[type, object] = {PolicyTrainingOptions: PolicyTrainingOptions(**flag_values(self, PolicyTrainingOptions)),
                                      RayOptions: RayOptions(**flag_values(self, RayOptions))}
        if self.is_preference:
            groups[PreferenceOptions] = PreferenceOptions(**flag_values(self, PreferenceOptions),
                                                          rlhf_type=self.rlhf_type, loss_type=list(self.loss_type),
                                                          beta=self.beta)
            if self.ref_model and self.tuner_type == "lora":
                raise UsageError("--ref_model with --tuner_type lora: the reference is the model with its adapter "
                                 "disabled; use --ref_adapters to give the reference an adapter of its own")
            return groups
        groups[MultiTurnOptions] = multi_turn = MultiTurnOptions(**flag_values(self, MultiTurnOptions),
                                                                 on_servers=self.use_vllm and self.vllm_mode == "server")
        self._check_pass_dataset()
        groups[TeacherOptions] = teacher = TeacherOptions(**flag_values(self, TeacherOptions))
        if self.rlhf_type == "ppo":
            groups[RewardOptions] = RewardOptions(**flag_values(self, RewardOptions), trainer="ppo")
            groups[PpoOptions] = ppo = PpoOptions(**flag_values(self, PpoOptions))
            # the GRPO machinery PPO runs on: one completion per prompt, its epochs and mini-batches as GRPO's
            # batch reuse, the clip and the reference's weight as PPO's
            groups[GrpoOptions] = GrpoOptions(num_generations=1, critic=True, num_iterations=ppo.num_ppo_epochs,
                                              steps_per_generation=self.steps_per_generation,
                                              epsilon=ppo.cliprange, loss_type="bnpo", beta=ppo.kl_coef,
                                              log_completions=self.log_completions)
        elif self.rlhf_type == "grpo":
            opd = teacher.given
            groups[RewardOptions] = reward = RewardOptions(**flag_values(self, RewardOptions),
                                                           env_reward=multi_turn.use_gym_env, distill=opd)
            groups[GrpoOptions] = grpo = GrpoOptions(**flag_values(self, GrpoOptions), loss_type=self.loss_type[0],
                                                     beta=self.beta, opd=opd)
            self._check_opd(grpo, reward, teacher)
            # the per-estimator defaults the group settled, so args.json records what ran
            self.scale_rewards, self.kl_in_reward = grpo.scale_rewards, grpo.kl_in_reward
            self._check_generation_batch(grpo)
        else:
            groups[GkdOptions] = gkd = GkdOptions(**flag_values(self, GkdOptions), beta=self.beta, teacher=teacher)
            if multi_turn.enabled and gkd.lmbda == 0:
                raise UsageError("--multi_turn_scheduler with --lmbda 0: the student never samples, so no "
                                 "trajectory is rolled out; set --lmbda > 0 (1: train on trajectories only)")
        groups[SamplingOptions] = SamplingOptions(
            **flag_values(self, SamplingOptions), temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
            repetition_penalty=self.repetition_penalty)
        groups[RolloutOptions] = self._rollout_group()
        if self.vllm_enable_lora and self.tuner_type != "lora":
            raise UsageError("--vllm_enable_lora true syncs a LoRA adapter; it needs --tuner_type lora")
        if self.vllm_enable_lora and self.lora_rank > self.vllm_max_lora_rank:
            raise UsageError(f"--lora_rank {self.lora_rank} exceeds --vllm_max_lora_rank {self.vllm_max_lora_rank}")
        if self.use_vllm:
            self.vllm_options()  # the engine's options check their own values, named by flag
        return groups

    def _settle_ppo_flags(self) -> None:
        """PPO reads its own flags for what GRPO's flags set (--kl_coef for --beta, --cliprange for --epsilon,
        --num_ppo_epochs and --num_mini_batches for the batch reuse: TRL's rollout batch of accumulation x
        mini-batches, passed over --num_ppo_epochs times): a GRPO flag given here is refused, naming PPO's. The
        values PPO sets itself are allowed back (a resumed run's args.json holds them)."""
        derived = {"steps_per_generation": self.gradient_accumulation_steps * self.num_mini_batches,
                   "num_iterations": self.num_ppo_epochs}
        defaults = {f.name: field_default(f) for f in dataclasses.fields(GrpoOptions)}
        given = [f"--{name}" for name, value in flag_values(self, GrpoOptions).items()
                 if name != "log_completions" and value not in (defaults[name], derived.get(name, defaults[name]))]
        if given:
            raise UsageError(f"{', '.join(given)}: GRPO's settings, not read by --rlhf_type ppo (its own: "
                             "--num_ppo_epochs, --num_mini_batches, --cliprange, --kl_coef, --gamma, --lam, ...)")
        if self.use_ray:
            raise NotBuiltError("--use_ray with --rlhf_type ppo: not built; ppo runs in one process or under "
                                "torchrun (NPROC_PER_NODE), with rollouts on the pt engine, colocated vLLM or "
                                "rollout servers")
        self.steps_per_generation, self.num_iterations = derived["steps_per_generation"], derived["num_iterations"]

    def _check_pass_dataset(self) -> None:
        """--vllm_server_pass_dataset feeds the servers' scheduler (named here or not: the trainer takes theirs)."""
        if self.vllm_server_pass_dataset and not (self.use_vllm and self.vllm_mode == "server"):
            raise UsageError("--vllm_server_pass_dataset true sends the rows' other columns to the rollout servers' "
                             "multi-turn scheduler; it needs --use_vllm true --vllm_mode server")

    def _check_opd(self, grpo: GrpoOptions, reward: RewardOptions, teacher: TeacherOptions) -> None:
        """OPD-RL's per-token teacher advantage against what needs a per-sequence one or reward variance
        (ms-swift's list), and the served teacher's temperature, before any model loads."""
        if not grpo.opd:
            return
        flag = "--teacher_model_server" if teacher.served else "--teacher_model"
        if self.off_policy_sequence_mask_delta is not None:
            raise UsageError(f"{flag} with --off_policy_sequence_mask_delta: the off-policy sequence mask judges a "
                             "sequence by the sign of its advantage, which OPD-RL makes per token; drop one")
        if self.use_ray:
            raise NotBuiltError(f"{flag} with --rlhf_type grpo (OPD-RL) on Ray: not built; OPD-RL runs without "
                                "--use_ray, with rollouts on the pt engine, colocated vLLM or rollout servers")
        if teacher.served and self.temperature != 1.0:
            raise UsageError(f"--teacher_model_server with --temperature {self.temperature}: a served teacher "
                             "answers its log-probs at temperature 1 (vLLM's prompt_logprobs are the raw "
                             "distribution), so OPD-RL would compare it with a student scaled by another "
                             "temperature; set --temperature 1.0 or use an in-process --teacher_model")
        if not (reward.given or reward.env_reward):
            given = [f for f, on in (("--dynamic_sample true", grpo.dynamic_sample),
                                     ("--scale_rewards gdpo", grpo.scale_rewards == "gdpo")) if on]
            if given:
                raise UsageError(f"{', '.join(given)} with {flag} and no --reward_funcs: pure distillation has no "
                                 "reward variance for them to act on; add --reward_funcs or drop them")

    def _check_generation_batch(self, grpo: GrpoOptions) -> None:
        spg = grpo.steps_per_generation
        batch = self.per_device_train_batch_size * spg
        if batch % grpo.num_generations:
            raise UsageError(
                f"--per_device_train_batch_size ({self.per_device_train_batch_size}) * steps per generation ({spg}, "
                f"--steps_per_generation or --gradient_accumulation_steps) = {batch} completions must be divisible "
                f"by --num_generations ({grpo.num_generations}) so every prompt's group is generated together")

    def _rollout_group(self) -> RolloutOptions:
        """The rollout group, with --max_staleness resolved: its default and its least value depend on how many
        optimizer steps one generation batch serves (--steps_per_generation, --num_iterations, accumulation)."""
        spg, ga = self.steps_per_generation, self.gradient_accumulation_steps
        least = min_async_staleness(spg * self.num_iterations, ga)
        if self.max_staleness is None:
            self.max_staleness = least if self.async_generate else 0
        rollout = RolloutOptions(**flag_values(self, RolloutOptions), vllm_enable_lora=self.vllm_enable_lora)
        if 0 < rollout.max_staleness < least:
            raise UsageError(
                f"--max_staleness {rollout.max_staleness} leaves no room to generate ahead: a generation batch "
                f"serves {spg} micro-batches x {self.num_iterations} iteration(s) at --gradient_accumulation_steps "
                f"{ga}, so a batch generated one batch ahead is last trained on {least} optimizer steps after it "
                f"was sampled. Set --max_staleness {least} or more (leave it unset for that default), or 0 for "
                "synchronous training")
        return rollout

    def _refuse_unread_flags(self) -> None:
        """Flags that only other --rlhf_type values read (their `only=`), given here: an error, not a silent no-op."""
        defaults = {f.name: field_default(f) for f in dataclasses.fields(self)}
        for readers, names in flags_not_read_by(self.rlhf_type).items():
            given = [f"--{name}" for name in names if getattr(self, name) not in (None, [], False, defaults[name])]
            if given:
                learns = (f"; {self.rlhf_type} learns from the answers in the dataset"
                          if self.is_preference and "grpo" in readers else "")
                raise UsageError(f"{', '.join(given)}: {READERS_NAMES[readers]}, not used by --rlhf_type "
                                 f"{self.rlhf_type}{learns}")

    # ------------------------------------------------------------------ shared settings
    def _agent_template_unread(self) -> str | None:
        """The multi-turn rollout reads --agent_template (the tool scheduler parses calls with it); nothing else
        in rlhf encodes tools."""
        if self.multi_turn_scheduler is not None and self.rlhf_type in ONLINE:
            return None
        return ("in rlhf only multi-turn rollouts read it: --rlhf_type grpo --multi_turn_scheduler "
                "tool_call_scheduler")

    @property
    def grpo_loss_type(self) -> str:
        """GRPO takes exactly one --loss_type (checked in __post_init__)."""
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
            raise UsageError(f"{', '.join(batch_flags)}: not built for {what}")
        if self.torch_compile and not self.is_preference:
            raise UsageError(f"--torch_compile: not built for {self.rlhf_type}, whose trainer runs the model through "
                             "its own passes (prompt caches, hooks on the decoder); it applies to sft, pt and the "
                             "preference types (dpo, kto, cpo, simpo, orpo, rm)")
        if self.loss_scale == "all":
            answers = {"grpo": "sampled completions", "gkd": "completions"}.get(self.rlhf_type,
                                                                                "chosen/rejected answers")
            raise UsageError(f"--loss_scale all: {self.rlhf_type}'s loss is on the {answers} only (what default "
                             "and last_round both mean here)")
        super()._check_data_flags()

    def _check_megatron_backend(self) -> None:
        """What the Megatron backend (train/megatron/) does not have, refused before any model loads; the two
        options it makes meaningless are turned off with a note."""
        if self.rlhf_type not in ("grpo", "gkd"):
            raise UsageError(f"--train_backend megatron trains grpo and gkd; --rlhf_type {self.rlhf_type} runs on "
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
