"""`swiftlike rlhf --rlhf_type grpo`: arguments -> model, reference, rollout engine, rewards -> GrpoTrainer -> run dir."""
from __future__ import annotations

from ...arguments.rlhf_args import RlhfArguments
from ...model import default_device
from ..core.options import MultiTurnOptions, RewardOptions, TeacherOptions
from ...train.data import EncodeStats, ListDataset
from ...train.run import TrainResult, checkpoint_args_writer, load_train_val_rows, prepare_run
from ...utils import get_logger
from .sandbox_check import require_sandbox

logger = get_logger("swiftlike.rl")


def _prompt_rows(rows: list[dict]) -> list[dict]:
    """Rows whose messages end in a user turn; a trailing assistant answer (SFT-style data) is dropped."""
    out = []
    for row in rows:
        messages = list(row.get("messages") or [])
        if messages and messages[-1].get("role") == "assistant":
            messages = messages[:-1]
        if not messages or messages[-1].get("role") != "user":
            continue
        out.append({**row, "messages": messages})
    if not out:
        raise ValueError("no GRPO prompts: every dataset row needs `messages` ending in a user turn")
    return out


def build_multi_turn_scheduler(multi_turn: MultiTurnOptions, template, server_mode: bool = False):
    """The --multi_turn_scheduler (after the --external_plugins files registered theirs), or None for one turn
    per prompt, or in server mode, where the rollout servers run theirs (the worker checks its name)."""
    if not multi_turn.enabled or server_mode:
        return None
    from ...rollout.multi_turn import build_scheduler
    return build_scheduler(multi_turn.multi_turn_scheduler, max_turns=multi_turn.max_turns,
                           gym_env=multi_turn.gym_env, template=template)


def train_grpo(args: RlhfArguments) -> TrainResult:
    """GRPO, or PPO (--rlhf_type ppo): the same rollout, reward and batch machinery, PPO adding its critic
    (critic.py, ppo_trainer.py)."""
    from ...train.tuner import parameter_summary
    from .critic import check_ppo_models, load_critic, save_critic
    from .grpo_trainer import GRPO_PLOTTED, GrpoTrainer, make_ref_model
    from .ppo_trainer import PPO_PLOTTED, PpoTrainer
    from .teacher import ServedTeacher, TeacherReplicas
    from .online_trainer import load_policy, release_policy
    from ..rewards.plugins import load_external_plugins
    from ..rewards.functions import ENV_REWARD, build_reward_funcs, environment_return
    from .rollout_worker import RolloutWorker

    grpo, sampling, rollout, reward = (args.grpo_options(), args.sampling_options(), args.rollout_options(),
                                       args.reward_options())
    multi_turn = args.multi_turn_options()
    load_external_plugins(multi_turn.external_plugins)  # a broken plugin stops the run before the model is touched
    require_sandbox(args.allow_unisolated_execution, reward.reward_funcs,  # and a sandbox that cannot isolate it
                    None if rollout.server_mode else multi_turn.multi_turn_scheduler)
    run = prepare_run(args)
    resolved, tokenizer, template = run.resolved, run.tokenizer, run.template
    is_ppo = args.rlhf_type == "ppo"
    critic_from = (check_ppo_models(args.ppo_options(), reward, args.model, args.model_type, tokenizer.get_vocab(),
                                    args.use_hf) if is_ppo else None)
    # a bad name stops the run before any model loads
    scheduler = build_multi_turn_scheduler(multi_turn, template, rollout.server_mode)
    reward_funcs = build_reward_funcs(reward.reward_funcs, **reward.function_params(sampling.max_completion_length),
                                      judge_server=build_judge_server(reward))
    for name, reward_model in build_reward_models(reward, args.use_hf, args.torch_dtype).items():
        if name in reward_funcs:
            raise ValueError(f"{reward_model.origin} is named {name!r}, the name of a --reward_funcs entry; rename "
                             "its directory (or --served_model_name)")
        reward_funcs[name] = reward_model  # after the functions: --reward_weights lists them in this order
    if reward.env_reward:
        if ENV_REWARD in reward_funcs:
            raise ValueError(f"a reward named {ENV_REWARD!r} is given, the name of the environment's reward column "
                             "(--use_gym_env); rename it")
        reward_funcs[ENV_REWARD] = environment_return  # last: the extra --reward_weights entry is its weight
    rows = _prompt_rows(load_train_val_rows(args)[0])
    if args.dataset_num_proc > 1 or args.load_from_cache_file:
        logger.info("--dataset_num_proc / --load_from_cache_file: GRPO encodes prompts at rollout time, so "
                    "there is nothing to encode up front or cache")

    training_args = run.training_arguments(has_eval=False)
    gen_prompts = (args.per_device_train_batch_size * grpo.steps_per_generation // grpo.num_generations
                   * training_args.world_size)
    if len(rows) < gen_prompts:
        raise ValueError(f"{len(rows)} prompts, fewer than the {gen_prompts} one generation batch needs "
                         f"over {training_args.world_size} process(es)")
    training_args.include_num_input_tokens_seen = "no"  # batches are rollouts, not input_ids the Trainer can count
    run_dir = run.open(plot_keys=PPO_PLOTTED if is_ppo else GRPO_PLOTTED, carry_log_on_resume=False)
    saved_args = run.saved_args

    model = load_policy(args, resolved, default_device())
    worker = teacher = None
    write_args = checkpoint_args_writer(saved_args)
    extras, trainer_cls = {}, GrpoTrainer
    if is_ppo:
        critic = load_critic(critic_from, args, default_device(), args.resume_from_checkpoint)
        logger.info("critic from %s: %s", critic_from.flag, parameter_summary(critic))
        extras, trainer_cls = {"ppo": args.ppo_options(), "critic": critic}, PpoTrainer

        def write_args(staged, _args=write_args):  # a PPO checkpoint carries its critic
            _args(staged)
            save_critic(critic, staged)
    try:
        logger.info("%s (%s); run directory %s", parameter_summary(model), args.tuner_type, run_dir)
        ref_model = make_ref_model(model, grpo.beta, args.tuner_type)
        teacher = build_opd_teacher(args.teacher_options(), args, resolved, tokenizer, model) if grpo.opd else None
        worker = RolloutWorker(rollout, sampling, args.vllm_options(), resolved, template, model, args.max_length,
                               multi_turn=multi_turn, scheduler=scheduler,
                               adopt_server_scheduler=args.rlhf_type == "grpo")
        trainer = trainer_cls(model=model, args=training_args, train_dataset=ListDataset(rows),
                              processing_class=tokenizer, callbacks=run.callbacks, checkpoint_extras=write_args,
                              grpo=grpo, sampling=sampling, rollout=rollout, reward=reward,
                              policy_training=args.policy_training_options(), worker=worker,
                              reward_funcs=reward_funcs, ref_model=ref_model, teacher=teacher, run_dir=run_dir,
                              **extras)
        try:
            trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
        finally:
            trainer.close()
            trainer.write_timeline()
    finally:
        if worker is not None:
            worker.close()
        if isinstance(teacher, (ServedTeacher, TeacherReplicas)):
            teacher.close()
        release_policy(model)
    return run.result(trainer, EncodeStats(rows=len(rows), kept=len(rows)))


def build_reward_models(reward: RewardOptions, use_hf: bool, torch_dtype: str) -> dict:
    """{column: RewardModel}: the --reward_model entries (in this process, on the pt backend), then the
    --reward_model_server URLs (each reached, and checked to serve a one-label classifier, here, before the policy
    loads), in --reward_weights' order. Two with one name are refused: each is a column."""
    from ...infer.engine import EngineSpec, build_classifier
    from ...infer.engine.classify_client import ClassifyClient
    from ...model.seq_cls import SeqClsCheckpoint
    from ..rewards.reward_model import RewardModel
    models: dict = {}

    def add(classifier, origin: str) -> None:
        reward_model = RewardModel(classifier, origin, reward.reward_on_error)
        if reward_model.name in models:
            raise ValueError(f"{origin} and {models[reward_model.name].origin} are both named {reward_model.name!r}; "
                             "each reward model is a column named after its model, so rename one (its directory, "
                             "or the server's --served_model_name)")
        models[reward_model.name] = reward_model

    for name in reward.reward_model:
        checkpoint = SeqClsCheckpoint.of(name)
        adapters = {checkpoint.name: checkpoint.adapter} if checkpoint.adapter else {}
        add(build_classifier(EngineSpec("pt", model=checkpoint.model, model_type=checkpoint.model_type,
                                        use_hf=use_hf, torch_dtype=torch_dtype, adapters=adapters)),
            f"--reward_model {name}")
    for url in reward.reward_model_server:
        add(ClassifyClient(url, reward.reward_server_timeout, reward.reward_model_server_api_key),
            f"--reward_model_server {url}")
    return models


def build_judge_server(reward: RewardOptions):
    """The `--judge_model_server` connection every generative judge of the run asks (reached and probed here, before
    the policy loads), or None without a judge in --reward_funcs; a server given without a judge is refused."""
    from ...infer.engine.chat_client import ChatClient
    from ..rewards.judge import judge_names
    judges = judge_names(reward.reward_funcs)
    if not reward.judge_model_server:
        return None  # a judge without a server is refused by its constructor, naming the flag
    if not judges:
        raise ValueError(f"--judge_model_server {' '.join(reward.judge_model_server)}: no --reward_funcs entry is a "
                         "generative judge (llm_judge, or a plugin registered with register_judge)")
    return ChatClient(reward.judge_model_server, reward.reward_server_timeout, reward.judge_model_server_api_key,
                      reward.judge_model, reward.judge_max_concurrency)


def build_opd_teacher(teacher: TeacherOptions, args: RlhfArguments, resolved, tokenizer, model):
    """OPD-RL's teacher: served (the sampled tokens' log-probs over HTTP), the student's own base with its
    adapter disabled (ADAPTER_DISABLED), or a frozen model on the student's device; GKD's checks for each."""
    from .grpo_trainer import ADAPTER_DISABLED
    from .teacher import load_teacher_model, served_teacher
    if teacher.served:
        return served_teacher(teacher, None, tokenizer, model.get_output_embeddings().weight.shape[0])
    device = default_device()
    loaded = load_teacher_model(teacher, args, resolved, tokenizer, device, device)
    return ADAPTER_DISABLED if loaded is None else loaded.to(device)
