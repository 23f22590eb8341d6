"""The `verifiers` environment (swiftlike/rollout/multi_turn/verifiers_env.py, verifiers_bridge.py): a real verifiers
0.3.1 environment package (examples/train/grpo/multi_turn/verifiers_guess, installed into .venv-verifiers by
`make setup`) played unchanged in its bridge process, by hand and through gym_scheduler on the tiny model; and what
the adapter refuses or survives, each named: a bridge that hangs is replaced, a slow episode is dropped alone, the
waits never take asyncio's default threads, and the bridge holds none of our secrets."""
from __future__ import annotations

import asyncio
import json
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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
        if "hang" in messages[-1]["content"]:  # a blocking call: the bridge's whole event loop stops
            import time
            time.sleep(1000)
        if "stall" in messages[-1]["content"]:  # this episode waits; the bridge serves the others
            import asyncio
            await asyncio.sleep(1000)
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


def with_config(row: dict, **config) -> dict:
    return {**row, "env_config": {**row["env_config"], **config}}


def test_a_bridge_that_hangs_is_replaced_and_the_next_episode_plays(broken_env):
    row = with_config(broken_env[0], timeout_s=2)
    hanging, _ = start(row)
    hung = hanging.bridge.process
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="'broken-vf' gave no answer in 2 s while answering turn 2"):
        run(hanging.step(answer(row["messages"], "hang")))
    assert time.monotonic() - started < 2 + 2 + 3  # the timeout, the ping's 2 s, and the kill
    run(hanging.close())
    assert hung.poll() is not None  # stopped, not left to sleep
    again, (question, _, _) = start(row)
    assert again.bridge.process.pid != hung.pid and question == "Say something."
    assert run(again.step(answer(row["messages"], "hello")))[:3] == ("again", 0.0, False)
    run(again.close())


def test_a_slow_episode_is_dropped_alone_and_its_bridge_kept(broken_env):
    row = with_config(broken_env[1], timeout_s=2)
    slow, _ = start(row)
    with pytest.raises(TimeoutError, match="gave no answer in 2 s .*the bridge itself answers, so only this episode"):
        run(slow.step(answer(row["messages"], "stall")))
    run(slow.close())
    fine, _ = start(row)
    assert fine.bridge is slow.bridge and fine.bridge.alive
    assert run(fine.step(answer(row["messages"], "hello")))[:3] == ("again", 0.0, False)
    run(fine.close())


def test_episodes_wait_on_the_bridges_own_threads_up_to_their_bound(broken_env):
    """Two episodes wait on a stalled environment while asyncio's default pool has one thread: that thread stays
    free for the rest of the run (tools, engine calls). A third episode beyond max_episodes 2 is refused."""
    row = with_config(broken_env[0], timeout_s=3, max_episodes=2)

    async def scenario():
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
        playing = [get_env("verifiers")(row["env_config"]) for _ in range(3)]
        for env in playing[:2]:
            await env.reset(RolloutRequest(list(row["messages"]), data_dict=dict(row)))
        with pytest.raises(RuntimeError, match="already plays 2 episodes, its bound \\(env_config max_episodes\\)"):
            await playing[2].reset(RolloutRequest(list(row["messages"]), data_dict=dict(row)))
        stalled = [asyncio.ensure_future(env.step(answer(row["messages"], "stall"))) for env in playing[:2]]
        await asyncio.sleep(0.5)
        started = time.monotonic()
        assert await asyncio.wait_for(asyncio.to_thread(lambda: 42), 2) == 42
        free_after = time.monotonic() - started
        outcomes = await asyncio.gather(*stalled, return_exceptions=True)
        for env in playing:
            await env.close()
        return free_after, outcomes
    free_after, outcomes = run(scenario())
    assert free_after < 1 and all(isinstance(o, TimeoutError) for o in outcomes)


def test_the_bridge_starts_without_our_secrets(broken_env, monkeypatch):
    """The trainer's SECRET_TOKEN is not in the bridge's /proc/<pid>/environ, unless the row hands it over by name
    (pass_env); the bridge still has what it needs to run (PATH, HOME, PYTHONPATH)."""
    monkeypatch.setenv("SECRET_TOKEN", "hunter2-do-not-leak")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-also-secret")
    environ = {}
    for pass_env in ([], ["SECRET_TOKEN"]):
        env, _ = start(with_config(broken_env[0], pass_env=pass_env, max_episodes=5))  # a bridge of its own
        raw = Path(f"/proc/{env.bridge.process.pid}/environ").read_bytes()
        environ[tuple(pass_env)] = dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
        run(env.close())
    scrubbed, handed = environ[()], environ[("SECRET_TOKEN",)]
    assert "SECRET_TOKEN" not in scrubbed and "OPENAI_API_KEY" not in scrubbed
    assert not any("hunter2" in value or "sk-also" in value for value in scrubbed.values())
    assert {"PATH", "HOME", "PYTHONPATH"} <= set(scrubbed)
    assert handed["SECRET_TOKEN"] == "hunter2-do-not-leak" and "OPENAI_API_KEY" not in handed
    with pytest.raises(ValueError, match="'pass_env' must be a list of environment variable names"):
        get_env("verifiers")({**broken_env[0]["env_config"], "pass_env": "SECRET_TOKEN"})


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
