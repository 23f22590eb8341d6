"""The pt engine's stream stops its `generate` thread however its consumer leaves (issue 50, item 19)."""
import threading

from swiftlike.infer.protocol import InferRequest, RequestConfig

HELLO = [{"role": "user", "content": "hello"}]


def test_closing_a_stream_stops_and_joins_its_generation(pt_tiny):
    """Closing the generator (a client hanging up) returns only once `generate` has stopped, so the base model's
    adapter-disabled context is gone before the next request sets its adapter; that request's answer is the
    adapter's. The old engine left a 3000-token generation running in a daemon thread."""
    lora = RequestConfig(max_tokens=12, temperature=0, ignore_eos=True)
    reference = pt_tiny.infer([InferRequest(messages=HELLO, adapter="lora")], lora)[0].text
    before = set(threading.enumerate())
    stream = pt_tiny.stream(InferRequest(messages=HELLO), RequestConfig(max_tokens=3000, temperature=0,
                                                                        ignore_eos=True))
    received = [next(stream) for _ in range(3)]
    assert all(d.finish_reason is None for d in received)
    stream.close()
    running = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert running == []
    assert pt_tiny.infer([InferRequest(messages=HELLO, adapter="lora")], lora)[0].text == reference


def test_a_finished_stream_adds_up_to_the_batch_answer(pt_tiny):
    config = RequestConfig(max_tokens=10, temperature=0)
    request = InferRequest(messages=HELLO, adapter="lora")
    deltas = list(pt_tiny.stream(request, config))
    whole = pt_tiny.infer([request], config)[0]
    assert "".join(d.text for d in deltas) == whole.text and deltas[-1].finish_reason == whole.choices[0].finish_reason
    assert [t for d in deltas for t in d.token_ids] == whole.choices[0].token_ids
