"""Rewards for the online trainers.

functions: the built-in reward functions by --reward_funcs name (accuracy, format, cosine, repetition,
    soft_overlong...), how several combine under --reward_weights, and the MISSING / FAILED marks of a completion
    without a valid reward.
code_exec: --reward_funcs code_exec, a completion's Python code run against the row's tests in the tool sandbox.
judge: --reward_funcs llm_judge, a generative judge served over the OpenAI API, and the base class of judge plugins.
plugins: --external_plugins files that register more reward functions and judges.
prm: --prm_model process reward models (swiftlike sample): plugins and token-classification checkpoints.
reward_model: --reward_model checkpoints and --reward_model_server deployments scored as rewards.
"""
from .functions import (FAILED, MISSING, REWARD_REGISTRY, ScoredRewards, build_reward_funcs, combine_rewards,
                        register_reward)
from .code_exec import CodeExecReward  # importing it registers code_exec
from .judge import LlmJudge, register_judge  # importing it registers llm_judge
from .prm import PRM_REGISTRY, register_prm

__all__ = ["FAILED", "MISSING", "REWARD_REGISTRY", "CodeExecReward", "LlmJudge", "PRM_REGISTRY", "ScoredRewards",
           "build_reward_funcs", "combine_rewards", "register_judge", "register_prm", "register_reward"]
