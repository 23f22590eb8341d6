"""Driving the multi-turn loop's own per-turn code (`TrajectoryRun.after_turn`) with engine answers whose ids are
fixed: what a model would sample for a known conversation (a random model never writes a tool call)."""
from swiftlike.infer.protocol import Choice, TokenLogprob
from swiftlike.rollout.multi_turn.scheduler import TrajectoryRun

VERSION = 7  # the policy version the answers report


def engine_answer(template, text):
    """A real engine's answer for a turn that sampled `text`: its ids (stop token included), log-probs, text."""
    ids = list(template.tokenizer(text, add_special_tokens=False)["input_ids"])
    logprobs = [TokenLogprob(token_id, "", -0.5 - 0.001 * i) for i, token_id in enumerate(ids)]
    return Choice(0, template.tokenizer.decode(ids, skip_special_tokens=True), ids, "stop", logprobs)


QWEN_CONTEXT = 32768  # Qwen2.5's max_position_embeddings: the context length an engine of it reports


async def drive(template, scheduler, request, turns, max_completion_length=4096, limit_scope="per_round",
                max_model_len=QWEN_CONTEXT):
    """One trajectory whose turns sample the texts `turns`, in order, each cut to its budget as the loop cuts it;
    -> (Trajectory, the engine answers given). Stops early where the trajectory ends."""
    run = TrajectoryRun(request, template, scheduler, max_turns=None, max_completion_length=max_completion_length,
                        limit_scope=limit_scope, max_model_len=max_model_len)
    await run.start()
    choices = []
    for text in turns:
        if run.done:
            break
        budget = run.budget()
        choices.append(engine_answer(template, text))
        await run.after_turn(choices[-1], VERSION, budget)
    await scheduler.on_trajectory_end(run.request)
    return run.trajectory(), choices
