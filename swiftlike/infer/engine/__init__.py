"""Inference engines behind one interface."""
from .base import InferEngine

__all__ = ["InferEngine", "create_engine"]


def create_engine(backend: str, resolved, template=None, *, torch_dtype: str = "auto",
                  adapters: dict[str, str] | None = None, max_batch_size: int = 16, vllm_options=None,
                  sglang_options=None, lmdeploy_options=None):
    """Build the engine `backend` names; the heavy imports happen only for the chosen one."""
    if backend == "pt":
        from .pt_engine import PtEngine
        return PtEngine(resolved, template, torch_dtype=torch_dtype, max_batch_size=max_batch_size,
                        adapters=adapters)
    if backend == "vllm":
        from .vllm_engine import VllmEngine, VllmOptions
        options = vllm_options or VllmOptions(torch_dtype=torch_dtype)
        return VllmEngine(resolved, template, options=options, adapters=adapters)
    if backend == "sglang":
        from .sglang_engine import SglangEngine, SglangOptions
        options = sglang_options or SglangOptions(torch_dtype=torch_dtype)
        return SglangEngine(resolved, template, options=options, adapters=adapters)
    if backend == "lmdeploy":
        from .lmdeploy_engine import LmdeployEngine, LmdeployOptions
        options = lmdeploy_options or LmdeployOptions(torch_dtype=torch_dtype)
        return LmdeployEngine(resolved, template, options=options, adapters=adapters)
    raise ValueError(f"unknown infer backend {backend!r}; valid values: pt, vllm, sglang, lmdeploy")
