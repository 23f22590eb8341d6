"""`swiftlike rollout`: a vLLM engine behind HTTP for `swiftlike rlhf --vllm_mode server` trainers."""
from __future__ import annotations

from ..arguments.rollout_args import RolloutServerArguments
from ..infer.engine import build_engine
from ..rl.online.sandbox_check import require_sandbox
from ..rl.rewards.plugins import load_external_plugins
from ..rollout.multi_turn import multi_turns
from ..rollout.server.app import create_app
from ..rollout.server.service import RolloutService
from ..utils import get_logger
from . import arguments_of

logger = get_logger("swiftlike.rollout")


def rollout_main(args: RolloutServerArguments | list[str] | None = None) -> None:
    import uvicorn
    args = arguments_of(RolloutServerArguments, args)
    load_external_plugins(args.external_plugins)  # a plugin that fails to import stops here, naming its file
    multi_turn = args.multi_turn_options()
    if multi_turn.enabled:
        multi_turns.lookup(multi_turn.multi_turn_scheduler)  # an unknown name stops here, before the model loads,
    require_sandbox(args.allow_unisolated_execution, (), multi_turn.multi_turn_scheduler)  # as does a sandbox that
    # cannot isolate the scheduler's tool calls
    spec = args.engine_spec()
    spec.logprobs_mode = "processed_logprobs"  # RL trainers score tokens after temperature / top-k / top-p
    service = RolloutService(args, lambda: build_engine(spec))
    app = create_app(service)
    logger.info("swiftlike rollout: %s on http://%s:%d (policy version 0)", service.engine.model_name, args.host,
                args.port)
    print(f"swiftlike rollout ready on http://{args.host}:{args.port}", flush=True)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        print(f"swiftlike rollout stopped: {service.samples_generated} samples generated, {service.version} "
              "weight updates applied", flush=True)
        service.close()
