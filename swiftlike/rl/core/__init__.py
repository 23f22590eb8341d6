"""The RL math as pure functions of tensors, below the arguments layer (imports torch and the standard library only).

advantages: group-relative advantages (GRPO, Dr. GRPO, RLOO) and the DAPO dynamic-sampling filter.
losses: the clipped policy loss (clip-higher, GSPO sequence ratios, CISPO), KL and the loss-type normalisers.
correction: training-inference mismatch metrics (KL, PPL, chi-square, ESS), rollout IS weights, OPSM.
sampling: vLLM's temperature / top-k / top-p distribution, to score tokens as vLLM sampled them.
distill: forward / reverse KL and generalized JSD (full vocabulary and top-k) for GKD.
staleness: when a generation batch is trained, how far ahead --async_generate may run, which groups are stale.
"""
