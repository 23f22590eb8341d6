"""Sequence classification (ms-swift's `--task_type seq_cls`, a reward model) behind one interface.

`Classifier` is what callers use: a name, the number of labels and `classify(conversations)`, the raw logits of
each whole conversation. Three implementations: `PtClassifier` (transformers, here) and `VllmClassifier`
(vllm_classifier.py, vLLM's pooling runner) run the model in this process and share `LocalClassifier`, which
holds everything but the forward pass: how a conversation is rendered and encoded, where the model reads its
score, and how concurrent server requests are batched. `ClassifyClient` (classify_client.py) is a classifier
served elsewhere (`swiftlike deploy`'s or vLLM's `/classify`). Deploy serves the first two; GRPO's
`--reward_model` is a `PtClassifier` and `--reward_model_server` a `ClassifyClient`, so a served reward model and
an in-process one score the same text with the same code.
"""
from __future__ import annotations

import asyncio
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from ...model import ResolvedModel, default_device, pick_dtype
from ...model.seq_cls import SeqClsCheckpoint
from ...template import Template

Conversation = list[dict]


class Classifier(ABC):
    model_name: str  # the served name; its last path component names a reward column
    num_labels: int

    @abstractmethod
    def classify(self, conversations: Sequence[Conversation]) -> list[list[float]]:
        """The raw logits (no activation) of each whole conversation, `num_labels` per conversation."""

    def classify_each(self, conversations: Sequence[Conversation]) -> list[list[float] | Exception]:
        """`classify`, where a served classifier puts the failure of one conversation's call in its place instead
        of raising it (`ClassifyClient`); in-process, one forward pass serves them all, so this is `classify`."""
        return list(self.classify(conversations))

    def close(self) -> None:
        """Release the model or the connection."""


class LocalClassifier(Classifier):
    """A classifier whose model runs in this process; subclasses provide `_forward` over token ids.

    Rendering: with the tokenizer's own chat template when it has one (reward models often ship their own), else
    with swiftlike's template for the model type (`template`), as a reward model is trained; no generation prompt,
    since the conversation ends with the answer being scored. Tokens: the rendered text without added special
    tokens (the template writes them), trailing pad tokens dropped. The score is read at the last token that is
    not the pad token: transformers' `...ForSequenceClassification` (and so TRL's RewardTrainer, which trained the
    model) pools there, while vLLM pools at the very last token, so dropping trailing pads makes the two agree
    even for a template that ends a turn with the pad token (pad = eos is common).
    """

    def __init__(self, model_name: str, tokenizer, config, template: Template | None, max_batch_size: int,
                 max_model_len: int | None, system: str | None = None):
        self.model_name, self.tokenizer, self.template, self.system = model_name, tokenizer, template, system
        self.num_labels = int(config.num_labels)
        self.id2label = {int(k): v for k, v in (getattr(config, "id2label", None) or {}).items()}
        self.problem_type = getattr(config, "problem_type", None)
        pad = config.pad_token_id if config.pad_token_id is not None else tokenizer.pad_token_id
        self.pad_id: int | None = pad
        # without a pad token transformers pools at the last position, which is right only for unpadded rows
        self.max_batch_size = max_batch_size if pad is not None else 1
        self.max_model_len = max_model_len
        self._batcher: _Batcher | None = None
        self._batcher_lock = threading.Lock()

    # ------------------------------------------------------------------ text -> token ids
    def render(self, conversation: Conversation) -> str:
        messages = list(conversation)
        if self.system is not None and not (messages and messages[0].get("role") == "system"):
            messages = [{"role": "system", "content": self.system}, *messages]
        if self.template is None:
            return self.tokenizer.apply_chat_template(messages, tokenize=False)
        return self.template.render(messages)[0]

    def encode_conversation(self, conversation: Conversation, add_special_tokens: bool = False) -> list[int]:
        return self.tokenizer(self.render(conversation), add_special_tokens=add_special_tokens)["input_ids"]

    def encode_text(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]

    def pooled_ids(self, ids: Sequence[int]) -> list[int]:
        """`ids` without trailing pad tokens, checked against the vocabulary and the length limit."""
        ids = list(ids)
        while ids and self.pad_id is not None and ids[-1] == self.pad_id:
            ids.pop()
        if not ids:
            raise ValueError("an input is empty (or only pad tokens); there is nothing to classify")
        vocab = len(self.tokenizer)
        if any(not 0 <= i < vocab for i in ids):
            raise ValueError(f"token ids must be in 0..{vocab - 1} (the served tokenizer's vocabulary)")
        if self.max_model_len is not None and len(ids) > self.max_model_len:
            raise ValueError(f"an input of {len(ids)} tokens exceeds this model's limit of {self.max_model_len} "
                             "tokens; send a shorter one")
        return ids

    # ------------------------------------------------------------------ scoring
    def classify(self, conversations: Sequence[Conversation]) -> list[list[float]]:
        return self.classify_ids([self.encode_conversation(c) for c in conversations])

    def classify_ids(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        """Raw logits of token-id sequences, `max_batch_size` per forward pass (one caller at a time: the
        in-process reward model; servers use `classify_ids_async`)."""
        sequences = [self.pooled_ids(s) for s in sequences]
        out: list[list[float]] = []
        for start in range(0, len(sequences), self.max_batch_size):
            out += self._forward(sequences[start:start + self.max_batch_size])
        return out

    async def classify_ids_async(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        """`classify_ids` from an event loop: the sequences of every request waiting share forward passes of up to
        `max_batch_size` (one request with many inputs runs in several), on one worker thread."""
        sequences = [self.pooled_ids(s) for s in sequences]  # a bad input fails its own request only
        with self._batcher_lock:
            if self._batcher is None:
                self._batcher = _Batcher(self._forward, self.max_batch_size)
        return await self._batcher.submit(sequences)

    def activate(self, logits: list[float]) -> list[float]:
        """vLLM's default activation of a classifier's logits (`use_activation`): none for regression, sigmoid for
        one label or multi-label classification, softmax over the labels otherwise."""
        import torch
        values = torch.tensor(logits, dtype=torch.float32)
        if self.problem_type == "regression":
            return logits
        if self.problem_type == "multi_label_classification" or self.num_labels < 2:
            return torch.sigmoid(values).tolist()
        return torch.softmax(values, dim=-1).tolist()

    @abstractmethod
    def _forward(self, sequences: list[list[int]]) -> list[list[float]]:
        """Raw logits of one batch of token-id sequences (already stripped and checked)."""

    def close(self) -> None:
        if self._batcher is not None:
            self._batcher.close()


class _Batcher:
    """Sequences queued by concurrent requests, run `max_batch` at a time by `forward` on one thread."""

    def __init__(self, forward: Callable[[list[list[int]]], list[list[float]]], max_batch: int):
        self._forward, self._max_batch = forward, max_batch
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="classifier-batches", daemon=True)
        self._thread.start()

    async def submit(self, sequences: list[list[int]]) -> list[list[float]]:
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in sequences]
        for ids, future in zip(sequences, futures):
            self._queue.put((ids, future, loop))
        return list(await asyncio.gather(*futures))

    def _run(self) -> None:
        while (first := self._queue.get()) is not None:
            batch, closing = [first], False
            while len(batch) < self._max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    closing = True
                    break
                batch.append(item)
            try:
                outputs, error = self._forward([ids for ids, _, _ in batch]), None
            except Exception as e:  # every request of the batch gets it
                outputs, error = [None] * len(batch), e
            for (_, future, loop), output in zip(batch, outputs):
                loop.call_soon_threadsafe(_settle, future, output, error)
            if closing:
                return

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)


def _settle(future: asyncio.Future, output, error: Exception | None) -> None:
    if future.done():  # its request was cancelled (the client went away)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(output)


class PtClassifier(LocalClassifier):
    """transformers' `AutoModelForSequenceClassification`; a LoRA rm checkpoint is merged into its base (PEFT)."""

    def __init__(self, checkpoint: SeqClsCheckpoint, resolved: ResolvedModel, tokenizer, template: Template | None,
                 torch_dtype: str = "auto", device: str | None = None, max_batch_size: int = 16,
                 system: str | None = None):
        from transformers import AutoModelForSequenceClassification
        device = device or default_device()
        # a LoRA rm checkpoint's base is a causal LM; its one-label score head comes with the adapter
        labels = {"num_labels": 1} if checkpoint.adapter else {}
        model = AutoModelForSequenceClassification.from_pretrained(
            resolved.model_dir, dtype=pick_dtype(torch_dtype, device), **labels)
        if checkpoint.adapter is not None:
            from peft import PeftModel
            model = PeftModel.from_pretrained(model, checkpoint.adapter).merge_and_unload()
        self.model = model.to(device).eval()
        name = checkpoint.name if checkpoint.adapter else resolved.model_id
        super().__init__(name, tokenizer, self.model.config, template, max_batch_size,
                         getattr(self.model.config, "max_position_embeddings", None), system)
        if self.model.config.pad_token_id is None:  # transformers finds each row's last token through the pad id
            self.model.config.pad_token_id = self.pad_id

    def _forward(self, sequences: list[list[int]]) -> list[list[float]]:
        import torch
        width = max(len(s) for s in sequences)
        pad = self.pad_id if self.pad_id is not None else 0  # without a pad id, batches hold one row
        input_ids = torch.tensor([s + [pad] * (width - len(s)) for s in sequences], device=self.model.device)
        mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences], device=self.model.device)
        with torch.inference_mode():
            return self.model(input_ids=input_ids, attention_mask=mask).logits.float().tolist()
