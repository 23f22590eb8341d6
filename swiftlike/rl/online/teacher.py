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

from ...model.segment_attention import on_segment_attention, segment_bounds, use_segment_attention
from ...utils import get_logger
from ..core.options import TeacherOptions

logger = get_logger("swiftlike.rl")

# A text with words, digits, punctuation and non-ASCII characters, encoded on both sides to tell whether a
# served teacher shares the student's tokenizer.
TOKENIZER_PROBE = ("Teacher and student must share one tokenizer: 12 + 7 = 19, naïve café, 東京, "
                   "<tag>, \\n, tabs\tand emoji 🙂.")


@dataclass
class PackedSequences:
    """A batch of prompt + completion sequences as one row without padding: the sequences end to end, position
    ids restarting at each one (transformers then keeps attention inside each sequence), and the flat positions
    whose next token is a completion token, the only ones GKD compares.

    Packed rather than padded: the student's forward and backward, most of a GKD step on a CPU, then run on the
    real tokens only (prompts of different lengths padded to the longest cost a third more on the alpaca
    prompts of bench-gkd), and the LM head (a small model's largest matmul) only where a completion token is
    predicted.

    A multi-turn trajectory's completion holds ids the student did not sample (tool results, observations,
    next-turn headers): `loss_mask` says which completion tokens the divergence counts. They stay in
    `predict_at` all the same, so a served teacher's per-position answer lines up with the sequence as sent."""

    input_ids: torch.Tensor  # (1, total tokens)
    position_ids: torch.Tensor  # (1, total tokens)
    predict_at: torch.Tensor  # (completion tokens,) flat position t predicts the completion token at t + 1
    prompt_lengths: list[int]
    lengths: list[int]
    loss_mask: torch.Tensor | None = None  # (completion tokens,) bool, true where sampled; None: every one is

    @classmethod
    def pack(cls, sequences: list[tuple[list[int], list[int]]],
             loss_masks: list[list[int] | None] | None = None) -> PackedSequences:
        """`loss_masks`, one per sequence (1 = sampled, per completion id; None = all sampled), or None for all."""
        ids, positions, predict_at, offset = [], [], [], 0
        for prompt, answer in sequences:
            n = len(prompt) + len(answer)
            ids += prompt + answer
            positions += range(n)
            predict_at += range(offset + len(prompt) - 1, offset + n - 1)
            offset += n
        return cls(torch.tensor([ids]), torch.tensor([positions]), torch.tensor(predict_at, dtype=torch.long),
                   [len(p) for p, _ in sequences], [len(p) + len(a) for p, a in sequences],
                   _flat_loss_mask(sequences, loss_masks))

    @property
    def targets(self) -> torch.Tensor:
        """The completion tokens, in `predict_at` order."""
        return self.input_ids[0, self.predict_at + 1]

    def sequences(self) -> list[list[int]]:
        flat, out, offset = self.input_ids[0].tolist(), [], 0
        for n in self.lengths:
            out.append(flat[offset:offset + n])
            offset += n
        return out

    def to(self, device) -> PackedSequences:
        return PackedSequences(self.input_ids.to(device), self.position_ids.to(device), self.predict_at.to(device),
                               self.prompt_lengths, self.lengths,
                               None if self.loss_mask is None else self.loss_mask.to(device))


def _flat_loss_mask(sequences: list[tuple[list[int], list[int]]],
                    loss_masks: list[list[int] | None] | None) -> torch.Tensor | None:
    """The completion tokens' loss masks end to end (predict_at order), or None when every token is sampled."""
    if loss_masks is None or all(mask is None for mask in loss_masks):
        return None
    if len(loss_masks) != len(sequences):
        raise ValueError(f"{len(loss_masks)} loss masks for {len(sequences)} sequences")
    flat = []
    for (_, answer), mask in zip(sequences, loss_masks):
        if mask is not None and len(mask) != len(answer):
            raise ValueError(f"a loss mask has {len(mask)} entries for a completion of {len(answer)} ids")
        flat += [1] * len(answer) if mask is None else mask
    return torch.tensor(flat, dtype=torch.bool)


@dataclass
class TeacherOutput:
    """The teacher's next-token distribution at each completion token of a PackedSequences, in `predict_at`
    order: either `logits` (tokens, vocab) or `topk_logps` and `topk_ids` (tokens, k)."""

    logits: torch.Tensor | None = None
    topk_logps: torch.Tensor | None = None
    topk_ids: torch.Tensor | None = None


def completion_logits(model, batch: PackedSequences) -> torch.Tensor:
    """(completion tokens, vocab): the model's logits where a completion token is predicted, with the LM head
    computed there only (transformers' `logits_to_keep` takes the positions). The sequences' boundaries go
    along, so a model on segment attention (model/segment_attention.py) attends within each one without the
    row-wide mask."""
    bounds = segment_bounds(batch.lengths, batch.input_ids.device) if on_segment_attention(model) else {}
    return model(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False,
                 logits_to_keep=batch.predict_at, **bounds).logits[0]


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


@dataclass(frozen=True)
class TeacherSampling:
    """How the teacher samples the answers of --seq_kd (the student's --temperature / --top_p / --top_k and
    --max_completion_length, as TRL's seq_kd samples with the student's generation config)."""

    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    stop_token_ids: tuple[int, ...]
    pad_token_id: int


def cut_at_stop(ids: list[int], sampling: TeacherSampling) -> list[int]:
    """A sampled answer up to and including its first stop token (the end of turn the dataset's answers carry);
    what follows it in a padded batch is padding."""
    for i, token in enumerate(ids):
        if token in sampling.stop_token_ids:
            return ids[:i + 1]
    return ids


class LocalTeacher:
    """A teacher model in this process, or (model None) the student itself with its LoRA adapter disabled:
    ms-swift's trick for self-distillation from the base model, with no second copy in memory."""

    def __init__(self, model, topk: int | None, offload: bool, device: str):
        self.model, self.topk, self.offload, self.device = model, topk, offload, device
        if model is not None:
            use_segment_attention(model)
            model.eval()
            for p in model.parameters():
                p.requires_grad_(False)
            if offload:
                model.to("cpu")

    @torch.no_grad()
    def __call__(self, student, batch: PackedSequences) -> TeacherOutput:
        if self.model is None:
            was_training = student.training
            student.eval()
            try:
                with student.disable_adapter():
                    logits = completion_logits(student, batch)
            finally:
                student.train(was_training)
        else:
            with self._on_device():
                logits = completion_logits(self.model, batch)
        logits = logits.float()
        if self.topk is None:
            return TeacherOutput(logits=logits)
        values, ids = logits.log_softmax(-1).topk(self.topk, dim=-1)
        return TeacherOutput(topk_logps=values, topk_ids=ids)

    @torch.no_grad()
    def generate(self, student, prompts: list[list[int]], sampling: TeacherSampling) -> list[list[int]]:
        """--seq_kd: the teacher's sampled answers to `prompts` (token ids), by transformers' generate on one
        left-padded batch; the student's base with its adapter disabled when the teacher is that base."""
        width = max(len(p) for p in prompts)
        device = next(student.parameters()).device if self.model is None else self.device
        input_ids = torch.tensor([[sampling.pad_token_id] * (width - len(p)) + p for p in prompts], device=device)
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=sampling.max_tokens,
                      do_sample=sampling.temperature > 0, eos_token_id=list(sampling.stop_token_ids),
                      pad_token_id=sampling.pad_token_id)
        if sampling.temperature > 0:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p,
                          top_k=sampling.top_k if sampling.top_k > 0 else None)
        if self.model is None:
            was_training = student.training
            student.eval()
            try:
                with student.disable_adapter():
                    out = student.generate(**kwargs)
            finally:
                student.train(was_training)
        else:
            with self._on_device():
                out = self.model.generate(**kwargs)
        return [cut_at_stop(row[width:].tolist(), sampling) for row in out]

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

    def _prompt_logprobs(self, sequences: list[list[int]], topk: int) -> list[list]:
        """Per sequence, vLLM's `prompt_logprobs` answer: for each position after the first, {token id: {logprob,
        rank}} holding the top-`topk` and the token actually there."""
        body = {"model": self.model_name, "prompt": sequences, "max_tokens": 1, "temperature": 0,
                "prompt_logprobs": topk}
        choices = self._request("POST", "/v1/completions", json=body)["choices"]
        if len(choices) != len(sequences):
            raise RuntimeError(f"teacher server {self.url} answered {len(choices)} choices for {len(sequences)} "
                               "prompts")
        out = []
        for b, (choice, sequence) in enumerate(zip(choices, sequences)):
            positions = choice.get("prompt_logprobs")
            if positions is None or len(positions) != len(sequence):
                raise RuntimeError(f"teacher server {self.url} sent no prompt_logprobs for prompt {b}; it must "
                                   "answer vLLM's prompt_logprobs (swiftlike deploy / rollout, or vllm serve)")
            out.append(positions)
        return out

    def sampled_logps(self, sequences: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        """OPD-RL's question: the teacher's log-prob of each completion token as it stands (`prompt_logprobs=0`,
        ms-swift's request: the token present, whatever its rank), one list per (prompt, completion)."""
        answers = self._prompt_logprobs([p + c for p, c in sequences], 0)
        out = []
        for (prompt, completion), positions in zip(sequences, answers):
            row = []
            for t, token in enumerate(completion, start=len(prompt)):
                entry = positions[t].get(str(token))
                if entry is None:
                    raise RuntimeError(f"teacher server {self.url} sent no log-prob for token {token} at position "
                                       f"{t}; it must answer vLLM's prompt_logprobs with the token present")
                row.append(float(entry["logprob"]))
            out.append(row)
        return out

    def generate(self, student, prompts: list[list[int]], sampling: TeacherSampling) -> list[list[int]]:
        """--seq_kd: the served teacher's sampled answers, one /v1/completions request for the batch, the prompts
        as token ids and the answers' ids returned (`return_token_ids`, vLLM's and our servers' extension)."""
        body = {"model": self.model_name, "prompt": prompts, "max_tokens": sampling.max_tokens,
                "temperature": sampling.temperature, "top_p": sampling.top_p, "return_token_ids": True}
        if sampling.top_k > 0:
            body["top_k"] = sampling.top_k
        choices = sorted(self._request("POST", "/v1/completions", json=body)["choices"], key=lambda c: c["index"])
        if len(choices) != len(prompts) or any(c.get("token_ids") is None for c in choices):
            raise RuntimeError(f"teacher server {self.url} did not answer {len(prompts)} completions with token_ids; "
                               "--seq_kd needs a server that returns them (swiftlike deploy, vllm serve)")
        return [cut_at_stop(list(c["token_ids"]), sampling) for c in choices]

    def __call__(self, student, batch: PackedSequences) -> TeacherOutput:
        answers = self._prompt_logprobs(batch.sequences(), self.topk)
        tokens = len(batch.predict_at)
        logps = torch.zeros(tokens, self.topk)
        ids = torch.zeros(tokens, self.topk, dtype=torch.long)
        row = 0
        for positions, prompt_length, n in zip(answers, batch.prompt_lengths, batch.lengths):
            for t in range(prompt_length, n):  # the distribution that predicts completion token t
                ranked = sorted(((int(k), v) for k, v in positions[t].items() if v["rank"] <= self.topk),
                                key=lambda kv: kv[1]["rank"])
                if len(ranked) != self.topk:
                    raise RuntimeError(f"teacher server {self.url} sent {len(ranked)} alternatives, not "
                                       f"--gkd_logits_topk {self.topk}; raise its --max_logprobs")
                ids[row] = torch.tensor([k for k, _ in ranked])
                logps[row] = torch.tensor([v["logprob"] for _, v in ranked])
                row += 1
        if tokens and int(ids.max()) >= self.vocab_size:
            raise ValueError(f"the teacher served at {self.url} sent token id {int(ids.max())}, outside the "
                             f"student's vocabulary of {self.vocab_size}; the teacher must share the student's "
                             "vocabulary")
        device = batch.input_ids.device
        return TeacherOutput(topk_logps=logps.to(device), topk_ids=ids.to(device))

    def close(self) -> None:
        self.session.close()


class TeacherReplicas:
    """Several servers of one teacher: each batch goes to the next, so the trainer's processes spread their
    requests over the replicas (the ones a Ray job's `teacher:` group starts)."""

    def __init__(self, replicas: list[ServedTeacher]):
        names = {r.model_name for r in replicas}
        if len(names) > 1:
            raise ValueError(f"the teacher servers serve different models ({sorted(names)}); give the URLs of one "
                             "teacher's replicas")
        self.replicas = replicas
        self.model_name = replicas[0].model_name
        self._next = 0

    def _replica(self) -> ServedTeacher:
        replica = self.replicas[self._next % len(self.replicas)]
        self._next += 1
        return replica

    def __call__(self, student, batch: PackedSequences) -> TeacherOutput:
        return self._replica()(student, batch)

    def sampled_logps(self, sequences: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        return self._replica().sampled_logps(sequences)

    def generate(self, student, prompts: list[list[int]], sampling: TeacherSampling) -> list[list[int]]:
        return self._replica().generate(student, prompts, sampling)

    def close(self) -> None:
        for replica in self.replicas:
            replica.close()


def served_teacher(teacher: TeacherOptions, topk: int | None, tokenizer, vocab_size: int):
    """The teacher behind --teacher_model_server, after its reachability and tokenizer checks: one server, or
    its replicas taken in turn."""
    served = [ServedTeacher(url, topk, teacher.teacher_model_server_timeout, tokenizer, vocab_size,
                            teacher.teacher_model_server_api_key) for url in teacher.teacher_model_server]
    logger.info("teacher: %s served at %s (%s)", served[0].model_name, ", ".join(t.url for t in served),
                f"top-{topk} log-probs" if topk else "the sampled tokens' log-probs")
    return served[0] if len(served) == 1 else TeacherReplicas(served)


def load_teacher_model(teacher: TeacherOptions, args, resolved, tokenizer, place: str, device: str):
    """The in-process teacher of GKD and of GRPO's OPD-RL, frozen, after its tokenizer and memory checks; None
    when it is the student's own base (--tuner_type lora, same model, no adapters), which runs with the
    adapter disabled instead of a second copy."""
    from pathlib import Path

    from ...model import load_tokenizer, pick_dtype, resolve_model
    teacher_resolved = resolve_model(teacher.teacher_model, teacher.teacher_model_type, args.use_hf,
                                     teacher.teacher_model_revision)
    if (args.tuner_type == "lora" and not teacher.teacher_adapters
            and Path(teacher_resolved.model_dir).resolve() == Path(resolved.model_dir).resolve()):
        logger.info("teacher: %s, the student's base with its LoRA adapter disabled (no second copy)",
                    teacher_resolved.model_id)
        return None
    if not same_tokenizer(tokenizer, load_tokenizer(teacher_resolved)):
        raise ValueError(f"--teacher_model {teacher.teacher_model} has another tokenizer than --model "
                         f"{args.model}; the teacher scores the student's tokens one by one, so the two must share one tokenizer")
    dtype = pick_dtype(args.torch_dtype, device)
    fits_in_memory(teacher_resolved.model_id, checkpoint_bytes(teacher_resolved.model_dir, dtype),
                   free_memory_bytes(place), place)
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(teacher_resolved.model_dir, dtype=dtype)
    if teacher.teacher_adapters:
        from peft import PeftModel
        for path in teacher.teacher_adapters:
            model = PeftModel.from_pretrained(model, path).merge_and_unload()
    logger.info("teacher: %s%s in-process", teacher_resolved.model_id,
                f" + adapters {' '.join(teacher.teacher_adapters)}" if teacher.teacher_adapters else "")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model
