"""The offline preference family on TRL (DPO and its losses, KTO, CPO, ORPO, SimPO, reward-model training).

data: preference rows encoded with our templates (chosen / rejected pairs, KTO's KL completions).
recipe: the TRL trainer for each --rlhf_type, its config from our flags, and the run (`train_preference`).
"""
