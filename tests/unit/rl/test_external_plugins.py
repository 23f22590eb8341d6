"""`--external_plugins` files (swiftlike/rl/rewards/plugins.py) and the registries they fill: a file that fails
halfway leaves nothing behind in any registry (rewards, tools, schedulers, environments, ms-swift's plain-dict
spelling too) and puts back what it replaced; schedulers, environments and tools refuse a taken name the same way
unless asked to override."""
from __future__ import annotations

import pytest

from swiftlike.rl.rewards import plugins
from swiftlike.rl.rewards.functions import REWARD_REGISTRY
from swiftlike.rl.rewards.plugins import load_external_plugin
from swiftlike.rollout.multi_turn import Env, MultiTurnScheduler, envs, multi_turns, register_env, register_scheduler
from swiftlike.rollout.multi_turn.envs import MathEnv
from swiftlike.rollout.multi_turn.schedulers import MathTipScheduler
from swiftlike.tools import register_tool
from swiftlike.tools.builtin import TOOL_REGISTRY
from swiftlike.utils.registry import Registry, restore_registries, snapshot_registries

# Registers one of each kind, replaces two built-ins, then fails: the loader must undo all of it.
HALF_DONE = '''
from swiftlike.rl.rewards.functions import register_reward
from swiftlike.rollout.multi_turn import Env, MultiTurnScheduler, envs, register_env, register_scheduler
from swiftlike.tools import register_tool


class Echo(Env):
    async def reset(self, request):
        return "say something", {}, ""

    async def step(self, action):
        return "again", 0.0, True, {}


class Again(MultiTurnScheduler):
    def step(self, request, choice, current_turn):
        return {"infer_request": request}


def shout(word: str) -> dict:
    """The word in capitals."""
    return {"word": word.upper()}


register_reward("half_reward", lambda completions, **kw: [0.0] * len(completions))
register_tool("half_shout", shout)
register_scheduler("half_scheduler", Again)
register_env("half_env", Echo)
envs["half_env_swift_style"] = Echo
register_env("math_env", Echo, override=True)
register_scheduler("math_tip_trick", Again, override=True)
'''


@pytest.fixture
def clean_registries():
    """Whatever a test registers or loads is gone afterwards."""
    before, loaded = snapshot_registries(), dict(plugins._LOADED)
    yield
    restore_registries(before)
    plugins._LOADED.clear()
    plugins._LOADED.update(loaded)


def test_a_failed_plugin_leaves_no_registration_in_any_registry(tmp_path, clean_registries):
    tools, schedulers, environments, rewards = dict(TOOL_REGISTRY), dict(multi_turns), dict(envs), dict(REWARD_REGISTRY)
    plugin = tmp_path / "half_done.py"
    plugin.write_text(HALF_DONE + "raise ImportError('no module named sandbox_lib')\n")
    with pytest.raises(RuntimeError, match="half_done.py: importing it failed: ImportError: no module named sandbox_lib"):
        load_external_plugin(plugin)
    assert (dict(TOOL_REGISTRY), dict(multi_turns), dict(envs), dict(REWARD_REGISTRY)) == (
        tools, schedulers, environments, rewards)
    assert envs["math_env"] is MathEnv and multi_turns["math_tip_trick"] is MathTipScheduler  # put back
    # fixed, the same file loads, and everything it registers is there
    plugin.write_text(HALF_DONE)
    load_external_plugin(plugin)
    assert {"half_env", "half_env_swift_style"} <= set(envs) and "half_scheduler" in multi_turns
    assert "half_shout" in TOOL_REGISTRY and "half_reward" in REWARD_REGISTRY
    assert envs["math_env"].__name__ == "Echo" and multi_turns["math_tip_trick"].__name__ == "Again"


class Quiet(Env):
    async def reset(self, request):
        return "", {}, ""

    async def step(self, action):
        return "", 0.0, True, {}


class Patient(MultiTurnScheduler):
    def step(self, request, choice, current_turn):
        return {"infer_request": request}


def answer(question: str) -> dict:
    """Always 42."""
    return {"answer": 42}


@pytest.mark.parametrize("register, registry, builtin, mine", [
    (register_env, envs, "math_env", Quiet),
    (register_scheduler, multi_turns, "math_tip_trick", Patient),
], ids=["register_env", "register_scheduler"])
def test_a_taken_name_is_refused_unless_overridden(register, registry, builtin, mine, clean_registries):
    original = registry[builtin]
    with pytest.raises(ValueError, match=f"'{builtin}' is already registered \\(.*multi_turn/.*\\.py\\); register "
                                         "yours under another name, or pass override=True"):
        register(builtin, mine)
    assert registry[builtin] is original
    assert register(builtin, original) is original  # the same class again: nothing to refuse
    assert register(builtin, mine, override=True) is mine and registry[builtin] is mine
    assert register("my_" + builtin, override=True)(mine) is mine  # the decorator form takes it too
    with pytest.raises(ValueError, match="already registered"):
        register("my_" + builtin)(original)


def test_a_taken_tool_name_is_refused_unless_overridden(clean_registries):
    builtin = TOOL_REGISTRY["calculator"]
    with pytest.raises(ValueError, match="tool 'calculator' is already registered \\(.*tools/builtin.py\\).*"
                                         "override=True"):
        register_tool("calculator", answer)
    assert TOOL_REGISTRY["calculator"] is builtin
    register_tool("calculator", answer, override=True)
    assert TOOL_REGISTRY["calculator"].function is answer


def test_restore_puts_back_added_and_replaced_names_and_leaves_new_registries_alone():
    kept = Registry("thing", "--thing")
    kept.register("a", 1)
    snapshot = snapshot_registries()
    kept.register("b", 2)
    kept.register("a", 3, override=True)
    newer = Registry("other", "--other")
    newer.register("x", 1)
    restore_registries(snapshot)
    assert dict(kept) == {"a": 1} and dict(newer) == {"x": 1}
