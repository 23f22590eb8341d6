"""swiftlike: fine-tune, RL post-train, evaluate and serve LLMs from one CLI and Python API.

Every CLI command has a Python twin here: `<command>_main` (taking the command's arguments object or a
CLI-style list) and its arguments class, named as in ms-swift (`from swift.llm import rlhf_main, RLHFArguments`
becomes `from swiftlike import rlhf_main, RLHFArguments`). The layer order is in docs/architecture.md.
Heavy modules load lazily so `swiftlike --help` and argument parsing stay fast.
"""
from .utils.version import __version__ as __version__

_LAZY = {
    # commands
    "infer_main": "swiftlike.commands.infer",
    "sft_main": "swiftlike.commands.train",
    "pt_main": "swiftlike.commands.train",
    "rlhf_main": "swiftlike.commands.rlhf",
    "megatron_main": "swiftlike.commands.megatron",
    "rollout_main": "swiftlike.commands.rollout",
    "sample_main": "swiftlike.commands.sample",
    "deploy_main": "swiftlike.commands.deploy",
    "eval_main": "swiftlike.commands.eval",
    "export_main": "swiftlike.commands.export",
    "app_main": "swiftlike.commands.app",
    "web_ui_main": "swiftlike.commands.webui",
    # their arguments
    "BaseArguments": "swiftlike.arguments",
    "InferArguments": "swiftlike.arguments",
    "TrainArguments": "swiftlike.arguments",
    "PtArguments": "swiftlike.arguments",
    "RlhfArguments": "swiftlike.arguments",
    "MegatronRlhfArguments": "swiftlike.arguments.megatron_args",
    "RolloutServerArguments": "swiftlike.arguments",
    "SampleArguments": "swiftlike.arguments",
    "DeployArguments": "swiftlike.arguments",
    "EvalArguments": "swiftlike.arguments",
    "ExportArguments": "swiftlike.arguments",
    "AppArguments": "swiftlike.arguments",
    "WebUIArguments": "swiftlike.arguments",
    # building blocks
    "train": "swiftlike.train",
    "merge_lora": "swiftlike.export",
    "InferRequest": "swiftlike.infer.protocol",
    "RequestConfig": "swiftlike.infer.protocol",
    "EngineSpec": "swiftlike.infer.engine",
    "build_engine": "swiftlike.infer.engine",
    "resolve_model": "swiftlike.model",
    "get_template": "swiftlike.template",
    "load_dataset": "swiftlike.dataset",
    "iter_dataset": "swiftlike.dataset",
}
# ms-swift's spellings of the same classes
_ALIASES = {"RLHFArguments": "RlhfArguments", "RolloutArguments": "RolloutServerArguments",
            "MegatronRLHFArguments": "MegatronRlhfArguments", "webui_main": "web_ui_main",
            "sampling_main": "sample_main", "SamplingArguments": "SampleArguments"}

__all__ = [*_LAZY, *_ALIASES, "__version__"]  # noqa: PLE0604 (built from the tables above)


def __getattr__(name):
    name = _ALIASES.get(name, name)
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'swiftlike' has no attribute {name!r}")
