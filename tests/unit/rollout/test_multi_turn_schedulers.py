"""The built-in schedulers once each, bad tool calls and failing environments as the model and the run see them,
the length limits and max_turns through the real loop on the tiny model (pt engine), and the scheduler registry.
Messages, tool counts and trained ids agree however a call turn ends; every run has a finite bound (the model's
context when nothing else bounds it), and a configuration with none is refused."""
import asyncio
import dataclasses
import json
import threading
import pytest
from trajectories import VERSION, drive, engine_answer

from swiftlike.dataset import load_dataset
from swiftlike.infer.engine.pt_engine import PtEngine
from swiftlike.infer.protocol import RequestConfig
from swiftlike.rollout.multi_turn.scheduler import TrajectoryRun, context_length, tool_turn_ids
from swiftlike.rollout.multi_turn.schedulers import ToolCallScheduler
from swiftlike.rollout.multi_turn import (Env, MultiTurnScheduler, RolloutRequest, build_scheduler, envs, multi_turns,
                                          register_env, register_scheduler, run_trajectories_sync)
from swiftlike.rl.rewards.plugins import load_external_plugin
from swiftlike.template import get_template
from swiftlike.tools import TOOL_REGISTRY
from swiftlike.tools.sandbox import ToolLimits

CONFIG = RequestConfig(temperature=1.0, seed=0)


PLUGIN = '''
import time

from swiftlike.tools import register_tool


def explode() -> dict:
    raise RuntimeError("the tool broke")


def sleep_long() -> dict:
    time.sleep(3)
    return {"slept": True}


def give_bytes() -> bytes:
    return b"raw"


for function in (explode, sleep_long, give_bytes):
    register_tool(function.__name__, function)
'''


@pytest.fixture(scope="module")
def odd_tools(tmp_path_factory):
    """Tools that raise, hang and answer with bytes, registered by a plugin file as a user's would be."""
    path = tmp_path_factory.mktemp("plugins") / "odd_tools.py"
    path.write_text(PLUGIN)
    before = set(TOOL_REGISTRY)
    load_external_plugin(path)
    added = sorted(set(TOOL_REGISTRY) - before)
    yield [TOOL_REGISTRY[name].schema() for name in ["calculator", *added]]
    for name in added:
        del TOOL_REGISTRY[name]


def hermes_call(name, arguments):
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


def test_bad_calls_become_observations_and_the_trajectory_goes_on(tiny_template, odd_tools):
    scheduler = build_scheduler("tool_call_scheduler", max_turns=None, gym_env=None, template=tiny_template,
                                tool_limits=ToolLimits(timeout_s=1.0))
    first = "\n".join(["<tool_call>\n{not json}\n</tool_call>", hermes_call("weather", {"city": "Paris"}),
                       hermes_call("explode", {}), hermes_call("sleep_long", {}), hermes_call("give_bytes", {}),
                       hermes_call("calculator", {"expression": "6 * 7"})]) + "<|im_end|>"
    request = RolloutRequest(messages=[{"role": "user", "content": "What is 6 * 7?"}], tools=odd_tools)
    trajectory, _ = asyncio.run(drive(tiny_template, scheduler, request, [first, "I could not.<|im_end|>"]))
    assert trajectory.turns == 2 and trajectory.tool_calls == 6 and trajectory.tool_errors == 5
    results = [json.loads(m["content"]) for m in trajectory.messages if m["role"] == "tool"]
    assert "did not parse" in results[0]["error"]
    assert "'weather' is not offered" in results[1]["error"]
    assert "raised RuntimeError: the tool broke" in results[2]["error"]
    assert "timed out" in results[3]["error"]
    assert "bytes" in results[4]["error"]
    assert results[5] == {"result": 42}
    assert trajectory.messages[-1] == {"role": "assistant", "content": "I could not."}


def test_math_tip_trick_cuts_a_wrong_answer_and_continues_after_the_tip(tiny_template):
    """ms-swift's semantics: the wrong answer is cut before </think>, the tip follows (no loss), once."""
    scheduler = build_scheduler("math_tip_trick", max_turns=None, gym_env=None, template=tiny_template)
    first = "<think>\n2 + 2 = 5\n</think>\n<answer>5</answer><|im_end|>"
    second = " 2 + 2 = 4.\n</think>\n<answer>4</answer><|im_end|>"
    request = RolloutRequest(messages=[{"role": "user", "content": "2 + 2?"}], data_dict={"solution": "4"})
    trajectory, choices = asyncio.run(drive(tiny_template, scheduler, request, [first, second]))
    tokenizer = tiny_template.tokenizer
    kept = choices[0].token_ids[:len(tokenizer("<think>\n2 + 2 = 5\n", add_special_tokens=False)["input_ids"])]
    assert tokenizer.decode(kept) == "<think>\n2 + 2 = 5\n"
    tip = tokenizer(scheduler.tips_prompt, add_special_tokens=False)["input_ids"]
    assert trajectory.completion_ids == kept + tip + choices[1].token_ids
    assert trajectory.loss_mask == [1] * len(kept) + [0] * len(tip) + [1] * len(choices[1].token_ids)
    assert trajectory.messages[-1]["content"] == "<think>\n2 + 2 = 5\n" + scheduler.tips_prompt + second[:-10]
    assert trajectory.turns == 2
    right, _ = asyncio.run(drive(tiny_template, scheduler, RolloutRequest(
        messages=[{"role": "user", "content": "2 + 2?"}], data_dict={"solution": "4"}), ["<answer>4</answer><|im_end|>"]))
    assert right.turns == 1 and right.loss_mask == [1] * len(right.completion_ids)
    # an empty first answer keeps no sampled id: the tip takes that turn's version
    empty, _ = asyncio.run(drive(tiny_template, scheduler, RolloutRequest(
        messages=[{"role": "user", "content": "2 + 2?"}], data_dict={"solution": "4"}), ["<|im_end|>", "4<|im_end|>"]))
    assert empty.loss_mask[:len(tip)] == [0] * len(tip) and empty.turns == 2
    assert empty.version_spans == [(VERSION, len(empty.completion_ids))]


class CountingEnv(Env):
    """Counts to three; `explode_in` names the method that raises (a broken environment)."""
    opened: list = []

    def __init__(self, env_config):
        super().__init__(env_config)
        self.explode_in = env_config.get("explode_in")
        self.steps = 0
        self.closed = False
        CountingEnv.opened.append(self)

    async def reset(self, request):
        if self.explode_in == "reset":
            raise ConnectionError("no game server")
        return "Say 1.", {}, ""

    async def step(self, action):
        self.steps += 1
        if self.explode_in == "step" and self.steps == 2:
            raise KeyError("board")
        return f"Say {self.steps + 1}.", 0.5, self.steps == 3, {}

    async def close(self):
        self.closed = True


class AskAgain(MultiTurnScheduler):
    """A plugin-style scheduler that always asks for another turn (only max_turns ends it), even after a turn
    cut by its token limit, to exercise the length limits over several turns."""

    def check_finished(self, request, choice, current_turn):
        return bool(self.max_turns) and current_turn >= self.max_turns

    def step(self, request, choice, current_turn):
        request.messages.append({"role": "user", "content": f"Go on ({current_turn})."})
        return {"infer_request": request}


@pytest.fixture
def counting_env():
    CountingEnv.opened = []
    register_env("test_count", CountingEnv)
    yield "test_count"
    del envs["test_count"]


def test_gym_scheduler_on_the_engine_a_raising_env_drops_only_its_trajectory(pt_tiny, tiny_template, counting_env):
    scheduler = build_scheduler("gym_scheduler", max_turns=None, gym_env=counting_env, template=tiny_template)
    rows = [{}, {"env_config": {"name": "test_count", "explode_in": "step"}}, {"env_config": {"explode_in": "reset"}}]
    requests = [RolloutRequest(messages=[{"role": "user", "content": "?"}], data_dict=row) for row in rows]
    good, broken, unborn = run_trajectories_sync(pt_tiny, tiny_template, scheduler, requests, CONFIG, max_turns=None,
                                                 max_completion_length=4)
    assert good.env_error is None and good.turns == 3 and good.step_rewards == [0.5, 0.5, 0.5]
    assert good.messages[0] == {"role": "user", "content": "Say 1."} and good.messages[-2]["content"] == "Say 3."
    assert "'test_count' failed in step 2: KeyError" in broken.env_error and broken.turns == 2
    assert "failed in reset: ConnectionError: no game server" in unborn.env_error and unborn.turns == 0
    assert all(env.closed for env in CountingEnv.opened) and len(CountingEnv.opened) == 3
    for trajectory in (good, broken):
        assert len(trajectory.completion_ids) == len(trajectory.loss_mask) == len(trajectory.logprobs)


def sampled_runs(trajectory):
    runs, current = [], []
    for tid, m in zip(trajectory.completion_ids, trajectory.loss_mask):
        if m:
            current.append(tid)
        elif current:
            runs.append(current)
            current = []
    return runs + ([current] if current else [])


def test_per_round_limit_caps_each_turn_and_max_turns_holds(pt_tiny, tiny_template):
    scheduler = AskAgain(tiny_template, max_turns=3)
    requests = [RolloutRequest(messages=[{"role": "user", "content": "Talk."}]) for _ in range(2)]
    for trajectory in run_trajectories_sync(pt_tiny, tiny_template, scheduler, requests, CONFIG, max_turns=3,
                                            max_completion_length=5, limit_scope="per_round"):
        runs = sampled_runs(trajectory)
        assert trajectory.turns == 3 and len(runs) == 3 and all(len(run) <= 5 for run in runs)
        assert trajectory.truncated == (trajectory.finish_reason == "length")
        # a turn cut by the limit is closed with the end-of-turn token before the next user turn
        first_gap = trajectory.completion_ids[len(runs[0]):trajectory.loss_mask.index(1, len(runs[0]))]
        closed = "" if runs[0][-1] in tiny_template.stop_token_ids else "<|im_end|>"
        assert tiny_template.tokenizer.decode(first_gap) == closed + tiny_template.render_user_turn("Go on (1).")


def test_total_limit_caps_every_completion_id_and_marks_truncated(tiny_template):
    """Each turn samples what is left of the total; inserted ids that leave no room for a turn end it."""
    tokenizer = tiny_template.tokenizer
    answer = "One two three four five six.<|im_end|>"
    turn = len(tokenizer(answer, add_special_tokens=False)["input_ids"])
    between = len(tiny_template.encode_user_turn("Go on (1)."))
    request = RolloutRequest(messages=[{"role": "user", "content": "Talk."}])
    # room for two turns and the user turn between them, and a third turn cut short
    limit = 2 * turn + 2 * between + 3
    trajectory, choices = asyncio.run(drive(tiny_template, AskAgain(tiny_template), request, [answer] * 5,
                                            max_completion_length=limit, limit_scope="total"))
    assert len(trajectory.completion_ids) == limit and trajectory.truncated and trajectory.turns == 3
    assert [len(run) for run in sampled_runs(trajectory)] == [turn, turn, 3]
    assert trajectory.finish_reason == "length" and trajectory.loss_mask[-1] == 1
    # a limit that the inserted user turn would reach: the trajectory ends after the first turn, nothing inserted
    trajectory, _ = asyncio.run(drive(tiny_template, AskAgain(tiny_template), RolloutRequest(
        messages=[{"role": "user", "content": "Talk."}]), [answer] * 3, max_completion_length=turn + between,
        limit_scope="total"))
    assert trajectory.loss_mask == [1] * turn and trajectory.truncated and trajectory.finish_reason == "stop"
    assert trajectory.messages[-1] == {"role": "assistant", "content": "One two three four five six."}
    # the engine's context length bounds prompt + completion the same way, whatever the scope
    prompt = len(tiny_template.encode_prompt([{"role": "user", "content": "Talk."}]))
    trajectory, _ = asyncio.run(drive(tiny_template, AskAgain(tiny_template), RolloutRequest(
        messages=[{"role": "user", "content": "Talk."}]), [answer] * 5, max_model_len=prompt + limit))
    assert len(trajectory.prompt_ids) + len(trajectory.completion_ids) == prompt + limit and trajectory.truncated
    assert [len(run) for run in sampled_runs(trajectory)] == [turn, turn, 3]
    # per round, the same answers are never cut
    trajectory, _ = asyncio.run(drive(tiny_template, AskAgain(tiny_template, max_turns=3), RolloutRequest(
        messages=[{"role": "user", "content": "Talk."}]), [answer] * 5, max_completion_length=turn))
    assert [len(run) for run in sampled_runs(trajectory)] == [turn] * 3 and not trajectory.truncated


@pytest.mark.parametrize("agent", ["hermes", "react_en", "qwen_en"])
def test_tool_call_scheduler_runs_the_calculator_task_rows(pt_tiny, tiny_template, agent):
    """Rows of swiftlike/calculator-agent-test (a tools column) through the real loop: the random model makes no
    call, so each trajectory is one turn, prompted with the row's tools."""
    template = get_template("qwen2_5", tiny_template.tokenizer, agent_template=agent)
    scheduler = build_scheduler("tool_call_scheduler", max_turns=4, gym_env=None, template=template)
    assert scheduler.stop_words == template.tool_parser.stop_words
    rows = load_dataset(["swiftlike/calculator-agent-test#2"])
    requests = [RolloutRequest(messages=row["messages"], tools=row["tools"], data_dict={"solution": row["solution"]})
                for row in rows]
    for trajectory in run_trajectories_sync(pt_tiny, template, scheduler, requests, CONFIG, max_turns=4,
                                            max_completion_length=6):
        assert trajectory.turns == 1 and trajectory.tool_calls == 0
        assert "calculator" in template.tokenizer.decode(trajectory.prompt_ids)


def test_registry_names_and_errors(tiny_template):
    assert {"tool_call_scheduler", "math_tip_trick", "gym_scheduler"} <= set(multi_turns)
    with pytest.raises(ValueError, match=r"unknown --multi_turn_scheduler 'nope'; registered: gym_scheduler, "
                                         r"math_tip_trick, tool_call_scheduler.*register_scheduler.*--external_plugins"):
        build_scheduler("nope", max_turns=None, gym_env=None, template=tiny_template)

    @register_scheduler("test_ask_again")
    class Registered(AskAgain):
        pass
    try:
        built = build_scheduler("test_ask_again", max_turns=2, gym_env=None, template=tiny_template)
        assert isinstance(built, Registered) and built.max_turns == 2
        with pytest.raises(ValueError, match="already registered"):
            register_scheduler("test_ask_again", AskAgain)
    finally:
        del multi_turns["test_ask_again"]
    with pytest.raises(ValueError, match="must be a subclass of"):
        register_scheduler("not_a_scheduler", dict)
    with pytest.raises(ValueError, match="has none; pass --agent_template"):
        build_scheduler("tool_call_scheduler", max_turns=None, gym_env=None,
                        template=get_template("chatml", tiny_template.tokenizer))


def test_a_step_that_rewrites_sampled_ids_is_refused(tiny_template):
    class Forger(MultiTurnScheduler):
        def check_finished(self, request, choice, current_turn):
            return False

        def step(self, request, choice, current_turn):
            return {"infer_request": request, "response_token_ids": [5, *choice.token_ids],
                    "response_loss_mask": [1] * (len(choice.token_ids) + 1)}
    request = RolloutRequest(messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="not a prefix of the ids the engine sampled"):
        asyncio.run(drive(tiny_template, Forger(tiny_template), request, ["Hello.<|im_end|>"]))


def test_versions_follow_the_tokens_they_sampled(tiny_template):
    """A turn continued across a weight update keeps its per-token versions; inserted ids take the version of the
    turn before them; the next turn reports its own."""
    first = engine_answer(tiny_template, "Hello there, friend.<|im_end|>")
    first.version_spans = [(3, 2), (4, len(first.token_ids) - 2)]
    second = engine_answer(tiny_template, "Bye.<|im_end|>")

    async def play():
        run = TrajectoryRun(RolloutRequest(messages=[{"role": "user", "content": "Hi"}]), tiny_template,
                            AskAgain(tiny_template, max_turns=2), max_turns=2, max_completion_length=64)
        await run.start()
        await run.after_turn(first, policy_version=3)
        await run.after_turn(second, policy_version=5)
        return run.trajectory()
    trajectory = asyncio.run(play())
    inserted = len(tiny_template.encode_user_turn("Go on (1)."))
    assert trajectory.version_spans == [(3, 2), (4, len(first.token_ids) - 2 + inserted), (5, len(second.token_ids))]
    assert sum(n for _, n in trajectory.version_spans) == len(trajectory.completion_ids)
    assert trajectory.infos["num_turns"] == 2


def test_a_blocking_sync_step_does_not_stop_the_other_trajectories(tiny_template):
    """ms-swift's plugins write `step` sync; one that blocks must leave the event loop to the other trajectories.
    Both steps wait at one barrier: run on the loop, the first would wait alone and the barrier break."""
    barrier = threading.Barrier(2, timeout=20)

    class Blocking(AskAgain):
        def step(self, request, choice, current_turn):
            barrier.wait()
            return super().step(request, choice, current_turn)

    async def two_at_once():
        scheduler = Blocking(tiny_template, max_turns=2)
        requests = [RolloutRequest(messages=[{"role": "user", "content": f"Hi {i}"}]) for i in range(2)]
        return await asyncio.gather(*(drive(tiny_template, scheduler, request, ["Hello.<|im_end|>", "Bye.<|im_end|>"])
                                      for request in requests))
    done = asyncio.run(two_at_once())
    assert [trajectory.turns for trajectory, _ in done] == [2, 2]
    assert not barrier.broken


class CountingToolScheduler(ToolCallScheduler):
    """tool_call_scheduler, counting the tools it runs (each still runs in the sandbox)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ran = []

    async def run_tool(self, name, arguments):
        self.ran.append(name)
        return await super().run_tool(name, arguments)


def assert_agrees(trajectory, template):
    """Messages, counts and trained ids tell one story: every call listed in an assistant message is answered by one
    tool message, `tool_calls` counts them, `tool_errors` the error results, and every tool result and nothing else
    was inserted as ids after its call turn."""
    messages = trajectory.messages
    listed = sum(len(m.get("tool_calls") or []) for m in messages)
    results = [m for m in messages if m["role"] == "tool"]
    assert listed == len(results) == trajectory.tool_calls
    for i, message in enumerate(messages):
        if message.get("tool_calls"):
            following = messages[i + 1:i + 1 + len(message["tool_calls"])]
            assert [m["role"] for m in following] == ["tool"] * len(message["tool_calls"])
    assert trajectory.tool_errors == sum("error" in json.loads(m["content"]) for m in results)
    inserted = [tid for tid, m in zip(trajectory.completion_ids, trajectory.loss_mask) if not m]
    expected = []
    for i, message in enumerate(messages):
        if message.get("tool_calls"):
            answers = [m["content"] for m in messages[i + 1:i + 1 + len(message["tool_calls"])]]
            expected += tool_turn_ids(template, answers)
        elif message["role"] == "user" and i > 0 and messages[i - 1]["role"] == "assistant":
            expected += template.encode_user_turn(message["content"])
    assert inserted == expected


CALL = hermes_call("calculator", {"expression": "6 * 7"})


def tool_request(tools):
    return RolloutRequest(messages=[{"role": "user", "content": "What is 6 * 7?"}], tools=tools)


def test_a_call_turn_that_ends_on_another_token_runs_and_counts_nothing(tiny_template, odd_tools):
    """The engine stopped the call turn on something other than <|im_end|> (an end-of-document token such as Qwen's
    <|endoftext|>, which the tiny tokenizer lacks, or a stop word): the turn cannot be continued as the template
    writes a call turn, so the trajectory ends there, no tool runs and no call is counted."""
    scheduler = CountingToolScheduler(tiny_template)
    trajectory, choices = asyncio.run(drive(tiny_template, scheduler, tool_request(odd_tools),
                                            [CALL, "Never sampled.<|im_end|>"]))
    assert choices[0].finish_reason == "stop"
    assert scheduler.ran == [] and (trajectory.tool_calls, trajectory.tool_errors, trajectory.turns) == (0, 0, 1)
    assert trajectory.messages == [{"role": "user", "content": "What is 6 * 7?"},
                                   {"role": "assistant", "content": CALL}]
    assert trajectory.completion_ids == list(choices[0].token_ids) and set(trajectory.loss_mask) == {1}
    assert_agrees(trajectory, tiny_template)


def test_a_result_that_does_not_fit_the_total_is_not_kept_nor_counted_and_no_room_runs_nothing(tiny_template,
                                                                                                odd_tools):
    turn = CALL + "<|im_end|>"
    sampled = len(tiny_template.tokenizer(turn, add_special_tokens=False)["input_ids"])
    empty = len(tool_turn_ids(tiny_template, [""]))
    result = len(tool_turn_ids(tiny_template, ['{"result": 42}']))
    # room for the results turn with an empty result, not for the real one: the tool runs, its result is dropped
    scheduler = CountingToolScheduler(tiny_template)
    trajectory, choices = asyncio.run(drive(tiny_template, scheduler, tool_request(odd_tools), [turn, "42<|im_end|>"],
                                            max_completion_length=sampled + empty + 2, limit_scope="total"))
    assert sampled + empty + 2 <= sampled + result  # the real result would leave no room for another token
    assert scheduler.ran == ["calculator"] and (trajectory.tool_calls, trajectory.tool_errors) == (0, 0)
    assert trajectory.truncated and trajectory.turns == 1 and [m["role"] for m in trajectory.messages] == [
        "user", "assistant"]
    assert trajectory.completion_ids == list(choices[0].token_ids)
    assert_agrees(trajectory, tiny_template)
    # no room even for an empty result: the tool is not run at all
    scheduler = CountingToolScheduler(tiny_template)
    trajectory, _ = asyncio.run(drive(tiny_template, scheduler, tool_request(odd_tools), [turn, "42<|im_end|>"],
                                      max_completion_length=sampled + empty, limit_scope="total"))
    assert scheduler.ran == [] and trajectory.tool_calls == 0 and trajectory.truncated
    assert_agrees(trajectory, tiny_template)
    # and with room for the result, it is kept, counted and inserted
    scheduler = CountingToolScheduler(tiny_template)
    trajectory, _ = asyncio.run(drive(tiny_template, scheduler, tool_request(odd_tools), [turn, "42<|im_end|>"],
                                      max_completion_length=sampled + result + 8, limit_scope="total"))
    assert scheduler.ran == ["calculator"] and trajectory.tool_calls == 1 and trajectory.turns == 2
    assert_agrees(trajectory, tiny_template)


def test_a_valid_and_a_malformed_call_list_two_calls_answered_by_two_results(tiny_template, odd_tools):
    scheduler = CountingToolScheduler(tiny_template)
    bad = "<tool_call>\n{not json}\n</tool_call>"
    trajectory, _ = asyncio.run(drive(tiny_template, scheduler, tool_request(odd_tools),
                                      [f"Let me compute.\n{CALL}\n{bad}<|im_end|>", "It is 42.<|im_end|>"]))
    assert scheduler.ran == ["calculator"] and (trajectory.tool_calls, trajectory.tool_errors) == (2, 1)
    call_turn = trajectory.messages[1]
    assert call_turn["content"] == "Let me compute."
    assert call_turn["tool_calls"][0] == {"type": "function", "function": {"name": "calculator",
                                                                          "arguments": {"expression": "6 * 7"}}}
    assert call_turn["tool_calls"][1]["function"] == {"name": "", "arguments": {}}
    assert call_turn["tool_calls"][1]["text"] == bad and call_turn["tool_calls"][1]["error"]
    assert [json.loads(m["content"]) for m in trajectory.messages[2:4]][0] == {"result": 42}
    assert "did not parse" in json.loads(trajectory.messages[3]["content"])["error"]
    assert_agrees(trajectory, tiny_template)


class NeverDone(MultiTurnScheduler):
    """A model that never stops: every turn gets a long observation and another turn, as a tool loop would."""

    def check_finished(self, request, choice, current_turn):
        return False

    def step(self, request, choice, current_turn):
        request.messages.append({"role": "user", "content": "again " * 200})
        return {"infer_request": request}


@pytest.mark.timeout(300)
def test_a_loop_that_never_ends_is_bounded_by_the_models_context(pt_tiny, tiny_template):
    """pt sets no max_model_len, and --max_turns unset with per_round caps nothing in total: the model's own
    context (config.json's max_position_embeddings, 4096 for the tiny model) ends the trajectory."""
    assert pt_tiny.max_model_len is None and context_length(pt_tiny) == 4096
    trajectory, = run_trajectories_sync(pt_tiny, tiny_template, NeverDone(tiny_template),
                                        [RolloutRequest(messages=[{"role": "user", "content": "Talk."}])],
                                        CONFIG, max_turns=None, max_completion_length=4, limit_scope="per_round")
    assert trajectory.truncated and 1 < trajectory.turns < 40
    assert len(trajectory.prompt_ids) + len(trajectory.completion_ids) < 4096


def test_a_configuration_with_no_bound_is_refused_by_name(pt_tiny, tiny_resolved, tiny_template, tmp_path):
    """An engine that knows no context length (its config.json has none) with --max_turns unset and a per-round
    limit: refused before anything is generated, naming the flags that bound it."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    blind = PtEngine(dataclasses.replace(tiny_resolved, model_dir=tmp_path), tiny_template, model=pt_tiny.model)
    assert context_length(blind) is None
    request = RolloutRequest(messages=[{"role": "user", "content": "Talk."}])
    with pytest.raises(ValueError, match=r"nothing bounds a multi-turn trajectory.*--max_turns N, or "
                                         r"--completion_length_limit_scope total, or --vllm_max_model_len"):
        run_trajectories_sync(blind, tiny_template, NeverDone(tiny_template), [request], CONFIG, max_turns=None,
                              max_completion_length=4)
    two_turns, = run_trajectories_sync(blind, tiny_template, NeverDone(tiny_template), [request], CONFIG,
                                       max_turns=2, max_completion_length=4)
    assert two_turns.turns == 2
    in_total, = run_trajectories_sync(blind, tiny_template, NeverDone(tiny_template),
                                      [RolloutRequest(messages=[{"role": "user", "content": "Talk."}])], CONFIG,
                                      max_turns=None, max_completion_length=40, limit_scope="total")
    assert in_total.truncated and len(in_total.completion_ids) <= 40
