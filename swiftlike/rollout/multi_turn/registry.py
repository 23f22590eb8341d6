"""Schedulers by name (`--multi_turn_scheduler`): ms-swift's `multi_turns` dict, the built-ins registered in it,
and `register_scheduler` for `--external_plugins` files.

A plugin file registers its own scheduler at import time:

    from swiftlike.rollout.multi_turn.registry import register_scheduler
    from swiftlike.rollout.multi_turn.scheduler import MultiTurnScheduler

    @register_scheduler("my_scheduler")
    class MyScheduler(MultiTurnScheduler):
        def step(self, request, choice, current_turn):
            request.messages.append({"role": "user", "content": "Are you sure?"})
            return {"infer_request": request}

ms-swift's own spelling, `multi_turns["my_scheduler"] = MyScheduler`, works too.
"""
from __future__ import annotations

import inspect

from ...template import Template
from ...utils.registry import Registry, source_of
from .scheduler import MultiTurnScheduler
from .schedulers import GymScheduler, MathTipScheduler, ToolCallScheduler

multi_turns: Registry[type[MultiTurnScheduler]] = Registry("multi-turn scheduler", "--multi_turn_scheduler")


def register_scheduler(name: str, cls: type[MultiTurnScheduler] | None = None, override: bool = False):
    """Register a scheduler class as `name`; without `cls`, a class decorator. A name registered to another
    class (a built-in too) is refused unless `override=True`; registering the same class again does nothing."""
    if cls is None:
        return lambda c: register_scheduler(name, c, override)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a scheduler name must be a non-empty string, got {name!r}")
    if not (inspect.isclass(cls) and issubclass(cls, MultiTurnScheduler)):
        raise ValueError(f"scheduler {name!r} must be a subclass of "
                         f"swiftlike.rollout.multi_turn.scheduler.MultiTurnScheduler, got {cls!r}")
    return multi_turns.register(name, cls, override, origin=source_of)


def build_scheduler(name: str, *, max_turns: int | None, gym_env: str | None, template: Template,
                    **kwargs) -> MultiTurnScheduler:
    """The scheduler registered as `name`, built for `template`; `kwargs` go to its constructor."""
    if name not in multi_turns:
        raise ValueError(f"unknown --multi_turn_scheduler {name!r}; registered: {', '.join(sorted(multi_turns))}. "
                         "A plugin registers its own with register_scheduler(name) "
                         "(swiftlike.rollout.multi_turn.registry) in a file passed to --external_plugins")
    if max_turns is not None and max_turns < 1:
        raise ValueError(f"--max_turns must be >= 1 (or unset for no limit), got {max_turns}")
    return multi_turns[name](template, max_turns=max_turns, gym_env=gym_env, **kwargs)


register_scheduler("tool_call_scheduler", ToolCallScheduler)
register_scheduler("math_tip_trick", MathTipScheduler)
register_scheduler("gym_scheduler", GymScheduler)
