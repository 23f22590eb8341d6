"""Multi-turn on rollout servers without a server: which trainers a server's scheduler accepts, and how the
trainer dates a trajectory that a weight update cut (by its oldest token)."""
import pytest

from swiftlike.rl.core.staleness import stale_groups
from swiftlike.rl.online.rollout_worker import trajectory_rollout
from swiftlike.rollout.multi_turn import Trajectory
from swiftlike.rollout.server.trajectories import check_trainer

SERVED = {"scheduler": "gym_scheduler", "max_turns": 4, "gym_env": "math_env", "trajectories": 0, "env_errors": 0}


def test_a_trainer_takes_the_servers_scheduler_or_names_it():
    assert check_trainer(SERVED, "gym_scheduler", None) == "gym_scheduler"  # the server's --max_turns applies
    assert check_trainer(SERVED, "gym_scheduler", 4) == "gym_scheduler"
    assert check_trainer(None, None, None) is None  # one turn per prompt on both sides
    # ms-swift's trainer commands name no scheduler (it is set on `swift rollout`), --max_turns at most
    assert check_trainer(SERVED, None, None) == "gym_scheduler"
    assert check_trainer(SERVED, None, 4) == "gym_scheduler"
    with pytest.raises(ValueError, match="the rollout server runs --multi_turn_scheduler gym_scheduler but this "
                                         "trainer has --multi_turn_scheduler math_tip_trick; pass "
                                         "--multi_turn_scheduler gym_scheduler"):
        check_trainer(SERVED, "math_tip_trick", None)
    with pytest.raises(ValueError, match="runs --multi_turn_scheduler gym_scheduler, and this trainer does not train "
                                         "multi-turn trajectories"):
        check_trainer(SERVED, None, None, adopt=False)
    with pytest.raises(ValueError, match="--multi_turn_scheduler tool_call_scheduler: the rollout server runs no "
                                         "scheduler .* restart it with"):
        check_trainer(None, "tool_call_scheduler", None)
    with pytest.raises(ValueError, match="--max_turns 3: the rollout server runs no scheduler"):
        check_trainer(None, None, 3)
    with pytest.raises(ValueError, match="--max_turns 2, but the rollout server runs gym_scheduler with --max_turns 4"):
        check_trainer(SERVED, "gym_scheduler", 2)
    with pytest.raises(ValueError, match="--max_turns 2, but the rollout server runs gym_scheduler with --max_turns 4"):
        check_trainer(SERVED, None, 2)


def trajectory(spans):
    """Turn 1 (3 sampled ids) and its observation (2 inserted ids) under engine version 2; turn 2 cut by an update:
    1 id under version 2, 3 under version 3."""
    return Trajectory(prompt_ids=[1, 2], completion_ids=[10, 11, 12, 50, 51, 13, 14, 15, 16],
                      loss_mask=[1, 1, 1, 0, 0, 1, 1, 1, 1], logprobs=[-0.5] * 3 + [0.0] * 2 + [-0.25] * 4,
                      version_spans=spans, messages=[], turns=2, finish_reason="stop", truncated=False)


def test_a_trajectory_is_as_old_as_its_oldest_token():
    step_of = {2: 5, 3: 6}.__getitem__  # engine syncs 2 and 3 pushed optimizer steps 5 and 6
    rollout = trajectory_rollout({"messages": []}, trajectory([(2, 6), (3, 3)]), step_of, current=7)
    assert rollout.version_spans == [(5, 6), (6, 3)] and rollout.policy_version == 5
    assert rollout.sampled_tokens == 7 and rollout.loss_mask == [1, 1, 1, 0, 0, 1, 1, 1, 1]
    # at step 8 with --max_staleness 2 it is 3 steps old (its first turn), though its newest tokens are 2
    assert stale_groups([rollout.policy_version], 8, 2, 1) == [0]
    assert stale_groups([rollout.policy_version], 7, 2, 1) == []
    unversioned = trajectory_rollout({"messages": []}, trajectory(None), step_of, current=7)
    assert unversioned.policy_version == 7 and unversioned.version_spans is None
