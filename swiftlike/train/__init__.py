"""Training: sft and pt on transformers' Trainer and PEFT, with the run layout every trainer shares."""
from .sft import TrainResult, pt_main, sft_main, train

__all__ = ["TrainResult", "pt_main", "sft_main", "train"]
