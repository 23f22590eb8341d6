"""Reinforcement learning and preference training for `swiftlike rlhf`, in four sub-packages by kind.

core: the pure math (advantages, policy losses, training-inference correction, vLLM's sampling
    distribution, distillation divergences, the staleness rule), torch and the standard library only, so the
    arguments layer below the trainers can take its constants from there.
rewards: reward functions by name (--reward_funcs), user plugin files (--external_plugins), reward models,
    generative judges.
online: the trainers that generate while they train (GRPO family, GKD), their rollout worker, the
    online-trainer base they share, prefetching for --async_generate, teachers, and the recipes that
    assemble a run.
preference: the DPO family, KTO, CPO/ORPO/SimPO and reward-model training on TRL: data and recipe.

Nothing is re-exported here: importing `swiftlike.rl.core` must not load the trainers.
"""
