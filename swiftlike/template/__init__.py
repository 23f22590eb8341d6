"""Template registry: chat formats for training and inference."""
from .base import IGNORE_INDEX, LOSS_SCALES, Encoded, Template, TemplateMeta, read_system
from .registry import TEMPLATE_REGISTRY, get_template, get_template_meta, register_template
from .tokenizer_template import TOKENIZER_TEMPLATE, TokenizerTemplate

__all__ = ["IGNORE_INDEX", "LOSS_SCALES", "Encoded", "Template", "TemplateMeta", "TEMPLATE_REGISTRY",
           "TOKENIZER_TEMPLATE", "TokenizerTemplate", "get_template", "get_template_meta", "register_template",
           "read_system"]
