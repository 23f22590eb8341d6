"""`swiftlike rollout`: a vLLM engine behind FastAPI, for trainers on other processes or machines.

Generation runs in the engine's continuous batcher; a weight or adapter update interrupts it between two
engine steps and the interrupted requests continue under the new weights (partial rollout, partial.py),
so an update never waits for a generation batch to drain, and every answer says which policy version
produced which of its tokens (`version_spans`; `policy_version` is the oldest of them). The version
counts applied weight updates (full or adapter); a trainer compares it with its own to measure staleness.
The server also keeps a fingerprint of the base weights it serves (fingerprint.py): of the checkpoint at
load, then of what each full update left loaded, so a LoRA-only trainer can check its base before
pushing an adapter on top.
Every full or delta commit gets a fresh weights id (so does a start): a delta update names the id of the
weights it was computed against, and is refused with 409 when the server holds other weights (it
restarted, or another trainer updated it), so the trainer falls back to a full update. A trainer asking for
delta sync has the server keep a copy of the weights it sent (`SyncedWeights`: one model in the serving
dtype, CPU), which each delta patches before the engine reloads from it.
Anything a client gets wrong is a 4xx with a message, and the server keeps serving.
"""
from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ...arguments.rollout_args import RolloutServerArguments
from ...infer.protocol import InferRequest, RequestConfig
from ...rl.core.options import WeightSync
from ...utils import get_logger
from ..wire.delta import DeltaError, SyncedWeights
from ..wire.fingerprint import checkpoint_fingerprint
from .partial import UpdateGate, generate_resumable, resumable
from .trajectories import MultiTurnServing
from ..wire.buckets import WeightStager, WeightUpdateError, checkpoint_shapes

logger = get_logger("swiftlike.rollout")

JSON_BODY_LIMIT = 64 << 20  # requests other than weight buckets


class RequestTooLarge(ValueError):
    """Answered with 413."""


class StaleDeltaBase(WeightUpdateError):
    """A delta computed against weights this server does not hold; answered with 409."""


class RolloutService:
    """The engine, its policy version and the weight update in progress; engine calls run on one thread."""

    def __init__(self, args: RolloutServerArguments, engine_factory):
        self.args = args
        self._engine_thread = ThreadPoolExecutor(1, thread_name_prefix="swiftlike-engine")
        # vLLM is created on the thread that will drive it
        self.engine = self._engine_thread.submit(engine_factory).result()
        self.stager = WeightStager(checkpoint_shapes(self.engine.model_dir))
        self.version = 0
        start = time.time()
        self.weights = checkpoint_fingerprint(self.engine.model_dir, self.dtype)
        logger.info("base weights fingerprint %s (%d tensors, %.1f s)", self.weights.fingerprint[:12],
                    len(self.weights.digests), time.time() - start)
        self.full_update_version: int | None = None  # the policy version of the last full update; None: checkpoint
        self.weights_id = uuid.uuid4().hex  # changes with every full or delta commit
        self.synced: SyncedWeights | None = None  # kept for delta updates when the last full update asked
        self.samples_generated = 0  # completions served so far (shows how a trainer spreads its batches)
        self._adapter_root = Path(tempfile.mkdtemp(prefix="swiftlike-rollout-adapters-"))
        self._adapter_dirs: dict[str, list[Path]] = {}
        self._collective = None
        self._gate: UpdateGate | None = None  # made on the serving event loop, at its first use
        multi_turn = args.multi_turn_options()
        # --multi_turn_scheduler: POST /rollout runs it here (trajectories.py); None: one turn per prompt
        self.multi_turn = MultiTurnServing(multi_turn, self.engine.template) if multi_turn.enabled else None

    async def on_engine(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._engine_thread, fn, *args)

    @property
    def gate(self) -> UpdateGate:
        if self._gate is None:
            self._gate = UpdateGate()
        return self._gate

    async def change_engine(self, fn, *args):
        """An update of the engine (weights, adapter, cache): generation in flight is cut and resumes after it."""
        def paused():
            with self.engine.between_steps():
                return fn(*args)
        return await self.gate.update(lambda: self.on_engine(paused))

    @property
    def dtype(self) -> str:
        return self.engine.dtype

    def info(self) -> dict:
        import torch
        import vllm

        from ...utils.version import __version__
        return {"model": self.engine.model_name, "model_dir": str(self.engine.model_dir),
                "dtype": self.dtype, "policy_version": self.version, "adapters": sorted(self.engine.adapters),
                "samples_generated": self.samples_generated,
                "in_flight": self.gate._running if self._gate is not None else 0,
                "partial_rollouts": self.gate.interrupted if self._gate is not None else 0,
                "tokens_generated": self.gate.tokens if self._gate is not None else 0,
                "max_model_len": self.max_model_len, "enable_lora": self.engine.supports_lora,
                "multi_turn": self.multi_turn.info() if self.multi_turn is not None else None,
                "weights": {"fingerprint": self.weights.fingerprint, "layout": self.weights.layout,
                            "id": self.weights_id, "delta_base": self.synced is not None,
                            "tensors": len(self.weights.digests), "full_update_version": self.full_update_version},
                "versions": {"swiftlike": __version__, "vllm": vllm.__version__, "torch": torch.__version__}}

    @property
    def max_model_len(self) -> int:
        return int(self.engine.max_model_len)

    # ------------------------------------------------------------------ generation
    def check_generate(self, requests: list[InferRequest], config: RequestConfig) -> None:
        if len(requests) * config.n > self.args.max_prompts:
            raise RequestTooLarge(f"{len(requests)} prompts x n={config.n} exceeds the server's --max_prompts "
                                  f"{self.args.max_prompts}; split the batch")
        vocab = len(self.engine.tokenizer)
        for r in requests:
            ids = self.engine.prompt_ids(r)
            if r.input_ids is not None and not all(isinstance(t, int) and 0 <= t < vocab for t in ids):
                raise ValueError(f"input_ids must be token ids in [0, {vocab})")
            if len(ids) + config.max_tokens > self.max_model_len:
                raise ValueError(f"prompt of {len(ids)} tokens + max_tokens {config.max_tokens} exceeds the "
                                 f"server's max_model_len {self.max_model_len} (--vllm_max_model_len)")

    async def generate(self, requests: list[InferRequest], config: RequestConfig, cut_at_updates: bool = True):
        """`cut_at_updates=False` (the OpenAI routes, whose answers cannot say which version made which token):
        an update waits for these requests, as it does for any whose settings would not resume exactly."""
        self.check_generate(requests, config)
        if cut_at_updates and resumable(config):
            responses = await asyncio.gather(*(generate_resumable(self.engine, self.gate, lambda: self.version, r,
                                                                  config) for r in requests))
        else:
            async def whole():
                version = self.version
                answers = await asyncio.gather(*(self.engine.generate_async(r, config) for r in requests))
                for a in answers:
                    a.policy_version = version
                return answers
            responses = await self.gate.run(whole)
        self.samples_generated += sum(len(r.choices) for r in responses)
        return responses

    async def rollout(self, rows: list[dict], config: RequestConfig, adapter: str | None, limit_scope) -> list[dict]:
        """Finished multi-turn trajectories, one per row (trajectories.py)."""
        if self.multi_turn is None:
            raise ValueError("POST /rollout runs a multi-turn scheduler, and this server has none; start it with "
                             "--multi_turn_scheduler NAME, or use POST /generate for one turn per prompt")
        if len(rows) > self.args.max_prompts:
            raise RequestTooLarge(f"{len(rows)} rows exceeds the server's --max_prompts {self.args.max_prompts}; "
                                  "split the batch")
        return await self.multi_turn.run(self, rows, config, adapter, limit_scope)

    # ------------------------------------------------------------------ weights
    def begin(self, delta_base: str | None, weight_sync: WeightSync) -> str:
        self.check_delta_base(delta_base)
        return self.stager.begin(delta_base, weight_sync)

    def check_delta_base(self, delta_base: str | None) -> None:
        if delta_base is None or (self.synced is not None and delta_base == self.weights_id):
            return
        held = (f"weights {self.weights_id[:12]}" + ("" if self.synced is not None else
                                                       ", with no copy kept for deltas"))
        raise StaleDeltaBase(f"delta update computed against weights {delta_base[:12]}, but this server holds {held} "
                             "(it restarted, or another trainer updated it since): send a full update")

    def commit(self, update_id: str) -> dict:
        """Engine thread: apply a complete update, then count it; returns the policy version and weights id."""
        if update_id in self.stager.committed:  # a retried commit whose answer was lost
            return self.stager.committed[update_id]
        if self._collective is not None:
            self._collective.wait_received()
        update, tensors = self.stager.take(update_id)
        if update.delta_base is not None:
            self.check_delta_base(update.delta_base)  # a full update may have landed since its begin
            try:
                changed = self.synced.patch(tensors)
            except DeltaError as e:
                raise WeightUpdateError(f"delta update rejected, the previous weights keep serving: {e}") from None
            applied = [(n, self.synced.tensors[n]) for n in changed]
            if changed:  # the engine reloads whole tensors (delta.py says why)
                self.engine.update_weights(self.synced.items())
        else:
            applied = list(tensors.items())
            self.engine.update_weights(applied)
            self.synced = SyncedWeights.kept_from(tensors) if update.weight_sync == "delta" else None
        self.weights = self.weights.updated(applied, self.dtype)
        self.version += 1
        self.full_update_version = self.version
        self.weights_id = uuid.uuid4().hex
        answer = {"policy_version": self.version, "weights_id": self.weights_id}
        self.stager.committed[update_id] = answer
        for stale in list(self.stager.committed)[:-16]:  # a retry comes right after its commit
            del self.stager.committed[stale]
        logger.info("weights updated (%s): %d tensors, policy version %d",
                    "delta" if update.delta_base is not None else "full", len(applied), self.version)
        return answer

    def load_adapter(self, name: str, path: Path) -> int:
        """Engine thread: (re)load a LoRA adapter under `name`; requests naming it use it from now on."""
        self.engine.add_adapter(name, str(path))
        self.version += 1
        logger.info("adapter %s loaded from %s, policy version %d", name, path, self.version)
        return self.version

    def adapter_dir(self, name: str) -> Path:
        """A fresh directory for an adapter sent over HTTP; the last two per name are kept (vLLM loads lazily)."""
        dirs = self._adapter_dirs.setdefault(name, [])
        path = self._adapter_root / f"{name}-{len(dirs)}-{self.version}"
        path.mkdir(parents=True)
        dirs.append(path)
        while len(dirs) > 2:
            shutil.rmtree(dirs.pop(0), ignore_errors=True)
        return path

    def collective(self):
        if self._collective is None:
            from ..wire.collective import CollectiveReceiver
            self._collective = CollectiveReceiver(self.stager)
        return self._collective

    def close(self) -> None:
        if self._collective is not None:
            self._collective.close()
        self._engine_thread.submit(self.engine.close).result()
        self._engine_thread.shutdown()
        shutil.rmtree(self._adapter_root, ignore_errors=True)
