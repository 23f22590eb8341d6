"""Multi-turn GKD end to end on the tiny model: the LoRA student rolls out 3-turn trajectories on the pt engine,
with a user message inserted as ids after each turn (a scheduler that never ends a trajectory before
--max_turns: math_tip_trick and the tool loop end on the first turn a random model cuts at its token limit), its
own base is the teacher (adapter disabled), and the divergence counts the sampled ids only.

A fresh adapter makes student and teacher the same model, so step 1's divergence is 0; after one update they
differ, and the divergence of the later steps is over the sampled tokens of all turns."""
import json
import math

import pytest

from cli import run_cli
from model_ids import TINY

from swiftlike.rollout.multi_turn import MultiTurnScheduler, register_scheduler
from swiftlike.train.outputs import read_log
from swiftlike.utils.registry import restore_registries, snapshot_registries

ROWS = [{"messages": [{"role": "user", "content": f"What is {a} + {a}?"}]} for a in range(1, 5)]
OBSERVATION = "Observation: carry on."


class ObserveEveryTurn(MultiTurnScheduler):
    def check_finished(self, request, choice, current_turn):
        return current_turn >= self.max_turns

    def step(self, request, choice, current_turn):
        request.messages.append({"role": "user", "content": OBSERVATION})
        return {"infer_request": request}


@pytest.fixture
def observe_every_turn():
    """The scheduler registered for this test only: a name left in the registry would show up in other tests'
    lists of registered schedulers."""
    snapshot = snapshot_registries()
    register_scheduler("gkd_observe_every_turn")(ObserveEveryTurn)
    yield
    restore_registries(snapshot)


def test_gkd_on_three_turn_trajectories(tmp_path, observe_every_turn):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    run_cli("rlhf", "--rlhf_type", "gkd", "--model", TINY, "--teacher_model", TINY, "--tuner_type", "lora",
            "--dataset", str(data), "--split_dataset_ratio", "0", "--lmbda", "1", "--beta", "0.5",
            "--sft_alpha", "0.1", "--multi_turn_scheduler", "gkd_observe_every_turn", "--max_turns", "3",
            "--max_completion_length", "8", "--max_steps", "3", "--per_device_train_batch_size", "2",
            "--gradient_accumulation_steps", "1", "--learning_rate", "5e-2", "--logging_steps", "1",
            "--save_steps", "1000", "--report_to", "none", "--torch_dtype", "float32",
            "--gradient_checkpointing", "false", "--output_dir", tmp_path / "out")
    run_dir = next((tmp_path / "out").glob("v0-*"))
    steps = [e for e in read_log(run_dir) if "loss" in e]
    assert [e["step"] for e in steps] == [1, 2, 3]
    for e in steps:
        assert e["on_policy"] == 1.0 and math.isfinite(e["loss"])
        # every trajectory ran its 3 turns, each cut at 8 sampled tokens: the observations between them are
        # inserted, so only the 3 x 8 sampled ids count
        assert e["multi_turn/turns_mean"] == e["multi_turn/turns_max"] == 3, e
        assert e["completions/mean_length"] == 3 * 8
        assert e["multi_turn/env_errors"] == 0
    assert abs(steps[0]["jsd"]) < 1e-6 and steps[0]["teacher_kl"] == 0.0
    assert steps[-1]["jsd"] > 1e-6 and steps[-1]["grad_norm"] > 0
