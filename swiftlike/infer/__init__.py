"""Inference: the engine interface, its pt and vLLM engines, and `swiftlike infer`."""
from .engine import InferEngine, create_engine
from .protocol import Choice, InferRequest, InferResponse, RequestConfig, StreamDelta, Usage

__all__ = ["Choice", "InferEngine", "InferRequest", "InferResponse", "RequestConfig", "StreamDelta", "Usage",
           "create_engine", "infer_main"]


def __getattr__(name):
    if name == "infer_main":
        from .run import infer_main
        return infer_main
    raise AttributeError(name)
