"""The offline preference family on TRL (DPO and its losses, KTO, CPO, ORPO, SimPO, reward-model training).

data: preference rows encoded with our templates (chosen / rejected pairs, KTO's KL completions).
trainers: TRL's trainers, each subclassed only to take those encoded rows.
recipe: the trainer for each --rlhf_type, its config from our flags, and the run (`train_preference`).
"""
