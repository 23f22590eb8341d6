"""Trainer side of server mode: an HTTP client per rollout server, and `RemoteEngine`, which puts one or
more servers behind the same `InferEngine` interface as an in-process engine, so the GRPO loop does not
know (or care) where generation happens or how weights travel.
"""
from __future__ import annotations

from dataclasses import asdict

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

import requests

from ...infer.engine.base import InferEngine
from ...rl.core.options import WeightSync
from ...infer.protocol import Choice, InferRequest, InferResponse, RequestConfig, StreamDelta, TokenLogprob, Usage
from ...template import Template
from ...utils import get_logger
from ...utils.service_client import ServerError, ServiceClient
from ..wire.delta import SyncedWeights, SyncStats
from ..wire.fingerprint import WeightsFingerprint

logger = get_logger("swiftlike.rollout")

GENERATIONS_IN_FLIGHT = 8  # generation batches one trainer may have on the servers at once
GENERATE_READ_TIMEOUT = 1800.0  # seconds one generation batch may take before the client gives up on it


class RolloutServerError(ServerError):
    """The server refused a request (4xx / 500) or stopped answering; the message says which and why."""


class ServerClient(ServiceClient):
    """One rollout server. Transient failures (connection refused or reset, 502-504) are retried with
    exponential backoff until `timeout` seconds (--vllm_server_timeout) have passed; a 4xx is the caller's mistake
    and raised at once. One answer may take up to GENERATE_READ_TIMEOUT (a generation batch), independent of
    the retry deadline."""

    def __init__(self, host: str, port: int, timeout: float, api_key: str | None = None):
        # requests (ServiceClient's), not httpx: httpx sends a large body ~10x slower (264 MiB: 6.9 s vs 0.7 s
        # here), and weight buckets are hundreds of MiB.
        super().__init__(f"http://{host}:{port}", timeout, api_key, timeout_flag="--vllm_server_timeout",
                         hint=f"Is `swiftlike rollout --port {port}` running and reachable?", name="rollout server",
                         pool_size=64, read_timeout=GENERATE_READ_TIMEOUT)
        self.host, self.port = host, port

    def request(self, method: str, path: str, **kwargs) -> dict:
        try:
            return super().request(method, path, **kwargs)
        except ServerError as e:
            raise RolloutServerError(str(e), e.status) from e


class RemoteEngine(InferEngine):
    """Rollout servers as one engine: a batch is split across servers, weight updates go to all of them.

    Policy versions count the syncs made here: every committed update (full, delta or adapter) puts the
    servers at this engine's next version, so each server's own count is mapped onto it (`ServerVersions`),
    and answers from several servers, a server that served an earlier run, or one that restarted mid-run
    (its count starts again at 0; the next update, full since a delta is refused, re-bases it) all compare
    directly with the trainer's.

    With `weight_sync="delta"` the first update is full and asks each server to keep a copy; later ones send
    only the changed elements (delta.py) against the weights id each server answered at its last commit.
    A server that holds other weights answers 409 at begin, and this update goes full instead (logged).
    `last_sync` says what the latest update sent.
    """

    def __init__(self, clients: list[ServerClient], template: Template, transport, weight_sync: WeightSync = "full"):
        self.clients = clients
        self.template = template
        self.transport = transport
        self.weight_sync = weight_sync
        self.last_sync = SyncStats()
        self._synced: SyncedWeights | None = None  # what every server holds after the last delta-mode update
        self._weights_ids: list[str] = []
        infos = [c.get("/info") for c in clients]  # waits (up to the timeout) for servers still starting
        self.model_name = infos[0]["model"]
        self._dtype = infos[0]["dtype"]
        self._max_model_len = min(int(i["max_model_len"]) for i in infos)
        models = {i["model_dir"] for i in infos}
        if len(models) > 1:
            raise RolloutServerError(f"the rollout servers serve different models ({sorted(models)}); start them "
                                     "all with the trainer's --model")
        self._supports_lora = all(i["enable_lora"] for i in infos)
        served = [(i.get("multi_turn") or {}) for i in infos]
        if len({(m.get("scheduler"), m.get("max_turns")) for m in served}) > 1:
            each = ", ".join(f"{c.url}: {m.get('scheduler')} (max_turns {m.get('max_turns')})"
                             for c, m in zip(clients, served))
            raise RolloutServerError(f"the rollout servers run different multi-turn schedulers ({each}); start them "
                                     "all with the same --multi_turn_scheduler and --max_turns")
        self.multi_turn: dict | None = infos[0].get("multi_turn")  # what the servers' scheduler is; None: no scheduler
        self._versions = [ServerVersions(i["policy_version"]) for i in infos]
        self.policy_version = 0
        self._adapters: dict[str, str] = {}
        self._trainer_base: WeightsFingerprint | None = None
        # Several generation batches may be in flight at once (--async_generate with --max_staleness > 1),
        # each split across every server.
        self._pool = ThreadPoolExecutor(max(len(clients), 1) * GENERATIONS_IN_FLIGHT,
                                        thread_name_prefix="swiftlike-remote")
        logger.info("rollout servers: %s (%s, %s)", ", ".join(c.url for c in clients), self.model_name, self.dtype)

    @property
    def adapters(self) -> dict[str, str]:
        return dict(self._adapters)

    @property
    def dtype(self) -> str:
        return self._dtype

    @property
    def max_model_len(self) -> int:
        """The smallest of the servers' limits: a batch may land on any of them."""
        return self._max_model_len

    @property
    def supports_lora(self) -> bool:
        return self._supports_lora

    def infer(self, requests: list[InferRequest], config: RequestConfig, use_tqdm: bool = False) -> list[InferResponse]:
        for r in requests:
            self.check_adapter(r)
        share = -(-len(requests) // len(self.clients))
        chunks = [(i, requests[k:k + share]) for i, k in enumerate(range(0, len(requests), share))]
        futures = [self._pool.submit(self._generate, i, chunk, config) for i, chunk in chunks]
        return [resp for f in futures for resp in f.result()]

    def infer_on(self, server: int, requests: list[InferRequest], config: RequestConfig) -> list[InferResponse]:
        """All of `requests` on server `server` (an index into this engine's servers), in the calling thread: one
        group of a batch whose groups the caller spreads and runs concurrently (rl/online/scoring.py)."""
        for r in requests:
            self.check_adapter(r)
        return self._generate(server % len(self.clients), requests, config)

    def _generate(self, server: int, requests: list[InferRequest], config: RequestConfig) -> list[InferResponse]:
        out: list[InferResponse | None] = [None] * len(requests)
        for adapter in dict.fromkeys(r.adapter for r in requests):  # one call per adapter
            group = [i for i, r in enumerate(requests) if r.adapter == adapter]
            body = {"prompts": [{"input_ids": self.prompt_ids(requests[i])} for i in group], "adapter": adapter,
                    "config": asdict(config)}
            result = self.clients[server].post("/generate", json=body)
            local = self._versions[server].local
            for i, res in zip(group, result["results"]):
                choices = [Choice(k, c["text"], c["token_ids"], c["finish_reason"],
                                  [TokenLogprob(t, "", lp) for t, lp in zip(c["token_ids"], c["logprobs"])]
                                  if c["logprobs"] is not None else None,
                                  [(local(v), n) for v, n in c["version_spans"]] if c.get("version_spans") else None)
                           for k, c in enumerate(res["choices"])]
                usage = Usage(len(res["prompt_ids"]), sum(len(c.token_ids) for c in choices))
                version = local(res["policy_version"])
                out[i] = InferResponse(choices, usage, res["prompt_ids"], version)
        return out

    def run_trajectories(self, rows: list[dict], config: RequestConfig, limit_scope: str,
                         adapter: str | None = None, server: int | None = None) -> list[dict]:
        """Multi-turn rollouts by the servers' scheduler (POST /rollout): one finished trajectory per row
        (`messages`, `tools`, `data_dict`), as the server's Trajectory fields, with `version_spans` on this
        engine's count. The rows are split across the servers like `infer`'s requests."""
        if adapter is not None:
            self.check_adapter(InferRequest(messages=rows[0]["messages"], adapter=adapter))
        share = -(-len(rows) // len(self.clients))
        chunks = [(i, rows[k:k + share]) for i, k in enumerate(range(0, len(rows), share))]
        body = {"adapter": adapter, "config": asdict(config), "completion_length_limit_scope": limit_scope}
        if server is not None:  # one group, in the calling thread (as `infer_on`)
            return self._rollout(server % len(self.clients), {**body, "rows": rows})
        futures = [self._pool.submit(self._rollout, i, {**body, "rows": chunk}) for i, chunk in chunks]
        return [t for f in futures for t in f.result()]

    def _rollout(self, server: int, body: dict) -> list[dict]:
        trajectories = self.clients[server].post("/rollout", json=body)["trajectories"]
        local = self._versions[server].local
        for t in trajectories:
            if t["version_spans"] is not None:
                t["version_spans"] = [(local(v), n) for v, n in t["version_spans"]]
        return trajectories

    def stream(self, request: InferRequest, config: RequestConfig) -> Iterator[StreamDelta]:
        """The rollout server answers whole batches; a stream is the whole answer as one piece."""
        for c in self.infer([request], config)[0].choices:
            yield StreamDelta(c.index, c.text, c.token_ids, c.finish_reason)

    def add_adapter(self, name: str, path: str) -> None:
        versions = self.transport.send_adapter(self.clients, name, path)
        self._adapters[name] = str(path)
        self._count(versions)

    def update_weights(self, named_tensors: Iterable[tuple[str, object]]) -> None:
        if self.weight_sync == "delta" and self._synced is not None:
            try:
                self._count(self._push_delta(named_tensors))
                return
            except RolloutServerError as e:
                if e.status != 409:
                    raise
                logger.warning("delta weight sync refused (%s); sending the full weights instead", e)
        self._count(self._push_weights(named_tensors))

    def _push_weights(self, named_tensors: Iterable[tuple[str, object]]) -> list[int]:
        """One full-weight update on every server; returns each server's new policy version. Under
        --weight_sync delta the servers keep a copy of what was sent, and so does this engine, for the deltas
        that follow."""
        from .transport import cast
        self._synced = None
        kept: dict[str, object] = {}
        stats = SyncStats()

        def pieces():
            for name, t in cast(named_tensors, self.dtype):
                if self.weight_sync == "delta":
                    kept[name] = t.to("cpu", copy=True)
                stats.bytes += t.numel() * t.element_size()
                stats.changed += t.numel()
                stats.total += t.numel()
                yield {name: t}
        versions = self._update(pieces(), [{"weight_sync": self.weight_sync}] * len(self.clients))
        if self.weight_sync == "delta":
            self._synced = SyncedWeights(kept)
        self.last_sync = stats
        return versions

    def _push_delta(self, named_tensors: Iterable[tuple[str, object]]) -> list[int]:
        """Only what changed since the last update; the copy here is dropped unless every server commits."""
        from .transport import cast
        synced, self._synced = self._synced, None
        stats = SyncStats()
        pieces = (entries for name, t in cast(named_tensors, self.dtype) if (entries := synced.advance(name, t, stats)))
        versions = self._update(pieces, [{"delta_base": base} for base in self._weights_ids])
        self._synced, self.last_sync = synced, stats
        return versions

    def _update(self, pieces, begin_bodies: list[dict]) -> list[int]:
        """Begin on every server, send the pieces in buckets, commit; aborts everywhere on any failure."""
        from .transport import group
        update_ids: list[str] = []
        try:
            for client, body in zip(self.clients, begin_bodies):
                update_ids.append(client.post("/update_weights/begin", json=body)["update_id"])
            for bucket in group(pieces, self.transport.bucket_bytes):
                self.transport.send(self.clients, update_ids, bucket)
            answers = [c.post("/update_weights/commit", json={"update_id": u})
                       for c, u in zip(self.clients, update_ids)]
        except BaseException:
            for c, u in zip(self.clients, update_ids):
                try:
                    c.http.post(c.url + "/update_weights/abort", json={"update_id": u}, timeout=5.0)
                except requests.RequestException:
                    pass
            raise
        finally:
            self.transport.after_update()
        self._weights_ids = [a["weights_id"] for a in answers]
        return [a["policy_version"] for a in answers]

    def ensure_base_weights(self, base_tensors: Callable[[], Iterable[tuple[str, object]]], trainer_model: str
                            ) -> bool:
        """Before a LoRA-only sync: check that every server serves the trainer's base weights; returns
        whether they had to be restored.

        The adapter is applied on top of whatever base the server holds, and a server keeps the weights of
        an earlier full sync (a merged-LoRA or full fine-tuning run) until it restarts. So each server's
        fingerprint (fingerprint.py, on /info) is compared with that of `base_tensors()` (HF names, LoRA
        excluded; computed once, since LoRA training leaves the base frozen). This costs one GET /info per
        server, so it runs before every adapter push and also catches a server changed under a running trainer.

        - Same fingerprint: nothing to do.
        - Same layout (names and shapes), other values: the trainer holds the exact base it trains on, so
          it pushes it once through the full-weight update path (what a server restart would achieve, at
          the cost of one full sync, sent to every server since the collective transports broadcast to
          all), re-checks, and goes on with the adapter. The restore is not a policy change: policy
          versions keep counting this trainer's syncs.
        - Other layout: a different model, which a weight update cannot turn into this one; stop with an
          error that says which server to restart with which model.
        """
        if self._trainer_base is None:
            self._trainer_base = WeightsFingerprint.of(base_tensors(), self.dtype)
        mine = self._trainer_base
        stale = []
        for client in self.clients:
            info = self._info_with_weights(client)
            served = info["weights"]
            if served["layout"] != mine.layout:
                raise RolloutServerError(
                    f"rollout server {client.url} serves {info['model']} ({info['model_dir']}), a different "
                    f"model from the trainer's {trainer_model}: weight layout {served['layout'][:12]} "
                    f"(fingerprint {served['fingerprint'][:12]}) against the trainer's {mine.layout[:12]} "
                    f"({mine.fingerprint[:12]}). LoRA-only sync puts the adapter on the server's base "
                    f"model, so restart the server with `swiftlike rollout --model {trainer_model} "
                    "--vllm_enable_lora true`")
            if served["fingerprint"] != mine.fingerprint:
                stale.append((client, served))
        if not stale:
            return False
        for client, served in stale:
            logger.warning(
                "rollout server %s does not serve the trainer's base weights (fingerprint %s, left by a full "
                "update at its policy version %s; the trainer's base is %s): restoring them with one full "
                "update before LoRA-only sync", client.url, served["fingerprint"][:12],
                served["full_update_version"], mine.fingerprint[:12])
        versions = self._push_weights(base_tensors())
        for server, v in zip(self._versions, versions):
            server.rebase(v, self.policy_version)
        still = [c.url for c in self.clients
                 if self._info_with_weights(c)["weights"]["fingerprint"] != mine.fingerprint]
        if still:
            raise RolloutServerError(f"rollout servers {still} still do not serve the trainer's base weights "
                                     f"(fingerprint {mine.fingerprint[:12]}) after restoring them; restart them "
                                     f"with `swiftlike rollout --model {trainer_model} --vllm_enable_lora true`")
        logger.warning("base weights restored on %s (fingerprint %s)", ", ".join(c.url for c, _ in stale),
                       mine.fingerprint[:12])
        return True

    @staticmethod
    def _info_with_weights(client: ServerClient) -> dict:
        info = client.get("/info")
        if "weights" not in info:
            raise RolloutServerError(f"rollout server {client.url} does not report its weights' fingerprint on "
                                     "/info (an older swiftlike); upgrade it to use LoRA-only sync")
        return info

    def follow_update(self, adapter: str | None) -> None:
        """Another trainer process pushed this sync to these (shared) servers: count it, re-read where each
        server's versions stand (the pusher may also have restored a base), and know its adapter."""
        self.policy_version += 1
        for server, c in zip(self._versions, self.clients):
            server.rebase(c.get("/info")["policy_version"], self.policy_version)
        if adapter is not None:
            self._adapters[adapter] = "(pushed by another trainer process)"

    def _count(self, versions: list[int]) -> None:
        """One committed update: every server now holds this engine's next version, whatever its own count."""
        self.policy_version += 1
        for server, client, v in zip(self._versions, self.clients, versions):
            if server.local(v) != self.policy_version:
                logger.warning("rollout server %s is at its policy version %d, this trainer's %d: it restarted or "
                               "another trainer updated it; its versions are counted from this update on",
                               client.url, v, self.policy_version)
            server.rebase(v, self.policy_version)

    def reset_prefix_cache(self) -> None:
        for c in self.clients:
            c.post("/reset_prefix_cache")

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self.transport.close()
        for c in self.clients:
            c.close()


class ServerVersions:
    """One server's policy versions on this engine's count: `local = server - offset`, the offset set at each
    update (`rebase`). A restarted server counts from 0 again, so the update after it gets a new offset; the
    versions below that update keep the offset they were sampled under (tokens a restarted server sampled
    from its checkpoint, before the trainer's update reached it, map to the start's version, not the update's).
    """

    def __init__(self, server_version: int):
        self._offsets: list[tuple[int, int]] = [(-1 << 62, server_version)]  # (first server version, offset)

    def rebase(self, server_version: int, local_version: int) -> None:
        offset = server_version - local_version
        if offset == self._offsets[-1][1]:
            return
        # a restarted server's numbers run again below the earlier updates': theirs belonged to the old process
        self._offsets = [(start, o) for start, o in self._offsets if start < server_version]
        self._offsets.append((server_version, offset))

    def local(self, server_version: int) -> int:
        offset = next(o for start, o in reversed(self._offsets) if start <= server_version)
        return server_version - offset
