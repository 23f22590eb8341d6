"""Inference engines behind one interface, built by one factory (factory.py)."""
from .base import InferEngine
from .factory import EngineSpec, build_engine

__all__ = ["EngineSpec", "InferEngine", "build_engine"]
