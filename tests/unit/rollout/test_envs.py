"""The environments of multi-turn rollouts (swiftlike/rollout/multi_turn/envs.py, frozen_lake.py, adapters.py):
each built-in's reset and step on hand-checked cases, the registry's errors, and an environment registered by a
real --external_plugins file."""
from __future__ import annotations

import asyncio
import importlib.util
import json
import sys

import pytest
from paths import REPO

from swiftlike.dataset import load_dataset
from swiftlike.rl.rewards.plugins import load_external_plugin
from swiftlike.rollout.multi_turn import RolloutRequest
from swiftlike.rollout.multi_turn.envs import MATH_RETRY, MATH_SYSTEM_PROMPT, Env, envs, get_env, register_env
from swiftlike.rollout.multi_turn.frozen_lake import (SYSTEM_PROMPT, FrozenLakeEnv, generate_map, parse_move,
                                                      shortest_path)


def run(coroutine):
    return asyncio.run(coroutine)


def reply(text: str, before: list[dict] | None = None) -> list[dict]:
    """The conversation `step` receives: what came before, then the assistant's reply."""
    return [*(before or [{"role": "user", "content": "question"}]), {"role": "assistant", "content": text}]


@pytest.fixture
def registry_snapshot():
    """Environments a test registers are gone after it."""
    before = dict(envs)
    yield
    envs.clear()
    envs.update(before)


# --- math_env -----------------------------------------------------------------------------------

def math_env(solution="42", question="What is 6 * 7?", **columns):
    env = get_env("math_env")({"name": "math_env"})
    request = RolloutRequest([{"role": "user", "content": question}], data_dict={"solution": solution, **columns})
    return env, run(env.reset(request))


def test_math_env_asks_the_row_question_with_its_system_prompt():
    _, (observation, info, system) = math_env()
    assert (observation, info, system) == ("What is 6 * 7?", {}, MATH_SYSTEM_PROMPT)
    _, (observation, _, _) = math_env(problem="What is 40 + 2?")  # ms-swift's `problem` column wins
    assert observation == "What is 40 + 2?"


@pytest.mark.parametrize("answer", ["<think>6*7</think><answer>42</answer>", "6 * 7 = 42\n#### 42",
                                    "The answer is \\boxed{42}."])
def test_math_env_right_answer_scores_one_and_ends(answer):
    env, _ = math_env()
    assert run(env.step(reply(answer))) == ("Correct.", 1.0, True, {"correct": True})


def test_math_env_wrong_answer_asks_again_then_a_right_one_ends():
    env, _ = math_env(solution="\\frac{1}{2}", question="Half of one?")
    conversation = reply("<answer>0.4</answer>")
    assert run(env.step(conversation)) == (MATH_RETRY, 0.0, False, {"correct": False})
    assert run(env.step(reply("no idea", conversation))) == (MATH_RETRY, 0.0, False, {"correct": False})
    conversation += [{"role": "user", "content": MATH_RETRY}]
    assert run(env.step(reply("<answer>0.5</answer>", conversation)))[1:3] == (1.0, True)


def test_math_env_bad_rows_and_calls_are_named():
    env = get_env("math_env")({})
    with pytest.raises(ValueError, match="needs a 'solution' column .* only: task"):
        run(env.reset(RolloutRequest([{"role": "user", "content": "q"}], data_dict={"task": "x"})))
    with pytest.raises(RuntimeError, match="before reset"):
        run(env.step(reply("<answer>1</answer>")))
    env, _ = math_env(solution="not a number at all")
    with pytest.raises(ValueError, match="cannot be read as a math answer"):
        run(env.step(reply("<answer>1</answer>")))
    env, _ = math_env()
    with pytest.raises(ValueError, match="ending with the assistant's reply, got user"):
        run(env.step([{"role": "user", "content": "q"}]))


# --- frozen_lake --------------------------------------------------------------------------------

SEED0 = ["HFFF",  # the map of seed 0, size 4; S at row 1, column 0
         "SFFF",
         "FFHF",
         "FFFG"]


def lake(**config) -> tuple[FrozenLakeEnv, str]:
    env = get_env("frozen_lake")({"name": "frozen_lake", "seed": 0, **config})
    observation, info, system = run(env.reset(RolloutRequest([{"role": "user", "content": "<placeholder>"}])))
    assert system == SYSTEM_PROMPT and info == {"seed": 0, "size": 4}
    return env, observation


def walk(env: FrozenLakeEnv, moves: list[str]) -> list[tuple[str, float, bool, dict]]:
    conversation, results = [{"role": "user", "content": "board"}], []
    for move in moves:
        conversation = reply(move, conversation)
        results.append(run(env.step(conversation)))
        conversation.append({"role": "user", "content": results[-1][0]})
    return results


def test_frozen_lake_map_is_the_hand_checked_one():
    assert generate_map(0) == SEED0
    env, observation = lake()
    assert observation == ("FrozenLake 4x4, 16 moves allowed:\nH F F F\nP F F F\nF F H F\nF F F G\n"
                           "You are at row 1, column 0.\nWhat is your first move?")


def test_frozen_lake_walk_to_the_goal():
    env, _ = lake()
    results = walk(env, ["<action>down</action>", "I go south", "<action>right</action>", "R", "Then: right."])
    assert [r[1:3] for r in results] == [(0.0, False)] * 4 + [(1.0, True)]
    assert [r[3]["status"] for r in results] == ["moved"] * 4 + ["goal"]
    assert results[1][0] == "You moved down.\nH F F F\nS F F F\nF F H F\nP F F G\nYou are at row 3, column 0.\n" \
                            "14 moves left. What is your next move?"
    assert "You reached the goal!" in results[-1][0] and results[-1][3]["step"] == 5


def test_frozen_lake_hole_ends_the_episode_with_nothing():
    env, _ = lake()
    (observation, reward, done, info), = walk(env, ["<action>up</action>"])
    assert (reward, done, info["status"]) == (0.0, True, "hole") and "fell into a hole" in observation


def test_frozen_lake_edge_and_invalid_moves_use_a_step_and_go_on():
    env, _ = lake()
    edge, invalid = walk(env, ["left", "I am not sure what to do here."])
    assert edge[1:3] == (0.0, False) and edge[3]["status"] == "edge" and env.position == (1, 0)
    assert invalid[1:3] == (0.0, False) and invalid[3] == {"step": 2, "move": None, "status": "invalid"}
    assert invalid[0].startswith("I could not find a move in your reply") and "<action>down</action>" in invalid[0]


def test_frozen_lake_step_limit_ends_it():
    env, _ = lake(max_steps=2)
    first, second = walk(env, ["right", "<action>left</action>"])
    assert first[1:3] == (0.0, False) and "1 moves left" in first[0]
    assert second[1:3] == (0.0, True) and second[3]["status"] == "step_limit" and "out of moves" in second[0]
    run(env.reset(RolloutRequest([])))  # a reset starts over
    assert env.position == (1, 0) and env.steps == 0


@pytest.mark.parametrize(("text", "move"), [
    ("<action>Down</action>", "down"), ("<ACTION> left </ACTION>", "left"), ("I go north", "up"),
    ("R", "right"), ("d.", "down"), ("left, no wait: right", "right"), ("<action>left</action> or right", "left"),
    ("", None), ("upward and onward", None), ("Rather not", None), ("<action>jump</action>", None),
])
def test_frozen_lake_parses_moves_leniently(text, move):
    assert parse_move(text) == move


def test_every_generated_map_is_solvable_and_fixed_by_its_seed():
    for size in range(2, 7):
        for seed in range(150):
            grid = generate_map(seed, size, p=0.6)
            assert len(grid) == size and all(len(line) == size for line in grid)
            assert "".join(grid).count("S") == 1 and "".join(grid).count("G") == 1
            path = shortest_path(grid)
            assert path is not None and generate_map(seed, size, p=0.6) == grid
    assert shortest_path(["SH", "HG"]) is None


def test_frozen_lake_datasets_are_solvable_disjoint_and_match_the_environment():
    train, test = load_dataset(["swiftlike/frozen-lake"]), load_dataset(["swiftlike/frozen-lake-test"])
    assert (len(train), len(test)) == (512, 128)
    maps = {}
    for name, rows in (("train", train), ("test", test)):
        maps[name] = set()
        for row in rows:
            env = FrozenLakeEnv(row["env_config"])
            assert row["env_config"]["name"] == "frozen_lake" and shortest_path(env.grid) is not None
            assert row["messages"] == [{"role": "system", "content": SYSTEM_PROMPT},
                                       {"role": "user", "content": env.first_observation()}]
            maps[name].add(tuple(env.grid))
    assert len(maps["train"]) == 512 and len(maps["test"]) == 128 and not maps["train"] & maps["test"]


@pytest.mark.parametrize(("config", "error"), [
    ({}, "needs 'seed'"), ({"seed": "1"}, "'seed' must be an integer"), ({"seed": 1, "size": 1}, "size must be 2..12"),
    ({"seed": 1, "p": 0}, "must be in \\(0, 1\\]"), ({"seed": 1, "max_steps": 0}, "at least 1"),
])
def test_frozen_lake_bad_env_config_is_named(config, error):
    with pytest.raises(ValueError, match=error):
        FrozenLakeEnv(config)


# --- reasoning_gym ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def adapters():
    pytest.importorskip("reasoning_gym")
    from swiftlike.rollout.multi_turn import adapters
    return adapters


def gym_task(task: str, index: int, **config):
    env = get_env("reasoning_gym")({"name": "reasoning_gym", "task": task, "seed": 0, "size": 4, "index": index,
                                    **config})
    observation, info, system = run(env.reset(RolloutRequest([{"role": "user", "content": "?"}])))
    assert info == {"task": task, "index": index} and "<answer>" in system
    return env, observation


def test_reasoning_gym_letter_counting_scores_with_its_own_verifier(adapters):
    env, observation = gym_task("letter_counting", 1)
    assert observation == 'How many times does the letter "h" appear in the text: ' \
                          '"hundred thousand names and then Mr Fritz"?'
    assert run(env.step(reply("h in hundred, thousand, then: <answer>3</answer>"))) == \
        ("Correct.", 1.0, True, {"attempt": 1, "answer": "3", "score": 1.0})
    env, _ = gym_task("letter_counting", 1)
    assert run(env.step(reply("<answer>2</answer>")))[1:3] == (0.0, True)  # one attempt by default


def test_reasoning_gym_chain_sum_with_retries(adapters):
    env, observation = gym_task("chain_sum", 1, max_attempts=2)
    assert observation.endswith("4 - 1 - 7 =")
    first = reply("<answer>2</answer>")
    assert run(env.step(first)) == (adapters.RG_RETRY, 0.0, False, {"attempt": 1, "answer": "2", "score": 0.0})
    assert run(env.step(reply("<answer>-4</answer>", first)))[1:3] == (1.0, True)
    env, _ = gym_task("chain_sum", 1, max_attempts=2)
    run(env.step(reply("no tags: -4")))
    assert run(env.step(reply("<answer>4</answer>")))[:3] == ("No attempts left.", 0.0, True)


def test_reasoning_gym_verifier_that_raises_on_a_reply_scores_it_zero(adapters):
    env, _ = gym_task("prime_factorization", 0)
    observation, reward, done, info = run(env.step(reply("<answer>[[1,2</answer>")))
    assert (reward, done, info["answer"]) == (0.0, True, "[[1,2")
    assert info["verifier_error"].startswith("ValueError: invalid literal for int()")


def test_reasoning_gym_rows_replay_in_the_environment(adapters, tmp_path):
    rows = adapters.reasoning_gym_rows("chain_sum", size=3, seed=0, max_attempts=2)
    assert rows[1] == {"messages": [{"role": "user", "content": rows[1]["messages"][0]["content"]}], "solution": "-4",
                       "env_config": {"name": "reasoning_gym", "task": "chain_sum", "seed": 0, "size": 3, "index": 1,
                                      "max_attempts": 2}}
    env = get_env("reasoning_gym")(rows[1]["env_config"])
    request = RolloutRequest(rows[1]["messages"], data_dict={"solution": rows[1]["solution"]})
    observation, _, _ = run(env.reset(request))
    assert observation == rows[1]["messages"][0]["content"]
    with pytest.raises(ValueError, match="not the answer of the entry"):
        run(env.reset(RolloutRequest(rows[1]["messages"], data_dict={"solution": "5"})))
    out = tmp_path / "chain.jsonl"
    spec = importlib.util.spec_from_file_location("make_rg", REPO / "scripts" / "make_reasoning_gym_dataset.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main(["chain_sum", "--size", "3", "--max_attempts", "2", "--out", str(out)])
    assert [json.loads(line) for line in out.read_text().splitlines()] == rows


@pytest.mark.parametrize(("config", "error"), [
    ({"task": "no_such_task", "size": 2, "index": 0}, "unknown task 'no_such_task'; .*chain_sum"),
    ({"task": "chain_sum", "size": 2, "index": 2}, "index 2 is past the task's size 2"),
    ({"task": "chain_sum", "index": 0}, "'size' must be an integer >= 1, got None"),
    ({"task": "chain_sum", "size": 2, "index": 0, "level": 3}, "unknown env_config keys \\['level'\\]"),
    ({"task": "chain_sum", "size": 2, "index": 0, "config": {"no_option": 1}}, "refuses env_config config"),
])
def test_reasoning_gym_bad_env_config_is_named(adapters, config, error):
    with pytest.raises(ValueError, match=error):
        get_env("reasoning_gym")(config)


# --- the registry and plugins -------------------------------------------------------------------

def test_get_env_names_the_unknown_env_and_the_registered_ones():
    with pytest.raises(ValueError, match="unknown environment 'sokoban' .* registered: frozen_lake, math_env, "
                                         "reasoning_gym. .*register_env\\('sokoban', cls\\)"):
        get_env("sokoban")


class Echo(Env):
    async def reset(self, request):
        return "say something", {}, ""

    async def step(self, action):
        return action[-1]["content"], 0.0, True, {}


def test_register_env_refuses_what_is_not_an_environment(registry_snapshot):
    class Half(Env):
        async def reset(self, request):
            return "", {}, ""

    with pytest.raises(ValueError, match="must be a subclass of .*Env"):
        register_env("echo", object)
    with pytest.raises(ValueError, match="Half\\) does not implement step"):
        register_env("half", Half)
    with pytest.raises(ValueError, match="non-empty string"):
        register_env(" ", Echo)
    with pytest.raises(ValueError, match="'math_env' is already registered \\(.*envs.py\\)"):
        register_env("math_env", Echo)
    assert register_env("echo")(Echo) is Echo and register_env("echo", Echo) is Echo  # again: the same class
    envs["echo_swift_style"] = Echo  # ms-swift's way of registering still reaches get_env
    assert get_env("echo") is Echo and get_env("echo_swift_style") is Echo


def test_an_environment_from_a_plugin_file(registry_snapshot, tmp_path):
    plugin = tmp_path / "guess_plugin.py"
    plugin.write_text(
        "from swiftlike.rollout.multi_turn.envs import Env, register_env\n\n\n"
        "@register_env('guess_number')\n"
        "class GuessNumber(Env):\n"
        "    async def reset(self, request):\n"
        "        self.secret = self.env_config['secret']\n"
        "        return 'Guess my number, 1 to 9.', {}, ''\n\n"
        "    async def step(self, action):\n"
        "        guess = action[-1]['content'].strip()\n"
        "        if guess == str(self.secret):\n"
        "            return 'Yes!', 1.0, True, {}\n"
        "        return 'Higher.' if guess < str(self.secret) else 'Lower.', 0.0, False, {}\n")
    module = load_external_plugin(plugin)
    try:
        env = get_env("guess_number")({"name": "guess_number", "secret": 7})
        assert run(env.reset(RolloutRequest([]))) == ("Guess my number, 1 to 9.", {}, "")
        assert run(env.step(reply("3")))[:3] == ("Higher.", 0.0, False)
        assert run(env.step(reply("7")))[:3] == ("Yes!", 1.0, True)
        run(env.close())
    finally:
        sys.modules.pop(module.__name__, None)


# --- through gym_scheduler and the multi-turn loop ----------------------------------------------

def test_builtin_environments_play_whole_trajectories_on_the_tiny_model(pt_tiny, tiny_template):
    """gym_scheduler finds each built-in by the row's env_config and the loop plays it to the end. The tiny model
    writes noise, so every answer is wrong or no move: math_env asks again until --max_turns (2); frozen_lake,
    whose goal on seed 0 is 5 moves away, ends after its single allowed move."""
    from swiftlike.infer.protocol import RequestConfig
    from swiftlike.rollout.multi_turn import build_scheduler, run_trajectories_sync
    scheduler = build_scheduler("gym_scheduler", max_turns=2, gym_env="math_env", template=tiny_template)
    requests = [RolloutRequest([{"role": "user", "content": "What is 6 * 7?"}], data_dict={"solution": "42"}),
                RolloutRequest([{"role": "user", "content": "<placeholder>"}],
                               data_dict={"env_config": {"name": "frozen_lake", "seed": 0, "max_steps": 1}})]
    maths, lake = run_trajectories_sync(pt_tiny, tiny_template, scheduler, requests,
                                        RequestConfig(temperature=0.0, max_tokens=6), max_turns=2,
                                        max_completion_length=64)
    assert maths.env_error is None and lake.env_error is None
    assert maths.turns == 2 and maths.step_rewards == [0.0, 0.0]
    assert [m["role"] for m in maths.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert maths.messages[0]["content"] == MATH_SYSTEM_PROMPT and maths.messages[3]["content"] == MATH_RETRY
    assert lake.turns == 1 and lake.step_rewards == [0.0]
    # each environment's info, of reset then of every step, is the trajectory's env_infos (completions.jsonl)
    assert maths.infos["env_infos"] == [{}, {"correct": False}, {"correct": False}]
    assert lake.infos["env_infos"][0] == {"seed": 0, "size": 4} and lake.infos["env_infos"][1]["step"] == 1
    assert lake.messages[:2] == [{"role": "system", "content": SYSTEM_PROMPT},
                                 {"role": "user", "content": FrozenLakeEnv({"seed": 0, "max_steps": 1}).first_observation()}]


class Unloggable(Env):
    """An info that JSON cannot write (a set) would break completions.jsonl."""

    async def reset(self, request):
        return "Say anything.", {"seen": {1, 2}}, ""

    async def step(self, action):
        return "", 0.0, True, {}


def test_an_info_json_cannot_write_drops_the_trajectory_with_the_reason(pt_tiny, tiny_template, registry_snapshot):
    from swiftlike.infer.protocol import RequestConfig
    from swiftlike.rollout.multi_turn import build_scheduler, run_trajectories_sync
    register_env("test_unloggable", Unloggable)
    scheduler = build_scheduler("gym_scheduler", max_turns=2, gym_env="test_unloggable", template=tiny_template)
    [trajectory] = run_trajectories_sync(pt_tiny, tiny_template, scheduler, [RolloutRequest([])],
                                         RequestConfig(temperature=0.0, max_tokens=4), max_turns=2,
                                         max_completion_length=16)
    assert "'test_unloggable' failed in reset" in trajectory.env_error
    assert "info must hold JSON values only" in trajectory.env_error
