"""Trainers that generate while they train: the GRPO family and GKD / on-policy distillation.

online_trainer: the transformers-Trainer base both share (policy loading, the rollout worker, weight syncs).
rollout_worker: generation through a colocated engine or rollout servers, and weight sync to them.
grpo_trainer / grpo_batch: the GRPO-family loss step and how a generation batch becomes training inputs.
trajectories: multi-turn trajectories in the trainer: dropped on an environment error, metrics, completions.jsonl.
prefetch: the lookahead batches and buffer behind --async_generate.
gkd_trainer / teacher: the distillation step and its teacher (local, served, or top-k logits).
memory: colocated sleep / wake of the engine; distributed: rank-0 generation shared across ranks.
grpo_recipe / gkd_recipe: assembling a run from the arguments (`train_grpo`, `train_gkd`).
"""
