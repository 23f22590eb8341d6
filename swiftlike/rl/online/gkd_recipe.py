"""`swiftlike rlhf --rlhf_type gkd`: arguments -> student, teacher, rollout worker -> GkdTrainer -> run dir.

With --multi_turn_scheduler the student's samples are trajectories rolled out by the same scheduler loop as
GRPO's (rollout/multi_turn): the teacher scores each trajectory's ids whole, and the divergence counts only the
ids the student sampled (gkd_trainer.py)."""
from __future__ import annotations


from ...arguments.rlhf_args import RlhfArguments
from ...model import default_device
from ...model.segment_attention import use_segment_attention
from ...train.data import EncodeStats, ListDataset
from ...train.run import TrainResult, checkpoint_args_writer, load_train_val_rows, prepare_run
from ...utils import get_logger
from ..core.options import GkdOptions
from ..preference.data import PreferenceEncoder
from .grpo_recipe import build_multi_turn_scheduler
from .sandbox_check import require_sandbox

logger = get_logger("swiftlike.rl")

SUMMARY_KEYS = ("jsd", "teacher_kl", "on_policy", "completions/mean_length", "eval_teacher_kl")


def gkd_rows(rows: list[dict], encoder: PreferenceEncoder, needs_answers: bool,
             encode_prompts: bool = False) -> tuple[list[dict], EncodeStats]:
    """Rows with their prompt and answer ids (the dataset's answer, used by off-policy micro-batches).

    With --lmbda 1 every micro-batch is the student's own samples, and with --seq_kd the off-policy ones are the
    teacher's, so a row may end in a user turn (`encode_prompts`: its prompt ids are then encoded here, for the
    teacher); otherwise a row without an assistant answer has nothing to train on when its micro-batch is
    off-policy.
    """
    stats = EncodeStats()
    out = []
    for index, row in enumerate(rows):
        stats.rows += 1
        messages = row.get("messages") or []
        if not messages:
            raise ValueError(f"gkd dataset row {index} has no `messages`")
        if messages[-1].get("role") != "assistant":
            if needs_answers:
                raise ValueError(f"gkd dataset row {index} ends in a {messages[-1].get('role')!r} turn, not an "
                                 "assistant answer; with --lmbda < 1 the off-policy micro-batches train on the "
                                 "dataset's answers (use --lmbda 1 to train on the student's samples only)")
            stats.kept += 1
            prompt = encoder.template.encode_prompt(messages) if encode_prompts else None
            out.append({**row, "prompt_ids": prompt, "answer_ids": None})
            continue
        prompt, answer = encoder.split(messages)
        limited = encoder.limit(prompt, [answer], stats)
        if limited is None:
            continue
        prompt, (answer,) = limited
        stats.kept += 1
        out.append({**row, "prompt_ids": prompt, "answer_ids": answer})
    if not out:
        raise ValueError(f"no gkd rows left after encoding ({stats.describe(encoder.max_length, encoder.truncation_strategy)})")
    return out, stats


def validation_rows(rows: list[dict], encoder: PreferenceEncoder) -> list[dict]:
    """The validation rows that end in an answer: validation scores the dataset's answers (the student's samples
    would differ at every evaluation), so a row without one has nothing to score and is left out, said once."""
    if not rows:
        return []
    encoded = [r for r in gkd_rows(rows, encoder, needs_answers=False)[0] if r["answer_ids"] is not None]
    if len(encoded) < len(rows):
        logger.info("validation: %d of %d rows end in an assistant answer and are scored (eval_loss: the divergence "
                    "on those answers)", len(encoded), len(rows))
    return encoded


def build_teacher(gkd: GkdOptions, args: RlhfArguments, resolved, tokenizer, student, device: str):
    """The teacher `teacher.py` describes, after every check that can fail before training: reachability and
    tokenizer of a served one; tokenizer and memory of an in-process one. `args` for the student's settings
    (--model, --tuner_type, --use_hf, --torch_dtype)."""
    from .teacher import LocalTeacher, load_teacher_model, served_teacher
    teacher = gkd.teacher
    if teacher.served:
        return served_teacher(teacher, gkd.gkd_logits_topk, tokenizer, student.get_output_embeddings().weight.shape[0])
    place = "cpu" if teacher.offload_teacher_model else device
    model = load_teacher_model(teacher, args, resolved, tokenizer, place, device)
    if model is None:
        return LocalTeacher(None, gkd.gkd_logits_topk, False, device)
    if teacher.offload_teacher_model and place == device:
        logger.info("--offload_teacher_model: the teacher and the student share the host's memory here (no CUDA), "
                    "so there is nothing to offload")
    offload = teacher.offload_teacher_model and device != "cpu"
    return LocalTeacher(model if offload else model.to(device), gkd.gkd_logits_topk, offload, device)


def teacher_sampling(sampling, template, tokenizer):
    """--seq_kd's sampling, the student's: the teacher stops where the student's template ends a turn."""
    from .teacher import TeacherSampling
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else template.stop_token_ids[0]
    return TeacherSampling(sampling.max_completion_length, sampling.temperature, sampling.top_p, sampling.top_k,
                           tuple(template.stop_token_ids), pad)


def train_gkd(args: RlhfArguments) -> TrainResult:
    from ...train.tuner import parameter_summary
    from .gkd_trainer import GKD_PLOTTED, GkdTrainer
    from .rollout_worker import RolloutWorker
    from .online_trainer import load_policy, release_policy
    from ..rewards.plugins import load_external_plugins

    load_external_plugins(args.multi_turn_options().external_plugins)  # a broken plugin stops the run first,
    require_sandbox(args.allow_unisolated_execution, (),  # and a sandbox that cannot isolate its tool calls
                    None if args.rollout_options().server_mode else args.multi_turn_options().multi_turn_scheduler)
    run = prepare_run(args)
    resolved, tokenizer, template = run.resolved, run.tokenizer, run.template
    train_rows, val_rows = load_train_val_rows(args)
    encoder = PreferenceEncoder(template, args.max_length, args.max_completion_length, args.truncation_strategy)
    gkd, sampling, multi_turn = args.gkd_options(), args.sampling_options(), args.multi_turn_options()
    # a bad name stops the run before any model loads; on rollout servers the servers run theirs
    scheduler = build_multi_turn_scheduler(multi_turn, template, args.rollout_options().server_mode)
    if gkd.seq_kd and multi_turn.enabled:
        raise ValueError("--seq_kd: the teacher samples one answer per prompt, not multi-turn trajectories; leave "
                         "out --multi_turn_scheduler, or --seq_kd")
    rows, stats = gkd_rows(train_rows, encoder, needs_answers=gkd.lmbda < 1 and not gkd.seq_kd,
                           encode_prompts=gkd.seq_kd)
    logger.info("train data: %s", stats.describe(args.max_length, args.truncation_strategy))
    val = validation_rows(val_rows, encoder)

    training_args = run.training_arguments(has_eval=bool(val))
    training_args.include_num_input_tokens_seen = "no"  # batches are built at each step, not input_ids to count
    training_args.remove_unused_columns = False
    run_dir = run.open(stats, GKD_PLOTTED, carry_log_on_resume=False)
    saved_args = run.saved_args

    device = default_device()
    model = load_policy(args, resolved, device)
    if use_segment_attention(model):  # GKD's batches are packed rows (teacher.PackedSequences)
        logger.info("attention: each packed sequence on its own (segment attention), not a row-wide mask")
    teacher = worker = None
    try:
        logger.info("%s (gkd, %s); run directory %s", parameter_summary(model), args.tuner_type, run_dir)
        teacher = build_teacher(gkd, args, resolved, tokenizer, model, device)
        if gkd.lmbda > 0:
            worker = RolloutWorker(args.rollout_options(), sampling, args.vllm_options(), resolved, template, model,
                                   args.max_length, multi_turn=multi_turn, scheduler=scheduler)
        trainer = GkdTrainer(model=model, args=training_args, train_dataset=ListDataset(rows),
                             eval_dataset=ListDataset(val) if val else None,
                             data_collator=lambda batch: batch, processing_class=tokenizer, callbacks=run.callbacks,
                             checkpoint_extras=checkpoint_args_writer(saved_args), gkd=gkd, sampling=sampling,
                             policy_training=args.policy_training_options(), worker=worker, teacher=teacher,
                             teacher_sampling=teacher_sampling(sampling, template, tokenizer) if gkd.seq_kd else None)
        trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    finally:
        if worker is not None:
            worker.close()
        if teacher is not None:
            teacher.close()
        release_policy(model)
    return run.result(trainer, stats, SUMMARY_KEYS)
