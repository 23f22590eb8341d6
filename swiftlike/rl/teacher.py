"""GKD's teacher: a model in this process, the student with its adapter disabled, or a served model.

All three answer one question for a batch of token sequences: the teacher's next-token distribution at
every position, either as full logits (in-process) or as its top-k log-probs and their ids (served, or
in-process with --gkd_logits_topk). The served teacher is any OpenAI-compatible server that answers vLLM's
`prompt_logprobs` on /v1/completions: `swiftlike deploy`, `swiftlike rollout`, or `vllm serve`.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from ..utils import get_logger

logger = get_logger("swiftlike.rl")

# A text with words, digits, punctuation and non-ASCII characters, encoded on both sides to tell whether a
# served teacher shares the student's tokenizer.
TOKENIZER_PROBE = ("Teacher and student must share one tokenizer: 12 + 7 = 19, naïve café, 東京, "
                   "<tag>, \\n, tabs\tand emoji 🙂.")


@dataclass
class TeacherOutput:
    """Aligned with the student's shifted logits from position `start` on (position t predicts token t+1):
    either `logits` (batch, seq-1-start, vocab) or `topk_logps` and `topk_ids` (batch, seq-1-start, k)."""

    logits: torch.Tensor | None = None
    topk_logps: torch.Tensor | None = None
    topk_ids: torch.Tensor | None = None

    def select(self, mask: torch.Tensor) -> TeacherOutput:
        """The positions where `mask` (batch, positions) is true, flattened: (tokens, vocab or k)."""
        if self.logits is not None:
            return TeacherOutput(logits=self.logits[mask])
        return TeacherOutput(topk_logps=self.topk_logps[mask], topk_ids=self.topk_ids[mask])


def shifted_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int) -> torch.Tensor:
    """The next-token logits of positions start .. seq-2, without computing the LM head (the largest matmul of a
    small model) on the positions before `start`, which are prompt on every row."""
    keep = input_ids.shape[1] - start
    return model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                 logits_to_keep=keep).logits[:, :-1]


def same_tokenizer(student_tokenizer, teacher_tokenizer) -> bool:
    return student_tokenizer.get_vocab() == teacher_tokenizer.get_vocab()


def fits_in_memory(name: str, need_bytes: int, free_bytes: int, device: str) -> None:
    """Stop before training when the teacher cannot be loaded beside what is loaded already (10% headroom)."""
    if need_bytes > 0.9 * free_bytes:
        gib = 1 << 30
        raise ValueError(f"teacher {name} needs about {need_bytes / gib:.1f} GiB and only {free_bytes / gib:.1f} "
                         f"GiB is free on {device} after loading the student; use a smaller teacher, a smaller "
                         "--torch_dtype (bfloat16), --offload_teacher_model (CUDA), or serve it with `swiftlike "
                         "deploy --model TEACHER --infer_backend vllm --max_logprobs K` and pass "
                         "--teacher_model_server URL --gkd_logits_topk K")


def free_memory_bytes(device: str) -> int:
    """What a new model could still take on `device`: free CUDA memory, else the host's MemAvailable."""
    if str(device).startswith("cuda"):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("cannot read MemAvailable from /proc/meminfo")


def checkpoint_bytes(model_dir, dtype: torch.dtype) -> int:
    """The weights' size once loaded in `dtype`, from the safetensors headers (no tensor is read)."""
    from pathlib import Path

    from safetensors import safe_open
    params = 0
    for path in Path(model_dir).glob("*.safetensors"):
        with safe_open(str(path), framework="pt") as f:
            params += sum(math.prod(f.get_slice(key).get_shape()) for key in f.keys())
    return params * torch.tensor([], dtype=dtype).element_size()


class LocalTeacher:
    """A teacher model in this process, or (model None) the student itself with its LoRA adapter disabled:
    ms-swift's trick for self-distillation from the base model, with no second copy in memory."""

    def __init__(self, model, topk: int | None, offload: bool, device: str):
        self.model, self.topk, self.offload, self.device = model, topk, offload, device
        if model is not None:
            model.eval()
            for p in model.parameters():
                p.requires_grad_(False)
            if offload:
                model.to("cpu")

    @torch.no_grad()
    def __call__(self, student, input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int = 0) -> TeacherOutput:
        if self.model is None:
            was_training = student.training
            student.eval()
            try:
                with student.disable_adapter():
                    logits = shifted_logits(student, input_ids, attention_mask, start)
            finally:
                student.train(was_training)
        else:
            with self._on_device():
                logits = shifted_logits(self.model, input_ids, attention_mask, start)
        logits = logits.float()
        if self.topk is None:
            return TeacherOutput(logits=logits)
        values, ids = logits.log_softmax(-1).topk(self.topk, dim=-1)
        return TeacherOutput(topk_logps=values, topk_ids=ids)

    @contextlib.contextmanager
    def _on_device(self):
        if not self.offload:
            yield
            return
        self.model.to(self.device)
        try:
            yield
        finally:
            self.model.to("cpu")

    def close(self) -> None:
        pass


class ServedTeacher:
    """The teacher behind an OpenAI-compatible server: one /v1/completions request per batch, the sequences as
    token-id prompts, `prompt_logprobs=k`; the answer's per-position top-k becomes TeacherOutput.

    Written here, not taken from TRL: TRL's GKDTrainer has only an in-process teacher, and its server-backed
    distillation trainers speak their own protocol rather than the OpenAI one our servers and vLLM's share.
    """

    def __init__(self, url: str, topk: int, timeout: float, student_tokenizer, vocab_size: int,
                 api_key: str | None = None):
        import requests
        self.url, self.topk, self.vocab_size = url.rstrip("/"), topk, vocab_size
        self.timeout = timeout
        self.session = requests.Session()
        if api_key:
            self.session.headers["Authorization"] = f"Bearer {api_key}"
        self.model_name = self._served_model()
        self._check_tokenizer(student_tokenizer)

    def _request(self, method: str, path: str, **kw):
        import requests
        try:
            response = self.session.request(method, self.url + path, timeout=self.timeout, **kw)
        except requests.Timeout:
            raise RuntimeError(f"teacher server {self.url} did not answer {path} within {self.timeout:.0f} s "
                               "(--teacher_model_server_timeout); is it overloaded or stopped?") from None
        except requests.ConnectionError as e:
            raise RuntimeError(f"teacher server {self.url} is not reachable ({type(e).__name__}: {e}); start it "
                               "(swiftlike deploy --model TEACHER --max_logprobs K) or fix "
                               "--teacher_model_server") from None
        if response.status_code != 200:
            raise RuntimeError(f"teacher server {self.url}{path} answered HTTP {response.status_code}: "
                               f"{response.text[:500]}")
        return response.json()

    def _served_model(self) -> str:
        data = self._request("GET", "/v1/models").get("data") or []
        if not data:
            raise RuntimeError(f"teacher server {self.url} lists no model at /v1/models")
        return data[0]["id"]

    def _check_tokenizer(self, student_tokenizer) -> None:
        served = self._request("POST", "/tokenize", json={"model": self.model_name, "prompt": TOKENIZER_PROBE,
                                                          "add_special_tokens": False})["tokens"]
        ours = student_tokenizer.encode(TOKENIZER_PROBE, add_special_tokens=False)
        if served != ours:
            raise ValueError(f"the teacher served at {self.url} ({self.model_name}) uses another tokenizer than the "
                             "student (the same text encodes to different token ids); GKD compares the two "
                             "models token by token, so the teacher must share the student's tokenizer")

    def __call__(self, student, input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int = 0) -> TeacherOutput:
        lengths = attention_mask.sum(-1).tolist()
        sequences = [row[:n] for row, n in zip(input_ids.tolist(), lengths)]
        body = {"model": self.model_name, "prompt": sequences, "max_tokens": 1, "temperature": 0,
                "prompt_logprobs": self.topk}
        choices = self._request("POST", "/v1/completions", json=body)["choices"]
        if len(choices) != len(sequences):
            raise RuntimeError(f"teacher server {self.url} answered {len(choices)} choices for {len(sequences)} "
                               "prompts")
        batch, width = input_ids.shape
        logps = torch.zeros(batch, width - 1, self.topk)
        ids = torch.zeros(batch, width - 1, self.topk, dtype=torch.long)
        for b, (choice, n) in enumerate(zip(choices, lengths)):
            positions = choice.get("prompt_logprobs")
            if positions is None or len(positions) != n:
                raise RuntimeError(f"teacher server {self.url} sent no prompt_logprobs for prompt {b}; it must "
                                   "answer vLLM's prompt_logprobs (swiftlike deploy / rollout, or vllm serve)")
            for t in range(1, n):  # position t's distribution predicts token t: the student's position t-1
                ranked = sorted(((int(k), v) for k, v in positions[t].items() if v["rank"] <= self.topk),
                                key=lambda kv: kv[1]["rank"])
                if len(ranked) != self.topk:
                    raise RuntimeError(f"teacher server {self.url} sent {len(ranked)} alternatives, not "
                                       f"--gkd_logits_topk {self.topk}; raise its --max_logprobs")
                ids[b, t - 1] = torch.tensor([k for k, _ in ranked])
                logps[b, t - 1] = torch.tensor([v["logprob"] for _, v in ranked])
        if int(ids.max()) >= self.vocab_size:
            raise ValueError(f"the teacher served at {self.url} sent token id {int(ids.max())}, outside the "
                             f"student's vocabulary of {self.vocab_size}; the teacher must share the student's "
                             "vocabulary")
        return TeacherOutput(topk_logps=logps[:, start:].to(input_ids.device),
                             topk_ids=ids[:, start:].to(input_ids.device))

    def close(self) -> None:
        self.session.close()
