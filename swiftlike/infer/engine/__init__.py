"""Inference engines behind one interface, built by one factory (factory.py); sequence classifiers (reward models)
behind another (classifier.py), built by the same factory; the served judges' chat client (chat_client.py)."""
from .base import InferEngine
from .classifier import Classifier
from .factory import EngineSpec, build_classifier, build_engine

__all__ = ["Classifier", "EngineSpec", "InferEngine", "build_classifier", "build_engine"]
