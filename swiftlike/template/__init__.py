"""Template registry: chat formats for training and inference, and the agent templates that write tool turns."""
from .agent import AGENT_TEMPLATE_REGISTRY, AgentTemplate, get_agent_template
from .base import IGNORE_INDEX, LOSS_SCALES, Encoded, Template, TemplateMeta, read_system
from .loss_scale import LossScale, parse_loss_scale
from .registry import TEMPLATE_REGISTRY, get_template, get_template_meta, register_template
from .tokenizer_template import TOKENIZER_TEMPLATE, TokenizerTemplate
from .toolcall import ParsedCall, ParsedCompletion, ToolCall, canonical_messages, check_tool_turns, normalize_tools

__all__ = ["AGENT_TEMPLATE_REGISTRY", "IGNORE_INDEX", "LOSS_SCALES", "AgentTemplate", "Encoded", "LossScale",
           "ParsedCall", "ParsedCompletion", "Template", "TemplateMeta", "TEMPLATE_REGISTRY", "TOKENIZER_TEMPLATE",
           "TokenizerTemplate", "ToolCall", "canonical_messages", "check_tool_turns", "get_agent_template",
           "get_template", "get_template_meta", "normalize_tools", "parse_loss_scale", "read_system",
           "register_template"]
