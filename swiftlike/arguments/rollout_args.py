"""Arguments of `swiftlike rollout`: a vLLM engine behind HTTP for server-mode RL (names follow ms-swift)."""
from __future__ import annotations

from dataclasses import dataclass

from ..rl.core.options import MultiTurnOptions
from ..utils.errors import NotBuiltError, UsageError
from .base import BaseArguments, arg
from .infer_args import LogprobLimitArguments, VllmArguments
from .option_flags import flag_values, option_flags
from .sandbox_args import SandboxArguments

# The multi-turn settings a rollout server reads (ms-swift's `swift rollout` has these; the length-limit scope
# and --vllm_server_pass_dataset are the trainer's, sent with each /rollout request).
SERVER_MULTI_TURN = ("multi_turn_scheduler", "max_turns", "use_gym_env", "gym_env", "context_manager")
MultiTurnServerArguments = option_flags(
    MultiTurnOptions, "", "MultiTurnServerArguments", module=__name__, names=SERVER_MULTI_TURN,
    doc="Multi-turn rollouts run on the server (where ms-swift runs its schedulers): POST /rollout answers "
    "finished trajectories.")


@dataclass
class RolloutServerArguments(BaseArguments, VllmArguments, LogprobLimitArguments, MultiTurnServerArguments,
                             SandboxArguments):
    """swiftlike rollout: serve generation and weight updates to a `swiftlike rlhf --vllm_mode server` trainer."""

    command = "rollout"
    host: str = arg("127.0.0.1", "Address to bind; 127.0.0.1 serves this machine only. Use 0.0.0.0 (with "
                    "--api_key) for trainers on other hosts.")
    port: int = arg(8000, "TCP port to listen on.")
    api_key: str | None = arg(None, "When set, every request except /health needs the header `Authorization: Bearer KEY`.")
    vllm_data_parallel_size: int = arg(1, "Engine replicas in this server; only 1 is built. For more, start "
                                       "one server per port and list them all in the trainer's "
                                       "--vllm_server_port (generation is spread across them).")
    max_bucket_mb: int = arg(4096, "Largest weight bucket accepted over HTTP, in MiB (bigger gets 413).")
    max_prompts: int = arg(4096, "Most prompts x n one /generate request may ask for (more gets 413).")
    default_max_tokens: int = arg(512, "max_tokens of an OpenAI request that does not set it.")
    external_plugins: list[str] = arg([], "Python files imported before the engine loads, e.g. to register a "
                                      "--multi_turn_scheduler or the environments and reward functions it uses.")

    def engine_spec(self):
        """The vLLM engine this server holds (a rollout server is vLLM only)."""
        return self.model_engine_spec("vllm", self.vllm_options(), max_logprobs=self.max_logprobs)

    def multi_turn_options(self) -> MultiTurnOptions:
        """The multi-turn group these flags describe (validated there)."""
        return MultiTurnOptions(**flag_values(self, MultiTurnOptions, names=SERVER_MULTI_TURN))

    def _agent_template_unread(self) -> str | None:
        """The server's tool scheduler parses the model's calls with --agent_template; nothing else here does."""
        if self.multi_turn_scheduler is not None:
            return None
        return "a rollout server reads it only for its --multi_turn_scheduler (tool_call_scheduler)"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.multi_turn_options()  # its own checks, named by flag
        if self.model is None:
            raise UsageError("--model is required: the model the rollout server generates with")
        if not 0 < self.port < 65536:
            raise UsageError(f"--port must be in 1..65535, got {self.port}")
        if self.vllm_data_parallel_size < 1:
            raise UsageError(f"--vllm_data_parallel_size must be >= 1, got {self.vllm_data_parallel_size}")
        if self.vllm_data_parallel_size != 1:
            raise NotBuiltError(f"--vllm_data_parallel_size {self.vllm_data_parallel_size}: one engine per server "
                                "is built so far; start one `swiftlike rollout` per port and pass every port to "
                                "the trainer's --vllm_server_port, which spreads generation across them")
        self.check_logprob_limit(self.vllm_engine_kwargs)
        for name in ("max_bucket_mb", "max_prompts", "default_max_tokens", "vllm_tensor_parallel_size"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name} must be >= 1, got {getattr(self, name)}")
