"""Multi-turn rollouts on the rollout server (`POST /rollout`), where ms-swift runs its schedulers: the trainer
sends rows, the server's `--multi_turn_scheduler` turns each into a trajectory with the server's engine, and
the trainer receives finished trajectories (ids, loss mask, behaviour log-probs, per-token policy versions,
step rewards, infos, truncated / env_error).

Each trajectory runs on its own through the server's resumable generation (`RolloutService.generate`, the
`generate` of `run_trajectories`): vLLM batches the turns of all trajectories in flight as they come, so a
short trajectory does not wait for the longest turn of the batch, and a weight update landing in any turn cuts
that turn and resumes it under the new weights (partial.py), each token keeping the version and log-prob it was
sampled with. Inserted ids (tool results, observations) take the version of the turn before them. A turn whose
settings do not resume exactly (a scheduler's stop words, ReAct's `Observation:`) makes the update wait instead.

Why the trainer sends the length scope and max_completion_length, but the server owns the scheduler, max_turns
and gym_env: ms-swift's split. A trainer that names no scheduler takes the server's (ms-swift's commands set it on
`swift rollout` only); one whose --multi_turn_scheduler or --max_turns differs from the server's is refused when
it connects (`check_trainer`), so the run trains what it says.
"""
from __future__ import annotations

import dataclasses
from typing import Literal

from ...infer.protocol import InferRequest, RequestConfig
from ...rl.core.options import MultiTurnOptions
from ..multi_turn import RolloutRequest, build_scheduler, run_trajectories

LimitScope = Literal["total", "per_round"]


class MultiTurnServing:
    """The server's scheduler, built once on the served template, and the trajectories it runs."""

    def __init__(self, options: MultiTurnOptions, template):
        self.options = options
        self.scheduler = build_scheduler(options.multi_turn_scheduler, max_turns=options.max_turns,
                                         gym_env=options.gym_env, template=template)
        self.template = template
        self.trajectories = 0  # finished so far
        self.env_errors = 0

    def info(self) -> dict:
        """What a trainer checks against its own flags (and logs)."""
        return {"scheduler": self.options.multi_turn_scheduler, "max_turns": self.options.max_turns,
                "gym_env": self.options.gym_env, "trajectories": self.trajectories, "env_errors": self.env_errors}

    async def run(self, service, rows: list[dict], config: RequestConfig, adapter: str | None,
                  limit_scope: LimitScope) -> list[dict]:
        """One finished trajectory per row, in order, as JSON-ready dicts."""
        requests = [RolloutRequest(messages=row["messages"], tools=row.get("tools"),
                                   data_dict=dict(row.get("data_dict") or {})) for row in rows]

        async def generate(request: InferRequest, turn_config: RequestConfig):
            return (await service.generate([request], turn_config))[0]

        trajectories = await run_trajectories(
            service.engine, self.template, self.scheduler, requests, config, max_turns=self.options.max_turns,
            max_completion_length=config.max_tokens, limit_scope=limit_scope, adapter=adapter, generate=generate)
        self.trajectories += len(trajectories)
        self.env_errors += sum(t.env_error is not None for t in trajectories)
        return [dataclasses.asdict(t) for t in trajectories]


def check_trainer(served: dict | None, scheduler: str | None, max_turns: int | None, *,
                  adopt: bool = True) -> str | None:
    """The scheduler a trainer's run trains with, given what the servers run (`served`: /info's `multi_turn`,
    None for servers without a scheduler). A trainer that names none takes the servers' (`adopt`), as ms-swift's
    trainers do: their commands set `--multi_turn_scheduler` on `swift rollout` only. One that names another, a
    --max_turns other than theirs, or multi-turn settings against servers that run no scheduler is refused,
    naming both sides, so the run trains what its flags say."""
    server_name = served["scheduler"] if served else None
    if scheduler is None and server_name is not None and not adopt:
        raise ValueError(f"the rollout server runs --multi_turn_scheduler {server_name}, and this trainer does not "
                         "train multi-turn trajectories; point it at a server started without "
                         "--multi_turn_scheduler")
    if scheduler is None and server_name is None and max_turns is not None:
        raise ValueError(f"--max_turns {max_turns}: the rollout server runs no scheduler (it generates one turn per "
                         "prompt); restart it with `swiftlike rollout ... --multi_turn_scheduler NAME --max_turns "
                         f"{max_turns}`, or drop --max_turns here")
    if scheduler is not None and scheduler != server_name:
        if server_name is None:
            raise ValueError(f"--multi_turn_scheduler {scheduler}: the rollout server runs no scheduler (it "
                             "generates one turn per prompt); restart it with `swiftlike rollout ... "
                             f"--multi_turn_scheduler {scheduler}` (schedulers run on the server, as in ms-swift)")
        raise ValueError(f"the rollout server runs --multi_turn_scheduler {server_name} but this trainer has "
                         f"--multi_turn_scheduler {scheduler}; pass --multi_turn_scheduler {server_name} (or leave "
                         "it unset: the trainer takes the server's) to train on its trajectories, or restart the "
                         "server with the scheduler you want")
    if served and max_turns is not None and max_turns != served["max_turns"]:
        raise ValueError(f"--max_turns {max_turns}, but the rollout server runs {server_name} with --max_turns "
                         f"{served['max_turns']}; the server's limit applies: leave --max_turns unset here, or "
                         "give both the same value")
    return server_name
