"""The one-adapter fast path of vLLM's CPU LoRA ops (infer/engine/vllm_cpu_lora.py) against vLLM's own ops:
the same outputs for one shared adapter (decode and prefill layouts, both weight layouts, adding or writing,
sliced), and vLLM's op itself for mixed adapters."""
import pytest
import torch
from vllm.lora.ops import torch_ops

from swiftlike.infer.engine.vllm_cpu_lora import OPS, fast_ops, shared_index

ORIGINAL = {name: getattr(torch_ops, name) for name in OPS}
FELL_BACK = []  # the fast ops' calls that went to vLLM's own op
FAST = fast_ops({name: (lambda *a, _op=op, _name=name: FELL_BACK.append(_name) or _op(*a))
                 for name, op in ORIGINAL.items()})
TOKENS, IN, RANK, OUT, ADAPTERS = 7, 12, 4, 10, 3


def run(name, ops, *args, output):
    out = output.clone()
    ops[name](*args[:2], out, *args[2:])
    return out


@pytest.mark.parametrize("indices", [[1] * TOKENS, [2, 2, 0, 2, 2, 2, 2]], ids=["one adapter", "mixed"])
@pytest.mark.parametrize("four_dims", [False, True])
def test_decode_ops_equal_vllms(indices, four_dims):
    torch.manual_seed(0)
    FELL_BACK.clear()
    idx = torch.tensor(indices)
    a = torch.randn(ADAPTERS, RANK, IN)
    b = torch.randn(ADAPTERS, OUT, RANK)
    if four_dims:
        a, b = a.unsqueeze(1), b.unsqueeze(1)
    x, h = torch.randn(TOKENS, IN), torch.randn(TOKENS, RANK)
    base = torch.randn(TOKENS, OUT + 3)
    for ops_args in [("bgmv_shrink", (x, a, idx, 0.5), torch.zeros(TOKENS, RANK)),
                     ("bgmv_expand", (h, b, idx, True), base), ("bgmv_expand", (h, b, idx, False), base),
                     ("bgmv_expand_slice", (h, b, idx, 2, OUT, True), base)]:
        name, args, output = ops_args
        torch.testing.assert_close(run(name, FAST, *args, output=output), run(name, ORIGINAL, *args, output=output),
                                   rtol=1e-5, atol=1e-5)
    assert len(FELL_BACK) == (0 if len(set(indices)) == 1 else 4)  # one adapter: never vLLM's per-token gather


def test_prefill_ops_equal_vllms_and_skip_empty_sequences():
    torch.manual_seed(1)
    lens = torch.tensor([3, 0, 4])
    starts = torch.tensor([0, 3, 3])
    a, b = torch.randn(ADAPTERS, RANK, IN), torch.randn(ADAPTERS, OUT, RANK)
    x, h, base = torch.randn(TOKENS, IN), torch.randn(TOKENS, RANK), torch.randn(TOKENS, OUT + 2)
    for lora in ([2, 0, 2], [2, 1, 0]):  # the empty sequence's adapter does not count; then a mixed batch
        FELL_BACK.clear()
        meta = (starts, lens, torch.tensor(lora), 3, 4, TOKENS)
        for name, args, output in [("sgmv_shrink", (x, a, *meta, 2.0), torch.zeros(TOKENS, RANK)),
                                   ("sgmv_expand", (h, b, *meta, True), base),
                                   ("sgmv_expand_slice", (h, b, *meta, 1, OUT, False), base)]:
            torch.testing.assert_close(run(name, FAST, *args, output=output),
                                       run(name, ORIGINAL, *args, output=output), rtol=1e-5, atol=1e-5)
        assert len(FELL_BACK) == (0 if lora == [2, 0, 2] else 3)


def test_shared_index():
    assert shared_index(torch.tensor([3, 3, 3])) == 3
    assert shared_index(torch.tensor([3, 0])) is None and shared_index(torch.tensor([], dtype=torch.long)) is None
