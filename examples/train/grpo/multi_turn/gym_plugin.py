"""An --external_plugins file registering a gym environment (examples/train/grpo/multi_turn/gym.sh).

`guess_number`: the model guesses a secret number; after each guess the environment says higher or lower. Each
row's `env_config` column names the environment and configures it (ms-swift's format):
`{"name": "guess_number", "secret": 7, "high": 10}`. A right guess scores 1, the sooner the better (1 on the
first guess, 0.9 on the second, ...; never below 0.5) and ends the episode; a wrong or unreadable one scores 0 and
the game goes on until --max_turns. The `info` of every step (the guess read and the verdict) is kept in the
trajectory's rollout_infos as `env_infos`, so completions.jsonl shows how each game went.

Model output is untrusted: a reply with no number is answered with an observation saying so, never an error.
"""
from __future__ import annotations

import re

from swiftlike.rollout.multi_turn import Env, register_env

SYSTEM = ("You play a guessing game. Think briefly, then answer with one whole number inside "
          "<guess></guess> tags, for example <guess>5</guess>.")


@register_env("guess_number")
class GuessNumber(Env):
    def __init__(self, env_config: dict):
        super().__init__(env_config)
        high, secret = env_config.get("high", 10), env_config.get("secret")
        if not isinstance(high, int) or high < 1:
            raise ValueError(f"guess_number: env_config 'high' must be a whole number >= 1, got {high!r}")
        if not isinstance(secret, int) or not 1 <= secret <= high:
            raise ValueError(f"guess_number: env_config 'secret' must be a whole number from 1 to {high}, "
                             f"got {secret!r}")
        self.high, self.secret, self.guesses = high, secret, 0

    async def reset(self, request):
        return f"I am thinking of a number from 1 to {self.high}. What is your guess?", {"high": self.high}, SYSTEM

    async def step(self, action):
        reply = action[-1].get("content") or ""
        tagged = re.findall(r"<guess>\s*(-?\d+)\s*</guess>", reply)
        numbers = tagged or re.findall(r"-?\d+", reply)
        self.guesses += 1
        if not numbers:
            return ("I could not find a number in your reply. Answer like <guess>5</guess>.", 0.0, False,
                    {"guess": None, "verdict": "no number"})
        guess = int(numbers[-1])
        if guess == self.secret:
            reward = max(0.5, 1.0 - 0.1 * (self.guesses - 1))
            return "Right!", reward, True, {"guess": guess, "verdict": "right", "guesses": self.guesses}
        verdict = "higher" if guess < self.secret else "lower"
        return f"No, my number is {verdict} than {guess}. Guess again.", 0.0, False, {"guess": guess, "verdict": verdict}
