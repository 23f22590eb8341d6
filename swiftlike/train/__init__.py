"""Training: sft and pt on transformers' Trainer and PEFT, with the run layout every trainer shares."""
from .sft import TrainResult, train

__all__ = ["TrainResult", "train"]
