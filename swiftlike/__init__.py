"""swiftlike: fine-tune, RL post-train, evaluate and serve LLMs from one CLI and Python API.

Layer order (no lower layer imports a higher one):
cli -> arguments -> registries (model, template, dataset) -> engines / trainers -> outputs.
Heavy modules load lazily so `swiftlike --help` and argument parsing stay fast.
"""
__version__ = "0.1.0"

_LAZY = {
    "InferArguments": "swiftlike.arguments",
    "BaseArguments": "swiftlike.arguments",
    "infer_main": "swiftlike.infer.run",
    "InferRequest": "swiftlike.infer.protocol",
    "RequestConfig": "swiftlike.infer.protocol",
    "create_engine": "swiftlike.infer.engine",
    "resolve_model": "swiftlike.model",
    "get_template": "swiftlike.template",
    "load_dataset": "swiftlike.dataset",
}

__all__ = ["BaseArguments", "InferArguments", "InferRequest", "RequestConfig", "create_engine", "get_template",
           "infer_main", "load_dataset", "resolve_model"]


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'swiftlike' has no attribute {name!r}")
