"""bench_agent's scheduler, loaded on the rollout server with --external_plugins: uneven trajectories.

Each trajectory draws its number of rounds, 1 to 4, from its uuid (so the draw is fixed per trajectory and spread
evenly), and after every turn but its last gets a tool-style result inserted as an observation: a random model
seldom writes a tool call that parses, so the tool scheduler would end nearly every trajectory after one turn
and the long tail the benchmark is about would not exist.
"""
import random

from swiftlike.rollout.multi_turn import MultiTurnScheduler, register_scheduler

MAX_ROUNDS = 4


@register_scheduler("uneven_tool_rounds")
class UnevenToolRounds(MultiTurnScheduler):
    async def on_trajectory_start(self, requests):
        for request in requests:
            request.data_dict["rounds"] = random.Random(request.uuid).randint(1, MAX_ROUNDS)

    def check_finished(self, request, choice, current_turn):
        return current_turn >= request.data_dict["rounds"]

    def step(self, request, choice, current_turn):
        request.messages.append({"role": "user", "content": f"Tool result {current_turn}: 42. Go on."})
        return {"infer_request": request, "tool_calls": 1}
