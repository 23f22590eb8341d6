"""Model FLOPs against hand-computed values."""
from swiftlike.utils.flops import DecoderShape, forward_flops, train_flops

TOY = DecoderShape(layers=1, hidden=4, heads=2, kv_heads=1, head_dim=2, intermediate=8, vocab=10)


def test_toy_model_by_hand():
    # q, o: 4*2*2 each = 16 + 16; k, v: 4*1*2 each = 8 + 8; MLP 3*4*8 = 96 -> 144; head 4*10 = 40
    assert TOY.layer_params == 144 and TOY.matmul_params == 184
    # 3 tokens: 2*184*3 = 1104 of matmuls; attention 4*1*2*2 * (1+2+3) = 96
    assert forward_flops(TOY, [3]) == 1200
    assert forward_flops(TOY, [3, 1]) == 1200 + 2 * 184 + 16
    assert train_flops(TOY, [3]) == 3600
    assert train_flops(TOY, [3], lora=True) == 2400
    assert train_flops(TOY, [3], gradient_checkpointing=True) == 4800


def test_smollm2_135m_from_its_config():
    config = {"num_hidden_layers": 30, "hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3,
              "head_dim": 64, "intermediate_size": 1536, "vocab_size": 49152}
    shape = DecoderShape.of(config)
    # 2*576*576 + 2*576*192 + 3*576*1536 = 3,538,944 per layer; 30 layers + a 576 x 49152 head
    assert shape.layer_params == 3_538_944
    assert shape.matmul_params == 30 * 3_538_944 + 576 * 49152 == 134_479_872
    assert forward_flops(shape, [1]) == 2 * 134_479_872 + 4 * 30 * 9 * 64
