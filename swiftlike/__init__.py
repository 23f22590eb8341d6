"""swiftlike: fine-tune, RL post-train, evaluate and serve LLMs from one CLI and Python API.

Layer order (no lower layer imports a higher one):
cli -> arguments -> registries (model, template, dataset) -> engines / trainers -> outputs.
Heavy modules load lazily so `swiftlike --help` and argument parsing stay fast.
"""
__version__ = "0.1.0"

_LAZY = {
    "InferArguments": "swiftlike.arguments",
    "BaseArguments": "swiftlike.arguments",
    "TrainArguments": "swiftlike.arguments",
    "PtArguments": "swiftlike.arguments",
    "ExportArguments": "swiftlike.arguments",
    "sft_main": "swiftlike.train",
    "pt_main": "swiftlike.train",
    "train": "swiftlike.train",
    "export_main": "swiftlike.export",
    "merge_lora": "swiftlike.export",
    "infer_main": "swiftlike.infer.run",
    "InferRequest": "swiftlike.infer.protocol",
    "RequestConfig": "swiftlike.infer.protocol",
    "create_engine": "swiftlike.infer.engine",
    "resolve_model": "swiftlike.model",
    "get_template": "swiftlike.template",
    "load_dataset": "swiftlike.dataset",
}

__all__ = ["BaseArguments", "ExportArguments", "InferArguments", "InferRequest", "PtArguments", "RequestConfig",
           "TrainArguments", "create_engine", "export_main", "get_template", "infer_main", "load_dataset",
           "merge_lora", "pt_main", "resolve_model", "sft_main", "train"]


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'swiftlike' has no attribute {name!r}")
