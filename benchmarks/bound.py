"""The machine's bound beside a training benchmark's ratio: the model FLOPs a side's run asked for, counted from
its token counts, over its measured seconds, as GFLOP/s and as a share of the fp32 matmul peak that
`benchmarks/roofline.py` measured on this machine (the benchmarks train in fp32).

The ratio to the anchor says which side is faster; this says how far either is from what the machine can do: a
1.2x win at 15% of the peak leaves room that one at 80% does not. FLOPs follow `swiftlike/utils/flops.py` (every
matmul, the output head over every position, causal attention; backward 2x the forward, 1x with LoRA). A run is
described as `Work`, the sequences (token lengths) each kind of pass went over:

- `train`: forward + backward of the trained model (LoRA or full);
- `forward`: no-grad forwards of a model of the same shape: the reference (for LoRA, the same model with its
  adapters disabled), the old policy, a teacher; a sequence is listed once for every such pass;
- `value_train` / `value_forward`: the same body with a one-label head instead of the LM head (PPO's critic,
  trained, and its values and the reward model's score, no-grad);
- `generate`: (prompt length, its completions' lengths): the prompt prefilled once, then each completion's
  tokens decoded one at a time over the prompt and their own prefix (the KV cache), 2·params per token plus
  attention. A prompt sampled G times is prefilled once (what the engine needs with its prefix cache).

Each side is counted with the passes it runs (they differ: e.g. TRL's GRPO adds an old-policy forward for its vLLM
importance-sampling correction), so the fraction is how busy that side kept the machine, not a useful-work score.

Approximations, everywhere: padding, the LoRA adapters' own matmuls, norms, softmax, sampling, the loss and the
optimizer are left out; the output head is counted over every position of a forward, though the RL trainers
compute it only where a completion token is predicted (logits_to_keep) and a prefill only at the last prompt
position, which overstates those passes by about the head's share of the weights (21% for SmolLM2-135M) times
the prompt's share of the tokens. Where a run records only a total, `mean_lengths` gives
its sequences the mean length: the linear terms stay exact, the attention term (quadratic in length) then comes
out a little low for uneven lengths. Prompt lengths no side records come from the dataset
(`dataset_lengths`, the tokenizer's chat template: the same text as swiftlike's templates for the benchmark
models), which is an estimate: such lines are marked "~".
"""
from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's swiftlike, not an installed one
from swiftlike.utils.flops import DecoderShape, forward_flops, train_flops  # noqa: E402


def mean_lengths(tokens: float, sequences: int) -> list[int]:
    """`sequences` lengths adding up to `tokens` (rounded), as even as integers allow: for a run that records
    only totals (the attention term then uses the mean length)."""
    n = max(int(sequences), 1)
    q, r = divmod(round(tokens), n)
    return [q + 1] * r + [q] * (n - r)


@dataclass
class Work:
    """The sequences (token lengths) each kind of pass went over; see the module docstring."""
    train: list[int] = field(default_factory=list)
    lora: bool = False
    gradient_checkpointing: bool = False
    forward: list[int] = field(default_factory=list)
    value_train: list[int] = field(default_factory=list)
    value_forward: list[int] = field(default_factory=list)
    generate: list[tuple[int, list[int]]] = field(default_factory=list)

    def __add__(self, other: Work) -> Work:
        return Work(self.train + other.train, self.lora or other.lora,
                    self.gradient_checkpointing or other.gradient_checkpointing, self.forward + other.forward,
                    self.value_train + other.value_train, self.value_forward + other.value_forward,
                    self.generate + other.generate)

    def flops(self, shape: DecoderShape) -> int:
        body = replace(shape, vocab=1)  # a one-label score head in place of the LM head
        generate = 0
        for prompt, completions in self.generate:
            prefill = forward_flops(shape, [prompt])
            generate += prefill + sum(forward_flops(shape, [prompt + c]) - prefill for c in completions)
        return (train_flops(shape, self.train, lora=self.lora, gradient_checkpointing=self.gradient_checkpointing)
                + forward_flops(shape, self.forward) + train_flops(body, self.value_train)
                + forward_flops(body, self.value_forward) + generate)


def rollout_work(prompt_length: int, completion_means: Iterable[float], prompts: int, group: int = 1, *,
                 lora: bool, forwards: int, value_forwards: int = 0, value_train: bool = False) -> Work:
    """An RL run's work from its per-step mean completion lengths: each step samples `group` completions of
    each of `prompts` prompts of `prompt_length` tokens, then runs `forwards` no-grad forwards (reference, old
    policy, teacher) and `value_forwards` one-label-head forwards over every prompt + completion, and trains the
    policy (and the critic, `value_train`) on them."""
    work = Work(lora=lora)
    for mean in completion_means:
        completions = mean_lengths(mean * prompts * group, prompts * group)
        sequences = [prompt_length + c for c in completions]
        work += Work(train=sequences, lora=lora, forward=sequences * forwards,
                     value_train=sequences if value_train else [], value_forward=sequences * value_forwards,
                     generate=[(prompt_length, completions[i * group:(i + 1) * group]) for i in range(prompts)])
    return work


def _offline_model_dir(model: str) -> Path:
    """The model's directory as the benchmarks' runs resolve it (offline: packaged or tiny-random weights)."""
    os.environ.setdefault("SWIFTLIKE_OFFLINE", "1")
    from swiftlike.model import resolve_model
    return Path(resolve_model(model).model_dir)


def model_shape(model: str) -> DecoderShape:
    """The decoder shape from the config.json of `model` (a name or path, as the benchmark passes it)."""
    return DecoderShape.of(json.loads((_offline_model_dir(model) / "config.json").read_text()))


def dataset_lengths(model: str, dataset: str, prompt_only: bool, max_length: int | None = None,
                    seed: int = 42) -> list[int]:
    """Token lengths of the dataset's rows rendered by the model's chat template: the prompt alone (a trailing
    assistant answer dropped, the generation prompt added) or the whole conversation, cut at `max_length`."""
    from transformers import AutoTokenizer

    from swiftlike.dataset import load_dataset
    tokenizer = AutoTokenizer.from_pretrained(_offline_model_dir(model))
    lengths = []
    for row in load_dataset([dataset], seed=seed):
        messages = row["messages"]
        if prompt_only and messages[-1]["role"] == "assistant":
            messages = messages[:-1]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=prompt_only, tokenize=True,
                                            return_dict=True)["input_ids"]
        lengths.append(min(len(ids), max_length or len(ids)))
    return lengths


def mean_prompt_length(model: str, dataset: str) -> int:
    return round(statistics.fmean(dataset_lengths(model, dataset, prompt_only=True)))


def fp32_peak() -> float:
    """The fp32 matmul peak (GFLOP/s) from benchmarks/roofline.json; where that file is missing it is measured
    once here (`roofline.measure(repeats=2)`, about a minute) and written, so every benchmark prints the column."""
    import roofline  # imports torch: only once a figure is printed

    peak = roofline.load_peak(roofline.DEFAULT_JSON, "float32")
    if peak is None:
        print(f"bound: no {roofline.DEFAULT_JSON}; measuring the machine's peak once (roofline.measure(repeats=2))",
              flush=True)
        result = roofline.measure(repeats=2)
        roofline.DEFAULT_JSON.write_text(json.dumps(result, indent=2) + "\n")
        peak = result["peak_gflops"]["float32"]
        print(f"bound: fp32 peak {peak:.0f} GFLOP/s, written to {roofline.DEFAULT_JSON}", flush=True)
    return peak


def _amount(flops: float) -> str:
    return f"{flops / 1e12:.2f} TFLOP" if flops >= 1e11 else f"{flops / 1e9:.3g} GFLOP"


def _rate(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def report(label: str, shape: DecoderShape, work: Work, seconds: float, steps: int,
           approximate: bool = False) -> dict:
    """Print `bound  <label>: <FLOP> in <s> = <GFLOP/s> = <x>% of the fp32 peak` and return the figures (for
    --json). `approximate` (an estimated token count) puts "~" before the figures it touches."""
    flops = work.flops(shape)
    peak = fp32_peak()
    rate = flops / max(seconds, 1e-9) / 1e9
    tilde = "~" if approximate else ""
    print(f"bound  {label}: {tilde}{_amount(flops)} ({tilde}{_amount(flops / max(steps, 1))}/step x {steps}) in "
          f"{seconds:.1f} s = {tilde}{_rate(rate)} GFLOP/s = {tilde}{_rate(100 * rate / peak)}% of the fp32 peak "
          f"({peak:.0f} GFLOP/s, roofline.py)", flush=True)
    return {"flop": flops, "flop_per_step": flops / max(steps, 1), "steps": steps, "seconds": seconds,
            "gflop_per_s": rate, "fraction_of_fp32_peak": rate / peak, "fp32_peak_gflop_per_s": peak,
            "approximate": approximate}
