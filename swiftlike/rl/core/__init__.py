"""The RL math as pure functions of tensors, below the arguments layer (imports torch and the standard library only).

advantages: group-relative advantages (GRPO, Dr. GRPO, RLOO, REINFORCE++, GDPO scaling), KL folded into the
    reward, the OPD-RL teacher term per token, and the DAPO dynamic-sampling filter.
losses: the policy loss (clip-higher, GSPO sequence ratios, CISPO, SAPO, Clip-Cov, KL-Cov), KL and the normalisers.
selection: which tokens get gradient: top-entropy tokens, Clip-Cov / KL-Cov covariance selection.
correction: training-inference mismatch metrics (KL, PPL, chi-square, ESS), rollout IS weights, OPSM.
rejection: rejection sampling on the mismatch (token / sequence / geometric, k1 / k2 / k3 rules).
sampling: vLLM's temperature / top-k / top-p distribution, to score tokens as vLLM sampled them.
chunked_logps: the unfiltered sampling log-probs from the hidden states and the head, a chunk of rows at a time.
distill: forward / reverse KL and generalized JSD (full vocabulary and top-k) for GKD.
staleness: when a generation batch is trained, how far ahead --async_generate may run, which groups are stale.
options: the typed option groups the trainers receive, with the flat flags generated from them.
"""
