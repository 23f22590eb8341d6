"""Inference: the engine interface, its pt, vLLM, SGLang and LMDeploy engines, and the one engine factory."""
from .engine import EngineSpec, InferEngine, build_engine
from .protocol import Choice, InferRequest, InferResponse, RequestConfig, StreamDelta, Usage

__all__ = ["Choice", "EngineSpec", "InferEngine", "InferRequest", "InferResponse", "RequestConfig", "StreamDelta",
           "Usage", "build_engine"]
