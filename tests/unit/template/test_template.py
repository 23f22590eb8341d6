"""Our template encoding equals tokenizer.apply_chat_template token for token."""
import pytest
from model_ids import SMOLLM2

from swiftlike.model import load_tokenizer, resolve_model
from swiftlike.template import IGNORE_INDEX, TEMPLATE_REGISTRY, get_template

CONVERSATIONS = [
    [{"role": "user", "content": "What is 12 + 7?"}, {"role": "assistant", "content": "12 + 7 = 19."}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!"},
     {"role": "assistant", "content": "Hello."}],
    [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": " Blue "},
     {"role": "user", "content": "Another one, please:\n"}, {"role": "assistant", "content": "Green\n\nor red."}],
    [{"role": "user", "content": "Solve x+1=3"},
     {"role": "assistant", "content": "<think>\nx = 3 - 1\n</think>\n\nx = 2"}],
]
PROMPTS = [
    [{"role": "user", "content": "Who are you?"}],
    [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Hello"},
     {"role": "assistant", "content": "Bonjour"}, {"role": "user", "content": "Thanks"}],
]

# Each template is checked with the tokenizer of a tiny model that has its special tokens.
TOKENIZER_FOR = {"chatml": "smollm2", "qwen": "qwen2", "qwen2_5": "qwen2_5", "qwen3": "qwen3",
                 "llama3": "llama3", "smollm2": "smollm2"}


def test_every_template_is_covered():
    """`tokenizer` renders with the tokenizer's own template; tests/unit/template/test_tokenizer_template.py covers it."""
    assert set(TOKENIZER_FOR) == set(TEMPLATE_REGISTRY) - {"tokenizer"}


@pytest.fixture(scope="module", params=sorted(TOKENIZER_FOR))
def template_and_tokenizer(request):
    name = request.param
    tokenizer = load_tokenizer(resolve_model(f"tiny-random/{TOKENIZER_FOR[name]}"))
    tokenizer.chat_template = TEMPLATE_REGISTRY[name].chat_template
    return get_template(name, tokenizer), tokenizer


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_training_encoding_equals_apply_chat_template(template_and_tokenizer, messages):
    template, tokenizer = template_and_tokenizer
    expected = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)
    assert template.encode(messages).input_ids == list(expected)


@pytest.mark.parametrize("messages", PROMPTS)
def test_generation_prompt_equals_apply_chat_template(template_and_tokenizer, messages):
    template, tokenizer = template_and_tokenizer
    expected = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False)
    assert template.encode_prompt(messages) == list(expected)


def test_qwen3_thinking_off_matches():
    tokenizer = load_tokenizer(resolve_model("tiny-random/qwen3"))
    template = get_template("qwen3", tokenizer)
    expected = tokenizer.apply_chat_template(PROMPTS[0], tokenize=False, add_generation_prompt=True,
                                             enable_thinking=False)
    assert expected.endswith("<think>\n\n</think>\n\n")
    assert template.render(PROMPTS[0], add_generation_prompt=True, enable_thinking=False)[0] == expected


def test_smollm2_real_tokenizer_template_matches():
    """SmolLM2's own chat template (from its GGUF) against our smollm2 template."""
    tokenizer = load_tokenizer(resolve_model(SMOLLM2))
    assert "SmolLM" in tokenizer.chat_template
    template = get_template("smollm2", tokenizer)
    for messages in CONVERSATIONS:
        assert template.encode(messages).input_ids == list(
            tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False))
    for messages in PROMPTS:
        assert template.encode_prompt(messages) == list(
            tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False))


def test_loss_only_on_assistant_turns(tiny_template):
    messages = CONVERSATIONS[2]
    enc = tiny_template.encode(messages)
    trained = [t for t in enc.labels if t != IGNORE_INDEX]
    text = tiny_template.tokenizer.decode(trained)
    assert text == " Blue <|im_end|>Green\n\nor red.<|im_end|>"
    assert "Name a colour" not in text and "system" not in text
    # labels align with ids wherever they are set
    assert all(lab == tok for lab, tok in zip(enc.labels, enc.input_ids) if lab != IGNORE_INDEX)


def test_system_prompt_text_and_file(tiny_template, tmp_path):
    tokenizer = tiny_template.tokenizer
    msgs = [{"role": "user", "content": "hi"}]
    default = get_template("qwen2_5", tokenizer).render(msgs)[0]
    assert "You are Qwen" in default
    assert "<|im_start|>system\nBe brief.<|im_end|>" in get_template("qwen2_5", tokenizer, "Be brief.").render(msgs)[0]
    path = tmp_path / "system.txt"
    path.write_text("From a file.\n")
    assert "system\nFrom a file.<|im_end|>" in get_template("qwen2_5", tokenizer, str(path)).render(msgs)[0]
    # a system message in the data wins over --system
    data_system = [{"role": "system", "content": "Data system."}] + msgs
    assert "Be brief" not in get_template("qwen2_5", tokenizer, "Be brief.").render(data_system)[0]


def test_bad_messages_are_rejected(tiny_template):
    with pytest.raises(ValueError, match="role must be"):
        tiny_template.encode([{"role": "bot", "content": "x"}])
    with pytest.raises(ValueError, match="content must be a string"):
        tiny_template.encode([{"role": "user", "content": None}])
    with pytest.raises(ValueError, match="ends with a user turn"):
        tiny_template.encode(CONVERSATIONS[0], add_generation_prompt=True)
