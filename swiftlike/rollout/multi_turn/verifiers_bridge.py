"""Runs inside verifiers' own virtualenv (.venv-verifiers), executed by path: verifiers pins packages that conflict
with swiftlike's, so this file imports only verifiers and the standard library, never swiftlike.

It loads one verifiers environment (`vf.load_environment(env_id, **env_args)`, the way prime-rl does) and plays
many episodes of it at once, each through the environment's own `rollout` and rubric, unchanged. The model is
swiftlike's: a `Client` here hands each prompt the environment builds to the parent process and waits for the
reply the parent's engine sampled, so token ids and log-probs stay on the parent's side.

Protocol: one JSON object per line, commands on stdin, events on stdout (logs go to stderr).

    {"op": "rows", "split": "train"|"eval", "n": N}          -> {"event": "rows", "rows": [...]}
    {"op": "start", "episode": E, "split": S, "index": I}   -> {"event": "generate", "episode": E, "messages": [...]}
    {"op": "reply", "episode": E, "text": T}                 -> the next "generate", or
                                                                {"event": "done", "episode": E, "reward": R, ...}
    {"op": "cancel", "episode": E}                           -> nothing (the episode is dropped)
    {"op": "ping", "episode": P}                             -> {"event": "pong", "episode": P}, from the event loop:
                                                                a bridge whose loop is blocked (hung) never answers

A command that cannot be served answers {"event": "error", "episode": E or null, "message": ...}; the bridge goes
on serving the other episodes.
"""
import asyncio
import json
import sys
import threading
import time
import traceback


def _send(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _plain(messages) -> list[dict]:
    """verifiers' message models as the role/content dicts the parent's chat template takes."""
    plain = []
    for message in messages:
        role, content = message["role"], message.get("content")
        if not isinstance(content, str):
            raise ValueError(f"a {role} message whose content is not text ({type(content).__name__}): the verifiers "
                             "adapter plays text environments only")
        if message.get("tool_calls") or role == "tool":
            raise ValueError("a message with tool calls: the verifiers adapter plays text environments only (use "
                             "swiftlike's tool_call_scheduler for tool use)")
        plain.append({"role": role, "content": content})
    return plain


def _json_value(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


class Bridge:
    def __init__(self, env, vf):
        self.env = env
        self.replies: dict[str, asyncio.Future] = {}
        self.tasks: dict[str, asyncio.Task] = {}
        self.datasets: dict[str, object] = {}
        self.client_class = _parent_client_class(vf)

    def dataset(self, split: str):
        if split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
        if split not in self.datasets:
            self.datasets[split] = self.env.get_dataset() if split == "train" else self.env.get_eval_dataset()
        return self.datasets[split]

    def rows(self, split: str, n: int) -> list[dict]:
        dataset = self.dataset(split)
        count = len(dataset) if n <= 0 else min(n, len(dataset))
        return [{"index": i, "prompt": _plain(dataset[i]["prompt"]), "answer": _json_value(dataset[i].get("answer")),
                 "info": _json_value(dataset[i].get("info")), "task": dataset[i].get("task")} for i in range(count)]

    async def play(self, episode: str, split: str, index: int) -> None:
        """One rollout of the environment, then its rubric: what verifiers' own `run_rollout` does, through
        public methods only (`rollout`, `rubric.score_rollout`, `rubric.cleanup`)."""
        try:
            dataset = self.dataset(split)
            if not 0 <= index < len(dataset):
                raise IndexError(f"index {index} is outside the environment's {split} dataset of {len(dataset)} rows")
            env = self.env
            state = await env.rollout(dict(dataset[index]), self.client_class(self, episode), "swiftlike", {})
            if env.score_rollouts:
                await env.rubric.score_rollout(state)
            await env.rubric.cleanup(state)
            error = state.get("error")
            _send({"event": "done", "episode": episode, "reward": float(state.get("reward") or 0.0),
                   "metrics": {k: _json_value(v) for k, v in (state.get("metrics") or {}).items()},
                   "stop_condition": state.get("stop_condition"),
                   "error": None if error is None else f"{type(error).__name__}: {error}",
                   "final": _plain(state.get("final_env_response") or [])})
        except asyncio.CancelledError:
            pass
        except Exception as error:  # the environment's own failure: the parent drops this episode, not the run
            _send({"event": "error", "episode": episode, "message": f"{type(error).__name__}: {error}",
                   "traceback": traceback.format_exc(limit=-6)})
        finally:
            self.tasks.pop(episode, None)
            self.replies.pop(episode, None)

    def handle(self, command: dict) -> None:
        op, episode = command.get("op"), command.get("episode")
        try:
            if op == "rows":
                _send({"event": "rows", "rows": self.rows(command.get("split", "train"), int(command.get("n", 0)))})
            elif op == "start":
                if episode in self.tasks:
                    raise ValueError(f"episode {episode!r} is already playing")
                self.tasks[episode] = asyncio.ensure_future(
                    self.play(episode, command.get("split", "train"), int(command["index"])))
            elif op == "reply":
                reply = self.replies.pop(episode, None)
                if reply is None or reply.done():
                    raise ValueError(f"episode {episode!r} is not waiting for a reply")
                reply.set_result(str(command["text"]))
            elif op == "ping":
                _send({"event": "pong", "episode": episode})
            elif op == "cancel":
                task = self.tasks.pop(episode, None)
                if task is not None:
                    task.cancel()
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as error:
            _send({"event": "error", "episode": episode, "message": f"{type(error).__name__}: {error}"})


def _parent_client_class(vf):
    """A verifiers Client whose API call is a round trip to the parent process: it sends the prompt the
    environment built and returns the text the parent's engine sampled for it."""
    from verifiers.types import Response, ResponseMessage

    class ParentClient(vf.Client):
        def __init__(self, bridge: Bridge, episode: str):
            super().__init__(bridge)
            self.episode = episode

        def setup_client(self, config):
            raise ValueError("ParentClient is built from the bridge, not from a client config")

        async def to_native_tool(self, tool):
            raise ValueError("the verifiers adapter plays text environments only; this one declares tools")

        async def to_native_prompt(self, messages):
            return _plain(messages), {}

        async def get_native_response(self, prompt, model, sampling_args, tools=None, **kwargs):
            if tools:
                raise ValueError("the verifiers adapter plays text environments only; this one offers tools")
            reply = asyncio.get_running_loop().create_future()
            self.client.replies[self.episode] = reply
            _send({"event": "generate", "episode": self.episode, "messages": prompt})
            return await reply

        async def raise_from_native_response(self, response):
            return None

        async def from_native_response(self, response):
            return Response(id=f"swiftlike-{time.time_ns()}", created=int(time.time()), model="swiftlike",
                            message=ResponseMessage(content=response, finish_reason="stop", is_truncated=False))

        async def close(self):
            return None

    return ParentClient


async def serve(bridge: Bridge) -> None:
    """Commands arrive on a thread reading stdin (a blocking read), and are handled on the event loop."""
    loop = asyncio.get_running_loop()
    closed = asyncio.Event()

    def read() -> None:
        for line in sys.stdin:
            if line.strip():
                loop.call_soon_threadsafe(_dispatch, bridge, line)
        loop.call_soon_threadsafe(closed.set)

    threading.Thread(target=read, daemon=True).start()
    await closed.wait()
    for task in list(bridge.tasks.values()):
        task.cancel()


def _dispatch(bridge: Bridge, line: str) -> None:
    try:
        command = json.loads(line)
    except ValueError as error:
        _send({"event": "error", "episode": None, "message": f"a command that is not JSON: {error}"})
        return
    bridge.handle(command)


def main() -> None:
    env_id, env_args = sys.argv[1], json.loads(sys.argv[2])
    try:
        import verifiers as vf
        env = vf.load_environment(env_id, **env_args)
        if env.rubric.has_group_rewards or env.requires_group_rollouts:
            raise ValueError(f"{env_id}'s rubric scores groups of rollouts together; the verifiers adapter scores "
                             "each trajectory on its own")
        if env.tool_defs:
            raise ValueError(f"{env_id} offers tools ({', '.join(tool.name for tool in env.tool_defs)}); the verifiers "
                             "adapter plays text environments (tool use goes through tool_call_scheduler's sandbox)")
    except Exception as error:
        _send({"event": "failed", "message": f"{type(error).__name__}: {error}",
               "traceback": traceback.format_exc(limit=-6)})
        sys.exit(1)
    _send({"event": "ready", "verifiers": vf.__version__, "environment": type(env).__name__})
    asyncio.run(serve(Bridge(env, vf)))


if __name__ == "__main__":
    main()
