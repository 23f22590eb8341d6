"""guess-number-vf: a multi-turn verifiers environment, written against verifiers' own API and nothing of swiftlike.

The model guesses a secret whole number in [1, high]; after each wrong guess the environment answers "higher" or
"lower", until the guess is right or `max_turns` guesses are spent. The rubric pays 1 for finding the number and
a bonus for finding it in fewer guesses. swiftlike trains on it unchanged through its `verifiers` adapter.
"""
import random
import re

import verifiers as vf
from datasets import Dataset

SYSTEM = ("Guess the secret whole number. Answer with one number inside <guess></guess> tags, for example "
          "<guess>7</guess>. After a wrong guess you are told whether the secret is higher or lower.")
GUESS = re.compile(r"<guess>\s*(-?\d+)\s*</guess>")


def read_guess(text: str) -> int | None:
    found = GUESS.findall(text or "")
    return int(found[-1]) if found else None


class GuessNumberEnv(vf.MultiTurnEnv):
    async def setup_state(self, state: vf.State) -> vf.State:
        state["guesses"] = []
        return state

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs) -> vf.Messages:
        guess = read_guess(messages[-1]["content"])
        secret = int(state["answer"])
        state["guesses"].append(guess)
        if guess is None:
            return [vf.UserMessage(content="I could not read a guess: answer like <guess>7</guess>.")]
        if guess == secret:
            state["final_env_response"] = [vf.UserMessage(content="Correct!")]
            return state["final_env_response"]
        return [vf.UserMessage(content=f"{guess} is wrong: the secret is {'higher' if secret > guess else 'lower'}.")]


def found_it(state: vf.State, answer: str, **kwargs) -> float:
    return 1.0 if int(answer) in state.get("guesses", []) else 0.0


def few_guesses(state: vf.State, answer: str, **kwargs) -> float:
    guesses = state.get("guesses", [])
    if int(answer) not in guesses:
        return 0.0
    return 1.0 / (guesses.index(int(answer)) + 1)


def load_environment(high: int = 8, size: int = 64, seed: int = 0, max_turns: int = 4) -> vf.Environment:
    picker = random.Random(seed)
    rows = [{"question": f"The secret is a whole number from 1 to {high}. Your guess?",
             "answer": str(picker.randint(1, high))} for _ in range(size)]
    rubric = vf.Rubric(funcs=[found_it, few_guesses], weights=[1.0, 0.5])
    return GuessNumberEnv(dataset=Dataset.from_list(rows), system_prompt=SYSTEM, rubric=rubric, max_turns=max_turns)
