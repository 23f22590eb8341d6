"""`swiftlike <command> [arguments]`: one entry point, dispatching to each command's *_main."""
from __future__ import annotations

import importlib
import logging
import sys
import traceback

from ..utils import get_logger
from ..utils.errors import NotBuiltError, UsageError, WorkersFailed
from ..utils.version import __version__

# command -> (module:function, what it does); README.md's command table lists each (tests/repo/test_docs.py).
COMMANDS: dict[str, tuple[str, str]] = {
    "infer": ("swiftlike.commands.infer:infer_main", "chat on stdin or batch inference, pt / vLLM engines"),
    "pt": ("swiftlike.commands.train:pt_main", "pre-training on plain text"),
    "sft": ("swiftlike.commands.train:sft_main", "supervised fine-tuning, full or LoRA"),
    "rlhf": ("swiftlike.commands.rlhf:rlhf_main", "preference training (DPO, KTO, CPO, SimPO, ORPO, reward "
             "models), the GRPO family and GKD"),
    "megatron": ("swiftlike.commands.megatron:megatron_main", "`megatron rlhf`: GRPO / GKD on the megatron-core "
                 "backend, under Megatron-LM's argument names"),
    "sample": ("swiftlike.commands.sample:sample_main", "many answers per prompt, scored by an ORM / PRM, the best "
               "kept as SFT rows and the worst as DPO's rejected_response (also distillation from a served teacher)"),
    "rollout": ("swiftlike.commands.rollout:rollout_main", "vLLM rollout server for server-mode RL"),
    "deploy": ("swiftlike.commands.deploy:deploy_main", "OpenAI-compatible server (pt / vLLM engines)"),
    "eval": ("swiftlike.commands.eval:eval_main", "accuracy and pass@k on built-in or local benchmarks"),
    "export": ("swiftlike.commands.export:export_main", "merge LoRA and export"),
    "web-ui": ("swiftlike.commands.webui:web_ui_main", "Gradio pages that build, run and follow the other "
               "commands (training, RLHF, GRPO, deploy & chat, eval, export) as jobs"),
    "app": ("swiftlike.commands.app:app_main", "Gradio chat page over a model or a running deployment"),
}


def usage() -> str:
    lines = [f"swiftlike {__version__}: fine-tune, RL post-train, evaluate and serve LLMs", "",
             "usage: swiftlike <command> [--arg value ...] [--config file.yaml]", "", "commands:"]
    for name, (_, what) in COMMANDS.items():
        lines.append(f"  {name:<9} {what}")
    lines.append("\n`swiftlike <command> --help` lists a command's arguments.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(__version__)
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"swiftlike: unknown command {command!r}; valid commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module, func = COMMANDS[command][0].split(":")
    try:
        getattr(importlib.import_module(module), func)(rest)
    except KeyboardInterrupt:
        return 130
    except NotBuiltError as e:
        return _report(e, f"swiftlike {command}: not built: {e}", 3)
    except (UsageError, WorkersFailed) as e:
        return _report(e, f"swiftlike {command}: error: {e}", 1)
    except Exception as e:
        return _report(e, f"swiftlike {command}: error: {e} ({type(e).__name__}; traceback above)", 1,
                       always_traceback=True)
    return 0


def _report(error: BaseException, line: str, status: int, always_traceback: bool = False) -> int:
    """`line` on stderr, after the traceback of `error` where one is wanted: for a failure that is not a usage
    error (docs/commands.md, "Exit status"), and for every error under SWIFTLIKE_LOG_LEVEL=DEBUG. The line comes
    last in both cases, so the web UI's job page and a reader of the log's end find the same message."""
    if always_traceback or get_logger().isEnabledFor(logging.DEBUG):
        traceback.print_exception(error, file=sys.stderr)
    print(line, file=sys.stderr, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
