"""Rewards for the online trainers.

functions: the built-in reward functions by --reward_funcs name (accuracy, format, cosine, repetition,
    soft_overlong...) and how several combine under --reward_weights.
code_exec: --reward_funcs code_exec, a completion's Python code run against the row's tests in the tool sandbox.
plugins: --external_plugins files that register more reward functions.
reward_model: --reward_model checkpoints and --reward_model_server deployments scored as rewards.
"""
from .functions import REWARD_REGISTRY, build_reward_funcs, combine_rewards, register_reward
from .code_exec import CodeExecReward  # importing it registers code_exec

__all__ = ["REWARD_REGISTRY", "CodeExecReward", "build_reward_funcs", "combine_rewards", "register_reward"]
