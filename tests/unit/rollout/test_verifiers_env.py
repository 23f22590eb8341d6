"""The `verifiers` environment (swiftlike/rollout/multi_turn/verifiers_env.py, verifiers_bridge.py): a real verifiers
0.3.1 environment package (examples/train/grpo/multi_turn/verifiers_guess, installed into .venv-verifiers by
`make setup`) played unchanged in its bridge process, by hand and through gym_scheduler on the tiny model; and what
the adapter refuses or survives, each named."""
from __future__ import annotations

import asyncio
import json
import textwrap

import pytest

from swiftlike.rollout.multi_turn import RolloutRequest, get_env
from swiftlike.rollout.multi_turn import verifiers_env as vf_env

GUESS_ARGS = {"high": 8, "size": 6, "seed": 3, "max_turns": 3}


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.fixture(scope="module")
def rows():
    return vf_env.verifiers_rows("guess-number-vf", env_args=GUESS_ARGS)


def start(row):
    env = get_env("verifiers")(row["env_config"])
    return env, run(env.reset(RolloutRequest(list(row["messages"]), data_dict=dict(row))))


def answer(conversation: list[dict], text: str) -> list[dict]:
    return [*conversation, {"role": "assistant", "content": text}]


def test_rows_are_the_environments_own_dataset(rows):
    assert len(rows) == GUESS_ARGS["size"]
    assert rows[2]["env_config"] == {"name": "verifiers", "env_id": "guess-number-vf", "env_args": GUESS_ARGS,
                                     "split": "train", "index": 2}
    assert [m["role"] for m in rows[0]["messages"]] == ["system", "user"]
    assert rows[0]["messages"][1]["content"] == "The secret is a whole number from 1 to 8. Your guess?"
    assert all(1 <= int(row["solution"]) <= 8 for row in rows)


def test_an_episode_is_the_environments_own_turns_and_rubric(rows):
    """Lower, then right: the environment's own hints between turns, then its rubric's reward (found_it 1 +
    0.5 x few_guesses 1/2) with the last step, and its metrics and stop condition in the info."""
    row = rows[0]
    secret = int(row["solution"])
    first = 1 if secret != 1 else 2
    env, (question, info, system) = start(row)
    assert (question, system) == (row["messages"][1]["content"], row["messages"][0]["content"])
    assert info == {"env_id": "guess-number-vf", "split": "train", "index": 0}
    conversation = [*row["messages"]]
    observation, reward, done, step_info = run(env.step(answer(conversation, f"<guess>{first}</guess>")))
    direction = "higher" if secret > first else "lower"
    assert (observation, reward, done) == (f"{first} is wrong: the secret is {direction}.", 0.0, False)
    conversation = [*answer(conversation, f"<guess>{first}</guess>"), {"role": "user", "content": observation}]
    observation, reward, done, step_info = run(env.step(answer(conversation, f"I say <guess>{secret}</guess>")))
    assert (observation, done) == ("Correct!", True)
    assert reward == pytest.approx(1.0 + 0.5 * 0.5)
    assert step_info["metrics"] == {"found_it": 1.0, "few_guesses": 0.5, "num_turns": 2.0}
    assert step_info["stop_condition"] == "has_final_env_response"
    run(env.close())


def test_unreadable_replies_go_on_until_the_environments_max_turns(rows):
    env, (question, _, _) = start(rows[1])
    conversation = [*rows[1]["messages"]]
    for turn in range(GUESS_ARGS["max_turns"]):
        observation, reward, done, info = run(env.step(answer(conversation, "no idea")))
        conversation = [*answer(conversation, "no idea"), {"role": "user", "content": observation}]
        if turn < GUESS_ARGS["max_turns"] - 1:
            assert (observation, reward, done) == ("I could not read a guess: answer like <guess>7</guess>.", 0.0,
                                                   False)
    assert (reward, done, info["stop_condition"]) == (0.0, True, "max_turns_reached")
    run(env.close())


def test_episodes_in_parallel_and_one_cut_short(rows):
    """Two episodes interleave in one bridge; one closed mid-episode (our --max_turns cut it) is cancelled there,
    and the other plays on."""
    (a, _), (b, _) = start(rows[2]), start(rows[3])
    run(a.step(answer(rows[2]["messages"], "<guess>0</guess>")))
    run(b.close())
    observation, reward, done, _ = run(a.step(answer(rows[2]["messages"], f"<guess>{rows[2]['solution']}</guess>")))
    assert done and reward == pytest.approx(1.25)
    run(a.close())


def test_a_row_for_another_entry_or_version_is_refused(rows):
    stale = {**rows[0], "messages": [{"role": "user", "content": "Some other question?"}]}
    with pytest.raises(ValueError, match="not entry 0 of 'guess-number-vf'.*make_verifiers_dataset"):
        start(stale)


@pytest.mark.parametrize("config, error", [
    ({"name": "verifiers", "index": 0}, "needs 'env_id'"),
    ({"name": "verifiers", "env_id": "x", "index": -1}, "'index' must be an integer >= 0"),
    ({"name": "verifiers", "env_id": "x", "index": 0, "split": "test"}, "'split' must be 'train' or 'eval'"),
    ({"name": "verifiers", "env_id": "x", "index": 0, "env_args": [1]}, "'env_args' must be an object"),
    ({"name": "verifiers", "env_id": "x", "index": 0, "seed": 1}, "unknown env_config keys \\['seed'\\]"),
])
def test_bad_env_config_is_named(config, error):
    with pytest.raises(ValueError, match=error):
        get_env("verifiers")(config)


def test_no_verifiers_python_says_how_to_build_it(monkeypatch, tmp_path):
    monkeypatch.setenv(vf_env.PYTHON_VARIABLE, str(tmp_path / "nowhere" / "python"))
    with pytest.raises(FileNotFoundError, match="SWIFTLIKE_VERIFIERS_PYTHON=.*verifiers==0.3.1"):
        vf_env.verifiers_rows("guess-number-vf")


BROKEN_ENV = '''
import verifiers as vf
from datasets import Dataset


class Broken(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        if "crash" in messages[-1]["content"]:
            raise KeyError("the environment's own bug")
        if "exit" in messages[-1]["content"]:
            import os
            os._exit(3)
        return [vf.UserMessage(content="again")]


def together(completions, **kwargs):
    return [0.0 for _ in completions]


def load_environment(group: bool = False):
    rubric = vf.Rubric(funcs=[together] if group else [lambda completion, **kw: 1.0])
    dataset = Dataset.from_list([{"question": "Say something.", "answer": "x"}] * 2)
    return Broken(dataset=dataset, rubric=rubric, max_turns=5)
'''


@pytest.fixture
def broken_env(monkeypatch, tmp_path):
    (tmp_path / "broken_vf.py").write_text(textwrap.dedent(BROKEN_ENV))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return vf_env.verifiers_rows("broken-vf")


def test_an_environment_that_raises_drops_its_episode_and_the_bridge_serves_on(broken_env):
    crashing, _ = start(broken_env[0])
    with pytest.raises(RuntimeError, match="'broken-vf' failed while answering.*KeyError.*the environment's own bug"):
        run(crashing.step(answer(broken_env[0]["messages"], "crash")))
    run(crashing.close())
    fine, _ = start(broken_env[1])
    assert run(fine.step(answer(broken_env[1]["messages"], "hello")))[:3] == ("again", 0.0, False)
    run(fine.close())


def test_a_bridge_that_dies_is_named_and_started_again(broken_env):
    dying, _ = start(broken_env[0])
    with pytest.raises(RuntimeError, match="bridge for 'broken-vf' exited \\(code 3\\)"):
        run(dying.step(answer(broken_env[0]["messages"], "exit")))
    again, (question, _, _) = start(broken_env[0])
    assert question == "Say something."
    run(again.close())


def test_group_rubrics_and_unknown_environments_are_refused_at_load(broken_env):
    with pytest.raises(RuntimeError, match="scores groups of rollouts together"):
        vf_env.verifiers_rows("broken-vf", env_args={"group": True})
    with pytest.raises(RuntimeError, match="could not load environment 'no-such-env'.*Could not import"):
        vf_env.verifiers_rows("no-such-env")


def test_whole_trajectories_through_gym_scheduler_on_the_tiny_model(rows, pt_tiny, tiny_template):
    """The multi-turn loop plays the environment as any other: the tiny model writes noise, so every turn earns
    the environment's 'could not read a guess' until its own max_turns (3) ends the episode with reward 0."""
    from swiftlike.infer.protocol import RequestConfig
    from swiftlike.rollout.multi_turn import build_scheduler, run_trajectories_sync
    scheduler = build_scheduler("gym_scheduler", max_turns=5, gym_env=None, template=tiny_template)
    requests = [RolloutRequest(list(row["messages"]), data_dict=dict(row)) for row in rows[:2]]
    trajectories = run_trajectories_sync(pt_tiny, tiny_template, scheduler, requests,
                                         RequestConfig(temperature=0.0, max_tokens=6), max_turns=5,
                                         max_completion_length=96)
    for trajectory, row in zip(trajectories, rows):
        assert trajectory.env_error is None
        assert trajectory.turns == 3 and trajectory.step_rewards == [0.0, 0.0, 0.0]
        assert [m["role"] for m in trajectory.messages] == ["system", "user"] + ["assistant", "user"] * 2 + ["assistant"]
        assert trajectory.messages[:2] == row["messages"]
        assert trajectory.messages[3]["content"] == "I could not read a guess: answer like <guess>7</guess>."
        assert trajectory.infos["env_infos"][-1]["stop_condition"] == "max_turns_reached"
        json.dumps(trajectory.infos)
