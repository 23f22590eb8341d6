"""Multi-turn rollouts: a trajectory of several sampled turns with tool results or environment observations
between them, trained on exactly the token ids the engine sampled.

It sits with the trainers and servers because both run it: the RL rollout worker (colocated engine) and the
`swiftlike rollout` server (where ms-swift runs its schedulers). It drives any InferEngine through the engine
interface, so the same schedulers and environments serve every placement.

Modules: trajectory.py (RolloutRequest, Trajectory), scheduler.py (the hooks and the loop: run_trajectories,
run_trajectories_sync), schedulers.py (tool_call_scheduler, math_tip_trick, gym_scheduler), registry.py
(multi_turns, register_scheduler, build_scheduler), envs.py (the environment interface, ms-swift's Env: async
reset / step / close; the `envs` registry with register_env / get_env; the built-in `math_env`), frozen_lake.py
(FrozenLake as a text game, the built-in `frozen_lake`), adapters.py (environments from other libraries behind
Env: reasoning-gym's tasks as `reasoning_gym`), verifiers_env.py (verifiers environments as `verifiers`, played in
their own virtualenv by verifiers_bridge.py).
"""
# The built-in environments register themselves when imported; importing them here makes all of them known to
# get_env as soon as anything in the package is imported.
from .adapters import ReasoningGymEnv
from .envs import Env, envs, get_env, register_env
from .frozen_lake import FrozenLakeEnv
from .registry import build_scheduler, multi_turns, register_scheduler
from .scheduler import MultiTurnScheduler, run_trajectories, run_trajectories_sync
from .trajectory import RolloutRequest, Trajectory
from .verifiers_env import VerifiersEnv

__all__ = ["Env", "FrozenLakeEnv", "MultiTurnScheduler", "ReasoningGymEnv", "RolloutRequest", "Trajectory",
           "VerifiersEnv", "build_scheduler", "envs", "get_env", "multi_turns", "register_env", "register_scheduler",
           "run_trajectories", "run_trajectories_sync"]
