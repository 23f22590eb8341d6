"""Delta weight sync encoding (swiftlike/rollout/wire/delta.py) against hand-computed tensors, bf16 and fp32."""
import pytest
import torch

from swiftlike.rollout.wire import delta
from swiftlike.rollout.wire.delta import DeltaError, SyncedWeights, SyncStats


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(delta.bits(a), delta.bits(b))


def test_encoded_sizes_by_hand():
    # fp32, 64 elements, 1 changed: indices 1 * (4 + 4) = 8, bitmask 64 / 8 + 4 = 12, dense 256
    assert delta.encoded_sizes(64, 1, 4) == {"indices": 8, "bitmask": 12, "dense": 256}
    # bf16, 100 elements, 50 changed: indices 50 * 6 = 300, bitmask 13 + 100 = 113, dense 200
    assert delta.encoded_sizes(100, 50, 2) == {"indices": 300, "bitmask": 113, "dense": 200}
    assert delta.encoded_sizes(2 ** 31, 1, 2)["indices"] == 10  # int64 positions past 2^31 elements


def test_one_change_in_64_floats_is_sent_as_an_index():
    old = torch.arange(64, dtype=torch.float32)
    new = old.clone()
    new[5] = 0.5
    entries, changed = delta.encode("w", old, new)
    assert changed == 1 and set(entries) == {"w.__delta_indices__", "w.__delta_values__"}
    assert entries["w.__delta_indices__"].dtype == torch.int32 and entries["w.__delta_indices__"].tolist() == [5]
    assert entries["w.__delta_values__"].tolist() == [0.5]
    patched = old.clone()
    delta.apply(patched, delta.group(entries)["w"])
    assert same_bits(patched, new)


def test_bitmask_bit_order_and_values_by_hand():
    # elements 0, 2, 3 and 8 of 9 changed: byte 0 = 1 + 4 + 8 = 13, byte 1 = 1
    old = torch.zeros(9, dtype=torch.bfloat16)
    new = old.clone()
    new[[0, 2, 3, 8]] = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.bfloat16)
    entries, changed = delta.encode("b", old, new)  # indices 4 * 6 = 24, bitmask 2 + 8 = 10, dense 18
    assert changed == 4 and entries["b.__delta_bitmask__"].tolist() == [13, 1]
    assert entries["b.__delta_values__"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert delta.unpack_bits(entries["b.__delta_bitmask__"], 9).tolist() == [True, False, True, True, False, False,
                                                                            False, False, True]
    patched = old.clone()
    delta.apply(patched, delta.group(entries)["b"])
    assert same_bits(patched, new)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_nothing_changed_sends_nothing_and_everything_changed_goes_whole(dtype):
    old = torch.linspace(-1, 1, 40).to(dtype)
    assert delta.encode("w", old, old.clone()) == ({}, 0)
    new = old + 1
    entries, changed = delta.encode("w", old, new)
    assert changed == 40 and set(entries) == {"w"} and same_bits(entries["w"], new)


def test_bit_patterns_decide_nan_signed_zero_and_bf16_rounding():
    nan = torch.tensor([float("nan")], dtype=torch.float32)
    other_nan = delta.bits(nan.clone()).add(1).view(torch.float32)  # another NaN payload
    old = torch.cat([nan, torch.tensor([0.0, 1.0])])
    assert delta.encode("w", old, old.clone())[1] == 0  # NaN with the same bits: unchanged
    new = torch.cat([other_nan, torch.tensor([-0.0, 1.0])])
    entries, changed = delta.encode("w", old, new)
    assert changed == 2  # the NaN payload and +0.0 -> -0.0, though NaN != NaN and 0.0 == -0.0 as floats
    patched = old.clone()
    delta.apply(patched, delta.group(entries)["w"])
    assert same_bits(patched, new)
    # a step below bf16's resolution at 1.0 (2^-8 apart) is no change in the engine's dtype
    one = torch.ones(4, dtype=torch.bfloat16)
    assert delta.encode("w", one, (torch.ones(4) + 1e-3).to(torch.bfloat16))[1] == 0
    assert delta.encode("w", one, (torch.ones(4) + 1e-2).to(torch.bfloat16))[1] == 4


def test_malformed_deltas_are_refused_before_anything_is_applied():
    synced = SyncedWeights({"a": torch.zeros(16), "b": torch.zeros(16)})
    good = {"a.__delta_indices__": torch.tensor([1], dtype=torch.int32), "a.__delta_values__": torch.tensor([2.0])}
    with pytest.raises(DeltaError, match="outside"):
        synced.patch({**good, "b.__delta_indices__": torch.tensor([16], dtype=torch.int32),
                      "b.__delta_values__": torch.tensor([1.0])})
    with pytest.raises(DeltaError, match="marks 1 elements but 2 values"):
        synced.patch({**good, "b.__delta_bitmask__": torch.tensor([1, 0], dtype=torch.uint8),
                      "b.__delta_values__": torch.tensor([1.0, 2.0])})
    with pytest.raises(DeltaError, match="values"):
        synced.patch({"b.__delta_indices__": torch.tensor([1], dtype=torch.int32)})
    with pytest.raises(DeltaError, match="never synced"):
        synced.patch({"c.__delta_indices__": torch.tensor([0], dtype=torch.int32),
                      "c.__delta_values__": torch.tensor([1.0])})
    assert synced.tensors["a"].abs().sum() == 0  # the good delta in a refused update was not applied
    assert synced.patch(good) == ["a"] and synced.tensors["a"][1] == 2.0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_trainer_and_receiver_copies_stay_equal_bit_for_bit(dtype):
    """Random steps of every density (and NaNs): the receiver's copy equals the trainer's new weights."""
    torch.manual_seed(0)
    shapes = {"emb": (300, 7), "norm": (7,), "big": (1000,)}
    weights = {n: torch.randn(s) for n, s in shapes.items()}
    trainer = SyncedWeights.copy_of((n, w.to(dtype)) for n, w in weights.items())
    receiver = SyncedWeights.copy_of(trainer.items())
    for density in (0.0, 0.001, 0.02, 0.5, 0.99, 1.0):
        for w in weights.values():
            w.add_(torch.randn_like(w) * 1e-2 * (torch.rand_like(w) < density))
        weights["big"][3] = float("nan")
        expected = sum(int((delta.bits(trainer.tensors[n]) != delta.bits(w.to(dtype))).sum())
                       for n, w in weights.items())
        stats, sent = SyncStats(), {}
        for name, w in weights.items():
            sent.update(trainer.advance(name, w.to(dtype), stats))
        receiver.patch(sent)
        for name, w in weights.items():
            assert same_bits(receiver.tensors[name], w.to(dtype)), (density, name)
            assert same_bits(trainer.tensors[name], w.to(dtype))
        assert stats.total == 3107 and stats.changed == expected and stats.bytes == delta.nbytes(sent.values())
        if density == 0.0:
            assert stats.changed <= 1 and stats.bytes <= 8  # only the NaN, set once


def test_server_copy_keeps_received_cpu_tensors_in_place():
    received = {"w": torch.arange(8, dtype=torch.float32)}  # e.g. a view of an HTTP body
    kept = SyncedWeights.kept_from(received)
    assert kept.tensors["w"].data_ptr() == received["w"].data_ptr()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="NCCL buckets arrive on the GPU")
def test_server_copy_of_nccl_buckets_lives_on_cpu_and_takes_gpu_deltas():
    """NCCL hands the server views of GPU broadcast buffers; the copy kept for deltas must not pin them (a second
    model in GPU memory beside vLLM's), and later deltas arrive on the GPU too."""
    old = torch.arange(64, dtype=torch.float32)
    kept = SyncedWeights.kept_from({"w": old.cuda()})
    assert kept.tensors["w"].device.type == "cpu"
    new = old.clone()
    new[5] = 0.5
    entries, _ = delta.encode("w", old, new)
    assert kept.patch({k: t.cuda() for k, t in entries.items()}) == ["w"]
    assert same_bits(kept.tensors["w"], new) and kept.tensors["w"].device.type == "cpu"
