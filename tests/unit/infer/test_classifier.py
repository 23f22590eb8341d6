"""The pt sequence classifier behind `deploy --task_type seq_cls` and GRPO's --reward_model: concurrent requests share
forward passes of at most max_batch_size sequences and get the scores they would get alone, and the score is read at
the last token that is not the pad token, as transformers (and TRL, which trained the model) read it."""
import asyncio

import pytest
import torch

from swiftlike.infer.engine import EngineSpec, build_classifier

CONVERSATIONS = [[{"role": "user", "content": f"What is {i} + {i}?"},
                  {"role": "assistant", "content": "#### " + str(2 * i) * (i % 4 + 1)}] for i in range(10)]


@pytest.fixture(scope="module")
def classifier(tiny_reward_model):
    built = build_classifier(EngineSpec("pt", model=str(tiny_reward_model), torch_dtype="float32", max_batch_size=4))
    yield built
    built.close()


def test_concurrent_requests_share_forward_passes_of_at_most_max_batch_size(classifier, monkeypatch):
    sequences = [classifier.encode_conversation(c) for c in CONVERSATIONS]
    alone = [classifier.classify_ids([s])[0] for s in sequences]
    batches = []
    forward = classifier._forward
    monkeypatch.setattr(classifier, "_forward", lambda batch: batches.append(len(batch)) or forward(batch))

    async def three_requests():
        return await asyncio.gather(classifier.classify_ids_async(sequences[:6]),
                                    classifier.classify_ids_async(sequences[6:9]),
                                    classifier.classify_ids_async(sequences[9:]))
    first, second, third = asyncio.run(three_requests())
    assert torch.allclose(torch.tensor(first + second + third), torch.tensor(alone), atol=1e-5)
    assert sum(batches) == 10 and max(batches) <= 4 and len(batches) >= 3, batches


def test_the_score_is_read_at_the_last_token_that_is_not_padding(classifier, tiny_reward_model):
    from transformers import AutoModelForSequenceClassification
    reference = AutoModelForSequenceClassification.from_pretrained(tiny_reward_model, dtype=torch.float32).eval()
    ids = classifier.encode_conversation(CONVERSATIONS[0])
    pad = classifier.pad_id
    assert ids[-1] != pad  # chatml ends a turn with `<|im_end|>\n`; the tiny model's pad is `<|im_end|>`
    ending_in_pad = ids[:-1]  # the conversation up to its end-of-turn token, which is the pad token here
    assert ending_in_pad[-1] == pad
    with torch.no_grad():  # transformers skips trailing pad tokens when it pools, even unpadded
        expected = float(reference(input_ids=torch.tensor([ending_in_pad])).logits[0, 0])
    assert classifier.classify_ids([ending_in_pad, ids])[0][0] == pytest.approx(expected, abs=1e-5)
    assert classifier.classify_ids([ids + [pad] * 3])[0] == pytest.approx(classifier.classify_ids([ids])[0], abs=1e-5)
    with pytest.raises(ValueError, match="only pad tokens"):
        classifier.classify_ids([[pad, pad]])
    assert classifier.activate([0.0]) == [0.5] and classifier.num_labels == 1


def test_a_generating_lora_adapter_is_no_reward_model(tiny_adapter):
    from swiftlike.model.seq_cls import SeqClsCheckpoint
    with pytest.raises(ValueError, match="LoRA adapter of a generating model, not of a reward model"):
        SeqClsCheckpoint.of(tiny_adapter)
