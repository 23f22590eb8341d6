"""Template registry: chat formats for training and inference."""
from .base import IGNORE_INDEX, LOSS_SCALES, Encoded, Template, TemplateMeta, read_system
from .registry import TEMPLATE_REGISTRY, get_template, get_template_meta, register_template

__all__ = ["IGNORE_INDEX", "LOSS_SCALES", "Encoded", "Template", "TemplateMeta", "TEMPLATE_REGISTRY",
           "get_template", "get_template_meta", "register_template", "read_system"]
