"""bench_reward's baseline judge, loaded into the trainer with --external_plugins: the same generative judge as
`--reward_funcs llm_judge`, answered by a vLLM engine inside the trainer's own process instead of a server.

This is how a judge runs when it is not a service (ms-swift's GenRM plugin on an in-process `--reward_model`): the
trainer stops after each batch's generation and waits for the judge on its own core. The template and the score
rule are llm_judge's; only where the judge runs differs. `BENCH_JUDGE_MODEL` and `BENCH_JUDGE_TEMPLATE` (set by
bench_reward.py) name the judge and its prompt file.
"""
import os
from collections.abc import Sequence

from swiftlike.infer.engine import EngineSpec, build_engine
from swiftlike.infer.engine.vllm_engine import VllmOptions
from swiftlike.infer.protocol import InferRequest, RequestConfig
from swiftlike.rl.rewards import LlmJudge, register_reward


class InProcessJudge:
    """llm_judge's JudgeServer interface on an engine in this process."""

    def __init__(self, model: str):
        self.model_name = model
        self.engine = build_engine(EngineSpec("vllm", model=model, torch_dtype="float32",
                                              options=VllmOptions(torch_dtype="float32", max_model_len=1024)))

    def chat(self, conversations: Sequence[list[dict]], *, temperature: float, max_tokens: int) -> list[str]:
        answers = self.engine.infer([InferRequest(messages=c) for c in conversations],
                                    RequestConfig(max_tokens=max_tokens, temperature=temperature))
        return [a.choices[0].text for a in answers]


class InTrainerJudge(LlmJudge):
    def __init__(self, judge_temperature: float = 0.0, judge_max_tokens: int = 512):
        super().__init__(InProcessJudge(os.environ["BENCH_JUDGE_MODEL"]), os.environ["BENCH_JUDGE_TEMPLATE"],
                         judge_temperature, judge_max_tokens)


register_reward("in_trainer_judge", InTrainerJudge)
