"""The multi-turn loop: schedulers decide what follows each sampled turn; the loop keeps the token ids exact.

**Token in, token out.** The first prompt is encoded once with the template. Every later turn is generated
from `InferRequest(input_ids=prompt_ids + completion_ids)`, so earlier turns are never re-tokenised. The ids
the engine sampled are appended exactly as returned (loss mask 1, the engine's log-probs), stop token
included; what comes between turns is appended as ids rendered by the template (mask 0, log-prob 0.0): tool
results with `Template.encode_tool_turn`, a user message (an environment's observation) with
`Template.encode_user_turn`, each starting right after the text that ends the sampled turn (`<|im_end|>`,
ReAct's `Observation:`) and ending with the next assistant header. A scheduler may instead hand back the
turn's ids itself (`response_token_ids`, ms-swift's contract, as `math_tip_trick` does), and then its ids
with mask 1 must be a prefix of the sampled ids, followed only by inserted ids.

A sampled turn that does not end where the template ends turns cannot be continued exactly: one cut by the
token limit gets that ending inserted (mask 0) when its scheduler goes on; one that stopped on another token
(the model's end-of-document rather than its end-of-turn, a ReAct answer that ended its turn without
`Observation:`) ends the trajectory.

**Length limits** (`--completion_length_limit_scope`): `per_round` caps each turn at max_completion_length;
`total` caps all completion ids (sampled and inserted) at max_completion_length, each turn getting what is
left. Inserted ids that would leave no room for another sampled token are not appended; the trajectory ends
there. The model's context bounds prompt + completion the same way: the engine's max_model_len, or, for an engine
that sets none (pt), the model's own (config.json's max_position_embeddings), so every trajectory has a finite
bound even with `per_round` and no max_turns; where neither is known, that configuration is refused by name. A
trajectory cut by any of these, or whose last turn hit its token limit, is `truncated`.

**What was trained is what the conversation and the counts say.** A turn's `step` is run only when what it could
append fits (`least_next_ids`: a tool call whose results could not fit is never run), and what a step reports
(`tool_calls`, `tool_errors`, a reward, rollout_infos) is kept only with the ids it appended: a turn that cannot be
continued (it stopped on another token than the template's end of turn) or whose results did not fit leaves the
conversation, the counts and the ids as they were after its sampled ids.

**Batching.** Each turn, the trajectories still going are generated with one `engine.infer` call (lockstep),
with max_tokens the largest budget among them and each answer cut back to its own budget (a prefix of a
sample is a sample under the smaller limit). Why not `generate_async` per trajectory: the pt engine and
`RemoteEngine` batch only inside `infer` (their `generate_async` serves one request at a time), colocated
vLLM batches a whole `infer` call, and its continuous-batching thread would keep stepping an engine the
rollout worker sleeps, wakes and reloads. Measured on this machine (tiny model, fp32, 16 trajectories x 3 turns
x 32 tokens, warm): pt 4.8 s lockstep vs 19.6 s with `generate_async`; vLLM 3.0 s vs 3.2 s. The cost is that a
turn waits for its slowest trajectory. A rollout server, whose engine batches concurrent requests and cuts them
at weight updates, passes its own `generate` and each trajectory then runs on its own.

**Policy versions.** A turn takes the engine's `choice.version_spans` (a rollout server that continued it
across weight updates) or else `InferResponse.policy_version` for all its tokens; inserted ids take the
version of the turn before them. An engine that reports none gives `version_spans=None`.
"""
from __future__ import annotations

import asyncio
import copy
import dataclasses
import inspect
import json
import uuid as uuid_lib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal

from ...infer.engine.base import InferEngine
from ...infer.protocol import Choice, InferRequest, InferResponse, RequestConfig
from ...template import Template, ToolCall
from .trajectory import RolloutRequest, Trajectory

LimitScope = Literal["total", "per_round"]
Generate = Callable[[InferRequest, RequestConfig], Awaitable[InferResponse]]

_PROBE_CALL = ToolCall("swiftlike_probe_tool", {}).as_message_call()
# config.json keys that hold a model's context length, as transformers' model families name it
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


class EnvFailure(RuntimeError):
    """An environment (or anything a scheduler runs for one trajectory) failed: that trajectory ends with
    `env_error` set and the others go on. Any other exception from a scheduler is a bug and stops the run."""


class MultiTurnScheduler:
    """ms-swift's hooks, called by the loop in this order for each trajectory:

    - `on_trajectory_start([request])` (async) once, before the prompt is encoded: may rewrite the messages
      (an environment's first observation). The loop calls it per trajectory, with a list of one.
    - after each sampled turn, whose assistant message is already appended (or, for a turn that continues
      the assistant's message, added to it): `on_turn_end(request, choice, turn)` (async) -> dict, then
      `check_finished(request, choice, turn)`; a `done` from on_turn_end overrides check_finished, and
      `max_turns` ends it regardless;
    - if it goes on, and `least_next_ids(request, choice)` more ids would leave room for another sampled token,
      `step(request, choice, turn)` (sync or async; a sync one runs in a worker thread, so
      state it shares across trajectories needs a lock) -> dict: appends what comes next to
      `request.messages` (tool results, or one user message), or returns the turn's ids itself;
    - `on_trajectory_end(request)` (async) once at the end, however it ends (swiftlike's: closes environments).

    Keys the loop reads from on_turn_end's and step's dicts: `done` (on_turn_end), `infer_request` (step: the
    next request, default the same one), `response_token_ids` / `response_loss_mask` / `rollout_logprobs`
    (step: this turn's ids, their mask and the log-probs of the mask-1 ones), `rollout_infos` (merged into
    `Trajectory.infos`), `reward` (a step reward, appended to `step_rewards`), `tool_calls` / `tool_errors`
    (counts added up; step's only when the ids it appended are kept). `choice` is the engine's answer for the turn
    (`infer.protocol.Choice`).
    """

    def __init__(self, template: Template, max_turns: int | None = None, gym_env: str | None = None):
        self.template = template
        self.max_turns = max_turns
        self.gym_env = gym_env

    @property
    def tokenizer(self):
        return self.template.tokenizer

    @property
    def stop_words(self) -> tuple[str, ...]:
        """Stop strings each turn needs besides the request's (ReAct's `Observation:`)."""
        return ()

    async def on_trajectory_start(self, requests: list[RolloutRequest]) -> None:
        return None

    async def on_turn_end(self, request: RolloutRequest, choice: Choice, current_turn: int) -> dict:
        return {}

    def check_finished(self, request: RolloutRequest, choice: Choice, current_turn: int) -> bool:
        """ms-swift's default: a turn cut by its token limit ends the trajectory, and so does max_turns."""
        if choice.finish_reason == "length":
            return True
        return bool(self.max_turns) and current_turn >= self.max_turns

    def least_next_ids(self, request: RolloutRequest, choice: Choice) -> int:
        """The fewest ids `step` would append after the turn's sampled ids (swiftlike's hook): the loop does not
        call `step` when even these would leave no room for another sampled token, so work whose result could not
        be kept (a tool call) is not done. 0 by default."""
        return 0

    def step(self, request: RolloutRequest, choice: Choice, current_turn: int) -> dict:
        raise NotImplementedError(f"{type(self).__name__} must implement step(request, choice, current_turn): append "
                                  "the next user message or tool results to request.messages")

    async def on_trajectory_end(self, request: RolloutRequest) -> None:
        return None


async def _step(scheduler: MultiTurnScheduler, request: RolloutRequest, choice: Choice, turn: int) -> dict:
    """A scheduler's `step`; a plain (sync) one runs in a worker thread. ms-swift's plugins write `step` sync,
    and one that blocks (a tool call, an HTTP request) would otherwise stop every other trajectory on the event
    loop: the rollout server's requests and the other trajectories of a lockstep batch."""
    if inspect.iscoroutinefunction(scheduler.step):
        return await scheduler.step(request, choice, turn)
    stepped = await asyncio.to_thread(scheduler.step, request, choice, turn)
    if inspect.isawaitable(stepped):
        stepped = await stepped
    return stepped


def tool_turn_ids(template: Template, results: list[str]) -> list[int]:
    """The ids of tool results and the next assistant header, to append after a call turn's sampled ids.

    Rendered after a stand-in call turn with one call per result: the text after a call turn's end does not
    depend on the calls (the tests check it against whole conversations on every template), and a stand-in
    serves calls that did not parse, which a real conversation could not hold."""
    probe = [{"role": "user", "content": "ping"},
             {"role": "assistant", "content": "", "tool_calls": [_PROBE_CALL] * len(results)},
             *({"role": "tool", "content": result} for result in results)]
    return template.encode_tool_turn(probe)


def context_length(engine: InferEngine) -> int | None:
    """The longest prompt + completion `engine` can take: its max_model_len, else (an engine that sets no limit of
    its own, such as pt) the model's context length from its config.json; None when neither is known."""
    if engine.max_model_len is not None:
        return int(engine.max_model_len)
    config_file = Path(engine.model_dir) / "config.json" if engine.model_dir is not None else None
    if config_file is None or not config_file.is_file():
        return None
    config = json.loads(config_file.read_text(encoding="utf-8"))
    for section in (config, config.get("text_config") or {}):
        for key in CONTEXT_KEYS:
            if isinstance(section.get(key), int) and section[key] > 0:
                return section[key]
    return None


def check_bounded(max_turns: int | None, limit_scope: str, max_model_len: int | None) -> None:
    """Refuse a multi-turn configuration in which nothing ends a trajectory whose model never stops (a tool call
    every turn): no max_turns, a per-round length limit and no known context length."""
    if not max_turns and limit_scope == "per_round" and max_model_len is None:
        raise ValueError("nothing bounds a multi-turn trajectory here: --max_turns is unset, "
                         "--completion_length_limit_scope is per_round (each turn capped, not their sum) and the "
                         "engine knows no context length (no max_model_len, no max_position_embeddings in the "
                         "model's config.json), so a model that calls a tool every turn would never stop; set "
                         "--max_turns N, or --completion_length_limit_scope total, or --vllm_max_model_len")


def _prefix_spans(spans: list[list[int]] | None, count: int) -> list[list[int]] | None:
    """The spans of the first `count` ids (none kept: the first version, for the inserted ids that follow)."""
    if spans is None:
        return None
    out, left = [], count
    for version, n in spans:
        if left <= 0 and out:
            break
        out.append([version, min(n, left)])
        left -= n
    return out


class TrajectoryRun:
    """One trajectory in progress: its request, the ids so far, and the per-turn logic of the loop.

    `after_turn` is everything the loop does with a sampled turn; tests feed it engine answers with fixed ids
    to check the ids on templates where a random model would never write a tool call."""

    def __init__(self, request: RolloutRequest, template: Template, scheduler: MultiTurnScheduler, *,
                 max_turns: int | None, max_completion_length: int, limit_scope: LimitScope = "per_round",
                 max_model_len: int | None = None):
        if limit_scope not in ("total", "per_round"):
            raise ValueError(f"--completion_length_limit_scope must be 'total' or 'per_round', got {limit_scope!r}")
        if max_completion_length < 1:
            raise ValueError(f"--max_completion_length must be >= 1, got {max_completion_length}")
        check_bounded(max_turns, limit_scope, max_model_len)
        self.request = request
        self.template = template
        self.scheduler = scheduler
        self.max_turns = max_turns
        self.max_completion_length = max_completion_length
        self.limit_scope = limit_scope
        self.max_model_len = max_model_len
        self.prompt_ids: list[int] = []
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.spans: list[list[int]] | None = []
        self.turns = 0
        self.finish_reason = ""
        self.cut = False  # ended by a length limit before the engine's own
        self.done = False
        self.step_rewards: list[float] = []
        self.tool_calls = 0
        self.tool_errors = 0
        self.env_error: str | None = None
        self.infos: dict = {}

    async def start(self) -> None:
        """on_trajectory_start, then the prompt, encoded once."""
        try:
            await self.scheduler.on_trajectory_start([self.request])
        except EnvFailure as failure:
            self._fail(failure)
            return
        self.prompt_ids = self.template.encode_prompt(self.request.messages, tools=self.request.tools or None)
        if self.budget() <= 0:
            self.finish(cut=True)

    def budget(self) -> int:
        """Tokens the next turn may sample (0: no room left)."""
        room = self.max_completion_length
        if self.limit_scope == "total":
            room -= len(self.ids)
        if self.max_model_len is not None:
            room = min(room, self.max_model_len - len(self.prompt_ids) - len(self.ids))
        return max(room, 0)

    def next_request(self, adapter: str | None = None) -> InferRequest:
        return InferRequest(input_ids=self.prompt_ids + self.ids, adapter=adapter)

    async def after_turn(self, choice: Choice, policy_version: int | None = None, budget: int | None = None) -> None:
        """Record a sampled turn (cut to `budget` tokens), run the hooks, and append what comes next."""
        sampled, logprobs, spans = self._sampled(choice, policy_version, budget)
        if budget is not None and len(choice.token_ids) > budget:
            choice = dataclasses.replace(choice, token_ids=sampled, finish_reason="length",
                                         logprobs=choice.logprobs[:budget])
        self.turns += 1
        self.finish_reason = choice.finish_reason
        self._add_assistant_text(sampled)
        try:
            outcome = await self.scheduler.on_turn_end(self.request, choice, self.turns)
            self._absorb(outcome)
            finished = self.scheduler.check_finished(self.request, choice, self.turns)
            if "done" in outcome:
                finished = bool(outcome["done"])
            if finished or (self.max_turns and self.turns >= self.max_turns):
                self._append(sampled, [1] * len(sampled), logprobs, spans)
                self.finish()
                return
            if not self._fits(len(sampled) + self.scheduler.least_next_ids(self.request, choice)):
                self._append(sampled, [1] * len(sampled), logprobs, spans)
                self.finish(cut=True)  # what step would append cannot fit: it is not run
                return
            before = copy.deepcopy(self.request.messages)
            stepped = await _step(self.scheduler, self.request, choice, self.turns)
            if not isinstance(stepped, dict):
                raise TypeError(f"{type(self.scheduler).__name__}.step must return a dict (at least "
                                f"{{'infer_request': request}}), got {type(stepped).__name__}")
        except EnvFailure as failure:
            self._append(sampled, [1] * len(sampled), logprobs, spans)
            self._fail(failure)
            return
        self.request = stepped.get("infer_request", self.request)
        turn = self._turn_ids(stepped, sampled, logprobs, spans, len(before))
        if turn is None or not self._fits(len(turn[0])):
            # what was never appended as ids is not part of the conversation, nor of the counts
            self.request.messages = before
            self._append(sampled, [1] * len(sampled), logprobs, spans)
            self.finish(cut=turn is not None)
            return
        self._absorb(stepped)
        self._append(*turn)

    def _sampled(self, choice: Choice, policy_version: int | None, budget: int | None):
        ids = list(choice.token_ids)
        if choice.logprobs is None or len(choice.logprobs) != len(ids):
            raise RuntimeError("the engine returned no log-prob for some sampled tokens; multi-turn rollouts need "
                               "the behaviour log-prob of every sampled token (RequestConfig.logprobs)")
        logprobs = [entry.logprob for entry in choice.logprobs]
        if choice.version_spans is not None:
            spans = [list(span) for span in choice.version_spans]
        else:
            spans = None if policy_version is None else [[policy_version, len(ids)]]
        if budget is not None and len(ids) > budget:
            ids, logprobs, spans = ids[:budget], logprobs[:budget], _prefix_spans(spans, budget)
        return ids, logprobs, spans

    def _add_assistant_text(self, sampled: list[int]) -> None:
        """The turn's text without its stop token; a turn that continues the assistant's message (after a tip)
        is added to it, as ms-swift does."""
        ids = sampled[:-1] if sampled and sampled[-1] in self.template.stop_token_ids else sampled
        text = self.template.tokenizer.decode(ids, skip_special_tokens=False)
        messages = self.request.messages
        if messages and messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls"):
            messages[-1]["content"] += text
        else:
            messages.append({"role": "assistant", "content": text})

    def _turn_ids(self, stepped: dict, sampled: list[int], logprobs: list[float], spans, kept: int):
        """(ids, mask, log-probs, spans) of this turn with what follows it; None when it cannot go on."""
        if "response_token_ids" in stepped:
            return self._given_ids(stepped, sampled, logprobs, spans)
        added = self.request.messages[kept:]
        roles = [m.get("role") for m in added]
        if added and set(roles) == {"tool"}:
            end, tail = self.template.tool_call_turn_end, tool_turn_ids(self.template, [m["content"] for m in added])
        elif roles == ["user"]:
            end, tail = self.template.assistant_turn_end, self.template.encode_user_turn(added[0]["content"])
        else:
            raise ValueError(f"{type(self.scheduler).__name__}.step appended messages with roles {roles}; append "
                             "tool results or one user message to request.messages, or return response_token_ids")
        tokenizer = self.template.tokenizer
        if tokenizer.decode(sampled, skip_special_tokens=False).rstrip().endswith(end):
            close = []
        elif self.finish_reason == "length":
            close = list(tokenizer(end, add_special_tokens=False)["input_ids"]) if end else []
        else:
            return None
        inserted = close + tail
        return sampled + inserted, [1] * len(sampled) + [0] * len(inserted), logprobs + [0.0] * len(inserted), spans

    def _given_ids(self, stepped: dict, sampled: list[int], logprobs: list[float], spans):
        """A scheduler's own ids for the turn: sampled ids (a prefix of them, mask 1), then inserted ids (mask 0)."""
        name = type(self.scheduler).__name__
        ids = list(stepped["response_token_ids"])
        mask = list(stepped.get("response_loss_mask") or [1] * len(ids))
        if len(mask) != len(ids):
            raise ValueError(f"{name}.step returned {len(ids)} response_token_ids but {len(mask)} response_loss_mask "
                             "values; give one mask value per id")
        kept = mask.count(1)
        if mask != [1] * kept + [0] * (len(mask) - kept) or ids[:kept] != sampled[:kept]:
            raise ValueError(f"{name}.step returned response_token_ids whose loss-mask-1 ids are not a prefix of the "
                             "ids the engine sampled, followed only by mask-0 ids: a trajectory trains only on ids "
                             "the engine sampled, in the context it sampled them in")
        given = stepped.get("rollout_logprobs")
        kept_logprobs = list(given) if given else logprobs[:kept]
        if len(kept_logprobs) != kept:
            raise ValueError(f"{name}.step returned {len(kept_logprobs)} rollout_logprobs for {kept} sampled ids")
        return ids, mask, kept_logprobs + [0.0] * (len(ids) - kept), _prefix_spans(spans, kept)

    def _fits(self, turn_length: int) -> bool:
        """Whether the ids of a turn and what follows it leave room for another sampled token."""
        total = len(self.ids) + turn_length
        if self.limit_scope == "total" and total >= self.max_completion_length:
            return False
        return self.max_model_len is None or len(self.prompt_ids) + total < self.max_model_len

    def _append(self, ids: list[int], mask: list[int], logprobs: list[float], spans) -> None:
        """Add a turn's ids; `spans` covers its sampled ids, and the inserted ids after them take the version of
        the last sampled id."""
        self.ids += ids
        self.mask += mask
        self.logprobs += logprobs
        if spans is None or self.spans is None:
            self.spans = None
            return
        for version, count in spans:
            self._add_span(version, count)
        inserted = len(ids) - sum(count for _, count in spans)
        version = spans[-1][0] if spans else self.spans[-1][0] if self.spans else None
        if inserted and version is None:  # inserted ids with no sampled id before them have no version to take
            self.spans = None
        elif inserted:
            self._add_span(version, inserted)

    def _add_span(self, version: int, count: int) -> None:
        if self.spans and self.spans[-1][0] == version:
            self.spans[-1][1] += count
        elif count:
            self.spans.append([version, count])

    def _absorb(self, outcome: dict) -> None:
        if outcome.get("rollout_infos"):
            self.infos.update(outcome["rollout_infos"])
        if outcome.get("reward") is not None:
            self.step_rewards.append(float(outcome["reward"]))
        self.tool_calls += int(outcome.get("tool_calls", 0))
        self.tool_errors += int(outcome.get("tool_errors", 0))

    def _fail(self, failure: EnvFailure) -> None:
        self.env_error = str(failure)
        self.finish()

    def finish(self, cut: bool = False) -> None:
        """End the trajectory; `cut`: by a length limit."""
        self.cut = self.cut or cut
        self.done = True

    def trajectory(self) -> Trajectory:
        spans = [tuple(span) for span in self.spans] if self.spans is not None and self.turns else None
        return Trajectory(
            prompt_ids=self.prompt_ids, completion_ids=self.ids, loss_mask=self.mask, logprobs=self.logprobs,
            version_spans=spans, messages=self.request.messages, turns=self.turns,
            finish_reason=self.finish_reason, truncated=self.cut or self.finish_reason == "length",
            step_rewards=self.step_rewards, tool_calls=self.tool_calls, tool_errors=self.tool_errors,
            env_error=self.env_error, infos={**self.infos, "num_turns": self.turns},
            text=self.template.tokenizer.decode(self.ids, skip_special_tokens=False))


async def run_trajectories(engine: InferEngine, template: Template, scheduler: MultiTurnScheduler,
                           requests: list[RolloutRequest], config: RequestConfig, *, max_turns: int | None,
                           max_completion_length: int, limit_scope: LimitScope = "per_round",
                           adapter: str | None = None, generate: Generate | None = None) -> list[Trajectory]:
    """One trajectory per request, in order; see the module docstring.

    `config` gives the sampling (its max_tokens is replaced by each turn's budget; log-probs are always asked
    for, and the scheduler's stop words added). `generate` (a rollout server's resumable generation) replaces
    the lockstep `engine.infer` batches."""
    if config.n != 1:
        raise ValueError(f"multi-turn rollouts sample one answer per request and turn (n=1), got n={config.n}; "
                         "repeat a request for several trajectories of it (as GRPO repeats a row per generation)")
    _give_ids(requests)
    max_model_len = context_length(engine)
    runs = [TrajectoryRun(request, template, scheduler, max_turns=max_turns,
                          max_completion_length=max_completion_length, limit_scope=limit_scope,
                          max_model_len=max_model_len) for request in requests]
    stop = list(dict.fromkeys([*config.stop, *scheduler.stop_words]))
    turn_config = dataclasses.replace(config, logprobs=True, stop=stop)
    try:
        await asyncio.gather(*(run.start() for run in runs))
        if generate is None:
            await _lockstep(engine, runs, turn_config, adapter)
        else:
            await asyncio.gather(*(_on_its_own(run, generate, turn_config, adapter) for run in runs))
    finally:
        await asyncio.gather(*(scheduler.on_trajectory_end(run.request) for run in runs))
    return [run.trajectory() for run in runs]


def run_trajectories_sync(engine: InferEngine, template: Template, scheduler: MultiTurnScheduler,
                          requests: list[RolloutRequest], config: RequestConfig, *, max_turns: int | None,
                          max_completion_length: int, limit_scope: LimitScope = "per_round",
                          adapter: str | None = None) -> list[Trajectory]:
    """`run_trajectories` for a caller with no event loop of its own (the colocated rollout worker)."""
    return asyncio.run(run_trajectories(engine, template, scheduler, requests, config, max_turns=max_turns,
                                        max_completion_length=max_completion_length, limit_scope=limit_scope,
                                        adapter=adapter))


def _give_ids(requests: list[RolloutRequest]) -> None:
    """Every trajectory gets its own uuid (environments are keyed by it), the repeats of one row included."""
    for request in requests:
        request.uuid = request.uuid or uuid_lib.uuid4().hex
    seen: set[str] = set()
    for request in requests:
        if request.uuid in seen:
            raise ValueError(f"two rollout requests share the uuid {request.uuid!r}; each trajectory needs its own "
                             "(leave uuid empty to get a fresh one)")
        seen.add(request.uuid)


async def _lockstep(engine: InferEngine, runs: list[TrajectoryRun], config: RequestConfig,
                    adapter: str | None) -> None:
    while True:
        for run in runs:
            if not run.done and run.budget() <= 0:
                run.finish(cut=True)
        active = [run for run in runs if not run.done]
        if not active:
            return
        budgets = [run.budget() for run in active]
        batch_config = dataclasses.replace(config, max_tokens=max(budgets))
        responses = await asyncio.to_thread(engine.infer, [run.next_request(adapter) for run in active], batch_config)
        await asyncio.gather(*(run.after_turn(response.choices[0], response.policy_version, budget)
                               for run, response, budget in zip(active, responses, budgets)))


async def _on_its_own(run: TrajectoryRun, generate: Generate, config: RequestConfig, adapter: str | None) -> None:
    while not run.done:
        budget = run.budget()
        if budget <= 0:
            run.finish(cut=True)
            return
        response = await generate(run.next_request(adapter), dataclasses.replace(config, max_tokens=budget))
        await run.after_turn(response.choices[0], response.policy_version)

