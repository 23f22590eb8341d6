"""GRPO rollout: sample completions through the InferEngine interface and keep the engine in step with the trainer.

Placement is explicit (`--use_vllm`, `--vllm_mode`): `pt` generates with the training model itself (shared
weights, nothing to sync); `colocate` runs an in-process vLLM engine; `server` talks to `swiftlike rollout`
servers through `RemoteEngine`. Both vLLM placements receive either the merged weights (`update_weights`)
or, with `--vllm_enable_lora`, only the LoRA adapter, saved and loaded under a new id. With
`--weight_sync delta` the merged weights go full once, then as the elements that changed in the engine's
dtype (rollout/delta.py): `RemoteEngine` sends those to the servers; colocated, this worker patches its copy
of the engine's weights and the engine reloads from it.

With --multi_turn_scheduler the colocated and pt placements run the scheduler here (rollout/multi_turn); in
server mode the servers run theirs (`POST /rollout`, rollout/server/trajectories.py) and this worker only checks
that its flags name the server's scheduler and turns the finished trajectories into Rollouts.

Every rollout records the policy version that produced it, counted in optimizer steps: the trainer's step
whose weights the engine held (per token span when a rollout server continued a request across a weight
update, partial rollout), so the trainer can bound how stale a sample is when `--async_generate` generates
ahead (`--max_staleness`). Engines count syncs; the worker maps each sync to the step it pushed.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...infer.engine.vllm_engine import VllmOptions
from ...infer.protocol import InferRequest, RequestConfig
from ..core.options import MultiTurnOptions, RolloutOptions, SamplingOptions
from ...train.engine_weights import engine_weights
from ...utils import get_logger
from .distributed import barrier, process_rank, server_shares
from .memory import ColocateMemory

logger = get_logger("swiftlike.rl")

POLICY_ADAPTER = "grpo_policy"
# Turns a colocated engine's default context makes room for when --max_turns is unset (_completion_budget).
DEFAULT_TURN_ALLOWANCE = 8


@dataclass
class Rollout:
    """One sampled completion, or one multi-turn trajectory, and what the engine reported about it.

    A trajectory's `completion_ids` are every id after the first prompt, sampled turns and the ids inserted
    between them (tool results, observations, next-turn headers) in order; `loss_mask` marks which the engine
    sampled, and only those are trained on or counted."""

    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    finish_reason: str
    rollout_logps: list[float] | None  # the engine's per-token log-probs of the sampled tokens (0.0 where inserted)
    row: dict = field(default_factory=dict)  # the dataset row (messages, solution, ...)
    policy_version: int | None = None  # optimizer step of the oldest weights that sampled it; None: always current (pt)
    # (optimizer step, token count) in order: which weights sampled which tokens; None where not tracked
    version_spans: list[tuple[int, int]] | None = None
    loss_mask: list[int] | None = None  # 1 = sampled, 0 = inserted, per completion id; None = every id sampled
    truncated: bool | None = None  # cut by a length limit; None: the engine's finish_reason says (length)
    turns: int = 1  # assistant turns sampled
    messages: list[dict] | None = None  # a trajectory's whole conversation; None for one turn (the row's prompt)
    step_rewards: list[float] = field(default_factory=list)  # the environment's reward of each step
    tool_calls: int = 0
    tool_errors: int = 0
    env_error: str | None = None  # the environment raised: the trajectory is dropped from the loss
    infos: dict = field(default_factory=dict)  # the scheduler's rollout_infos (reward functions see them)

    def __post_init__(self) -> None:
        if self.truncated is None:
            self.truncated = self.finish_reason == "length"
        if self.loss_mask is not None and len(self.loss_mask) != len(self.completion_ids):
            raise ValueError(f"a rollout's loss_mask has {len(self.loss_mask)} entries for "
                             f"{len(self.completion_ids)} completion ids")

    @property
    def answer(self) -> str:
        """What reward functions score as the completion: the last assistant turn's text for a trajectory (the
        final answer), the completion itself for one turn."""
        if self.messages is None:
            return self.text
        last = next((m for m in reversed(self.messages) if m.get("role") == "assistant"), None)
        return (last or {}).get("content") or ""

    @property
    def sampled_tokens(self) -> int:
        return len(self.completion_ids) if self.loss_mask is None else sum(self.loss_mask)


def request_config(sampling: SamplingOptions) -> RequestConfig:
    return RequestConfig(max_tokens=sampling.max_completion_length, temperature=sampling.temperature,
                         top_p=sampling.top_p, top_k=sampling.top_k, repetition_penalty=sampling.repetition_penalty,
                         n=1, logprobs=True)


class RolloutWorker:
    """Owns the engine; `generate` samples, `sync` pushes the trainer's current weights to it.

    `rollout` says where completions come from and how weights reach them, `sampling` how they are drawn,
    `vllm` the engine's settings (colocated); `max_prompt_length` (--max_length) sizes a colocated engine whose
    --vllm_max_model_len is unset. `adopt_server_scheduler`: on servers that run a scheduler, a trainer without
    --multi_turn_scheduler trains on their trajectories (`multi_turn` then names it); False for a trainer that
    cannot (ppo), which is refused instead."""

    def __init__(self, rollout: RolloutOptions, sampling: SamplingOptions, vllm: VllmOptions, resolved, template,
                 model, max_prompt_length: int | None = None, multi_turn: MultiTurnOptions | None = None,
                 scheduler=None, adopt_server_scheduler: bool = True):
        self.options = rollout
        self.sampling = sampling
        self.multi_turn = multi_turn if multi_turn is not None else MultiTurnOptions()
        # Built once by the caller from --multi_turn_scheduler (rollout/multi_turn), before any model loads;
        # None: one turn per prompt, or server mode (the servers run the scheduler).
        self.scheduler = scheduler
        if (scheduler is not None) != (self.multi_turn.enabled and not rollout.server_mode):
            raise ValueError("a RolloutWorker takes a scheduler exactly when --multi_turn_scheduler is set and the "
                             "rollout is not on servers")
        self.model_id = resolved.model_id
        self.template = template
        self.lora_sync = rollout.lora_sync
        self._synced = None  # colocated delta sync: the engine's weights as of the last sync
        self._sync_dir: Path | None = None
        self._old_dirs: list[Path] = []
        self.memory = ColocateMemory(rollout, vllm)
        self._asleep = False
        # --sleep_level 2 drops the engine's weights: the next wake reloads what the last sync pushed (from the
        # model it pushed, whose weights change only at an optimizer step, which a sync follows before any
        # generation), so a second generation in one step (dynamic sampling, regenerated stale groups,
        # --steps_per_generation < --gradient_accumulation_steps, GKD's micro-batches) samples the step's weights.
        self._weights_dropped = False
        self._synced_model = None
        self._step_of_sync = [0]  # the optimizer step whose weights each sync pushed; sync 0 = the start
        self.timeline: list[dict] = []  # wall-clock spans of each generation, drained by the trainer
        # Several trainer processes in server mode: each generates on its share of the servers and pushes the
        # weights of the servers it owns (`server_shares`); shared servers are waited for at every sync.
        self.owns_servers, self.shares_servers = True, False
        if rollout.server_mode:
            addresses = rollout.server_addresses()
            rank, world = process_rank()
            mine, self.owns_servers = server_shares(len(addresses), rank, world)
            self.shares_servers = len(addresses) < world
            self.engine = _remote_engine(rollout, vllm, template, [addresses[i] for i in mine])
            self._check_server_scheduler(adopt_server_scheduler)
        elif rollout.use_vllm:
            from ...infer.engine import EngineSpec, build_engine
            opts = dataclasses.replace(
                vllm, max_model_len=vllm.max_model_len or (max_prompt_length or 1024) + self._completion_budget(),
                tensor_parallel_size=self.memory.tensor_parallel_size, enable_lora=self.lora_sync,
                enable_sleep_mode=self.memory.sleep_level > 0)
            spec = EngineSpec("vllm", torch_dtype=vllm.torch_dtype, logprobs_mode="processed_logprobs", options=opts)
            self.engine = build_engine(spec, resolved=resolved, template=template)
        else:
            from ...infer.engine import EngineSpec, build_engine
            # The training model itself: its weights are the policy's at every step, so no sync is needed.
            # Processed log-probs (after temperature / top-k / top-p), as vLLM reports them to the trainer.
            spec = EngineSpec("pt", max_batch_size=64, logprobs_mode="processed_logprobs")
            self.engine = build_engine(spec, resolved=resolved, template=template, model=model)

    def _check_server_scheduler(self, adopt: bool) -> None:
        """Server mode: the servers run the scheduler (ms-swift's placement). A trainer that names none takes
        theirs (`adopt`; ms-swift's trainer commands do not repeat it); one that names another, or another
        --max_turns, is refused, so the run trains what its flags say."""
        from ...rollout.server.trajectories import check_trainer
        try:
            served = check_trainer(self.engine.multi_turn, self.multi_turn.multi_turn_scheduler,
                                   self.multi_turn.max_turns, adopt=adopt)
        except ValueError:
            self.engine.close()
            raise
        if served is not None and not self.multi_turn.enabled:
            self.multi_turn = dataclasses.replace(self.multi_turn, multi_turn_scheduler=served,
                                                  max_turns=self.engine.multi_turn["max_turns"])
            logger.info("multi-turn: the rollout servers run --multi_turn_scheduler %s (--max_turns %s); training "
                        "on their trajectories", served, self.multi_turn.max_turns)

    def _completion_budget(self) -> int:
        """Context a colocated engine leaves after the prompt when --vllm_max_model_len is unset: one completion,
        or a trajectory's turns with the tool results or observations between them (each turn's allowance
        doubled for those; set --vllm_max_model_len for longer ones)."""
        length = self.sampling.max_completion_length
        if not self.multi_turn.enabled or self.multi_turn.completion_length_limit_scope == "total":
            return length
        return 2 * length * (self.multi_turn.max_turns or DEFAULT_TURN_ALLOWANCE)

    @property
    def needs_sync(self) -> bool:
        return self.options.use_vllm

    @property
    def policy_version(self) -> int | None:
        """The optimizer step of the weights the engine holds (what a sample generated now would carry);
        None for pt, whose samples are always the current policy's."""
        if not self.options.use_vllm:
            return None
        return self._step(self.engine.policy_version if self.engine.policy_version is not None else
                          len(self._step_of_sync) - 1)

    def _step(self, sync_version: int) -> int:
        return self._step_of_sync[min(max(sync_version, 0), len(self._step_of_sync) - 1)]

    def generate(self, rows: list[dict], model=None, server: int | None = None) -> list[Rollout]:
        """One completion per row (rows already repeated num_generations times); with a multi-turn scheduler,
        one trajectory per row. `server` (server mode): all of them on that one of this worker's servers, as one
        group of a batch whose caller records its span (rl/online/scoring.py); else split across the servers."""
        if self.multi_turn.enabled:
            return self._generate_trajectories(rows, model, server)
        config = request_config(self.sampling)
        requests = [InferRequest(messages=_prompt_messages(r), adapter=self._adapter()) for r in rows]
        with self._sampling(model) as start:
            responses = (self.engine.infer(requests, config) if server is None
                         else self.engine.infer_on(server, requests, config))
        if server is None:
            self.record_generation(start, time.time(), len(rows), sum(len(r.choices[0].token_ids) for r in responses))
        local_version = self.policy_version
        out = []
        for row, resp in zip(rows, responses):
            c = resp.choices[0]
            logps = [t.logprob for t in c.logprobs] if c.logprobs is not None else None
            spans = [(self._step(v), n) for v, n in c.version_spans] if c.version_spans else None
            version = self._step(resp.policy_version) if resp.policy_version is not None else local_version
            if spans:
                version = min(v for v, _ in spans)
            out.append(Rollout(list(resp.prompt_token_ids), list(c.token_ids), c.text, c.finish_reason, logps, row,
                               version, spans))
        return out

    def _generate_trajectories(self, rows: list[dict], model, server: int | None = None) -> list[Rollout]:
        """Each row rolled out by the scheduler (rollout/multi_turn): its `tools` column offered to the model,
        its other columns in the request's data_dict for the scheduler and the environment. In server mode the
        servers run their scheduler (POST /rollout) and the columns go only with --vllm_server_pass_dataset."""
        from ...rollout.multi_turn import RolloutRequest, Trajectory, run_trajectories_sync
        options = self.multi_turn
        with self._sampling(model) as start:
            if self.options.server_mode:
                sent = [{"messages": _prompt_messages(r), "tools": r.get("tools"),
                         "data_dict": _extra_columns(r) if options.vllm_server_pass_dataset else {}} for r in rows]
                trajectories = [Trajectory(**t) for t in self.engine.run_trajectories(
                    sent, request_config(self.sampling), options.completion_length_limit_scope, self._adapter(),
                    server=server)]
            else:
                requests = [RolloutRequest(messages=copy.deepcopy(_prompt_messages(r)), tools=r.get("tools"),
                                           data_dict=_extra_columns(r))
                            for r in rows]  # each gets its own uuid, the repeats of a row included
                trajectories = run_trajectories_sync(
                    self.engine, self.template, self.scheduler, requests, request_config(self.sampling),
                    max_turns=options.max_turns, max_completion_length=self.sampling.max_completion_length,
                    limit_scope=options.completion_length_limit_scope, adapter=self._adapter())
        if server is None:
            self.record_generation(start, time.time(), len(rows), sum(sum(t.loss_mask) for t in trajectories))
        local_version = self.policy_version
        return [trajectory_rollout(row, t, self._step, local_version) for row, t in zip(rows, trajectories, strict=True)]

    def _adapter(self) -> str | None:
        return POLICY_ADAPTER if self.lora_sync and POLICY_ADAPTER in self.engine.adapters else None

    @contextlib.contextmanager
    def _sampling(self, model):
        """The engine awake and the policy in eval mode (pt: no dropout while sampling) for one generation;
        after it, the engine asleep again under --sleep_level. Yields the time sampling started."""
        was_training = model is not None and model.training
        if was_training:
            model.eval()
        self._wake()
        try:
            yield time.time()
        finally:
            if was_training:
                model.train()
            if self.memory.sleep_level:  # the trainer gets the GPU memory back until the next generation
                self.engine.sleep(self.memory.sleep_level)
                self._asleep = True
                self._weights_dropped = self.memory.sleep_level >= 2

    def record_generation(self, start: float, end: float, samples: int, tokens: int, background: bool = False) -> None:
        """A generation's span on the trainer's timeline; `background`: prefetched while the trainer learned."""
        self.timeline.append({"event": "generate", "start": start, "end": end, "samples": samples, "tokens": tokens,
                              "background": background})

    def sync(self, model, step: int) -> dict[str, float]:
        """Push the trainer's weights, those of optimizer step `step`; returns sync/bytes (sent by this process),
        sync/seconds and, with delta sync, sync/delta_density (changed elements / all; 1 for a full sync)."""
        from ...rollout.wire.delta import SyncStats
        if not self.needs_sync:
            return {}
        start = time.time()
        # Before the push: an answer that a background generation gets under the new weights maps to `step`.
        self._step_of_sync.append(step)
        self._synced_model = model
        self._wake(reload=self.options.weight_sync == "delta")  # a full push replaces every weight anyway; a delta needs the old ones
        stats = self._push(model) if self.owns_servers else SyncStats()
        if self.shares_servers:
            barrier()  # a shared server has its update before any process generates on it
            if not self.owns_servers:
                self.engine.follow_update(POLICY_ADAPTER if self.lora_sync else None)
        # a process that pushes nothing logs no density (metrics only some ranks log are combined over those)
        return {**stats.metrics(self.options.weight_sync == "delta" and self.owns_servers), "sync/seconds": time.time() - start}

    def _push(self, model):
        """The adapter (LoRA-only sync) or the merged weights to this process's engine; returns its SyncStats."""
        import torch

        from ...rollout.wire.delta import SyncStats
        from ...rollout.client.transport import TORCH_DTYPE_NAMES
        if self.lora_sync:
            if self.options.server_mode:  # a server may still hold an earlier run's full weights
                self.engine.ensure_base_weights(lambda: engine_weights(model, merged=False), self.model_id)
            path = Path(tempfile.mkdtemp(prefix="swiftlike-grpo-lora-"))
            model.save_pretrained(str(path))
            nbytes = sum(f.stat().st_size for f in path.rglob("*.safetensors"))
            # Same name, new LoRA id: vLLM loads the new files on the next request that names it.
            self.engine.add_adapter(POLICY_ADAPTER, str(path))
            self._retire(path)
            return SyncStats(nbytes)
        # The adapted layers' merged weights are new tensors in the engine's dtype, made as they are sent (the base
        # is never written: merging in place and unmerging would move a bf16 base, train/engine_weights.py).
        with torch.no_grad():
            tensors = engine_weights(model, dtype=TORCH_DTYPE_NAMES.get(self.engine.dtype))
            if self.options.server_mode:
                self.engine.update_weights(tensors)
                return self.engine.last_sync
            if self.options.weight_sync == "delta":
                synced, self._synced = self._synced, None  # kept only once the engine has it
                self._synced, stats = push_delta_in_process(self.engine, synced, tensors)
                return stats
            tensors = list(tensors)
            numel = sum(t.numel() for _, t in tensors)
            self.engine.update_weights(tensors)
            return SyncStats(sum(t.numel() * t.element_size() for _, t in tensors), numel, numel)

    def _wake(self, reload: bool = True) -> None:
        """Wake the engine; after a level-2 sleep also give it back its weights (`reload`), which vLLM dropped."""
        if not self._asleep:
            return
        self.engine.wake_up()
        self._asleep = False
        dropped, self._weights_dropped = self._weights_dropped, False
        if not (dropped and reload):
            return
        if self.options.weight_sync == "delta" and self._synced is not None:  # the copy of exactly what the engine held
            self.engine.update_weights(self._synced.items())
        elif self._synced_model is not None:
            self._push(self._synced_model)

    def _retire(self, path: Path) -> None:
        """Keep the last two adapter dirs (vLLM may still read the previous one lazily)."""
        self._old_dirs.append(path)
        while len(self._old_dirs) > 2:
            shutil.rmtree(self._old_dirs.pop(0), ignore_errors=True)

    def close(self) -> None:
        for d in self._old_dirs:
            shutil.rmtree(d, ignore_errors=True)
        self._old_dirs = []
        if self.options.use_vllm:
            self.engine.close()


def push_delta_in_process(engine, synced, tensors):
    """Colocated delta sync: patch the copy of what the engine holds (`synced`; None before the first sync) and
    reload the engine from it; returns the new copy and the SyncStats. vLLM keeps its CPU weights prepacked, so
    there is no engine tensor to patch in place (rollout/delta.py). The engine is not touched when nothing
    changed in its dtype; else it reloads every tensor, so sync/bytes is the whole model: delta sync saves
    bytes on a wire, in server mode."""
    from ...rollout.wire.delta import SyncedWeights, SyncStats, nbytes
    from ...rollout.client.transport import cast
    stats = SyncStats()
    if synced is None:
        synced = SyncedWeights.copy_of(cast(tensors, engine.dtype))
        stats.changed = stats.total = sum(t.numel() for t in synced.tensors.values())
    else:
        for name, t in cast(tensors, engine.dtype):
            synced.advance(name, t, stats)
    if stats.changed:
        engine.update_weights(synced.items())
        stats.bytes = nbytes(synced.tensors.values())
    return synced, stats


def _remote_engine(rollout: RolloutOptions, vllm: VllmOptions, template, addresses: list[tuple[str, int]]):
    from ...rollout.client.remote_engine import RemoteEngine, ServerClient
    from ...rollout.client.transport import make_transport
    clients = [ServerClient(host, port, rollout.vllm_server_timeout, rollout.vllm_server_api_key)
               for host, port in addresses]
    transport = make_transport(rollout.weight_transport, rollout.weight_bucket_mb, rollout.weight_sync_path)
    engine = RemoteEngine(clients, template, transport, rollout.weight_sync)
    if rollout.lora_sync and not engine.supports_lora:
        engine.close()
        raise ValueError("--vllm_enable_lora true syncs only the LoRA adapter, but a rollout server was started "
                         "without LoRA; restart it with `swiftlike rollout ... --vllm_enable_lora true "
                         f"--vllm_max_lora_rank {vllm.max_lora_rank}`")
    return engine


def trajectory_rollout(row: dict, trajectory, step_of: Callable[[int], int], current: int | None) -> Rollout:
    """A finished trajectory as the trainer's Rollout: its engine versions mapped to optimizer steps (`step_of`),
    and its policy version the step of its OLDEST token (a trajectory continued across weight updates is as
    stale as its first turn), or `current` when the engine reports no versions."""
    t = trajectory
    spans = [(step_of(v), n) for v, n in t.version_spans] if t.version_spans else None
    return Rollout(list(t.prompt_ids), list(t.completion_ids), t.text, t.finish_reason, list(t.logprobs), row,
                   min(v for v, _ in spans) if spans else current, spans, loss_mask=list(t.loss_mask),
                   truncated=t.truncated, turns=t.turns, messages=t.messages, step_rewards=list(t.step_rewards),
                   tool_calls=t.tool_calls, tool_errors=t.tool_errors, env_error=t.env_error, infos=dict(t.infos))


def _extra_columns(row: dict) -> dict:
    """A row's columns besides the prompt and its tools (solution, env_config, ...): the scheduler's data_dict."""
    return {k: v for k, v in row.items() if k not in ("messages", "tools")}


def _prompt_messages(row: dict) -> list[dict]:
    messages = row.get("messages")
    if not messages or messages[-1].get("role") != "user":
        raise ValueError("a GRPO dataset row needs `messages` ending in a user turn (the prompt); got "
                         f"{str(row)[:200]}")
    return messages
