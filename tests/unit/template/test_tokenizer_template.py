"""Any chat model: an unregistered model type trains and serves with its tokenizer's own chat template.

The model is a tiny random MistralForCausalLM (no registered type has that architecture), saved offline
with a tokenizer whose chat template is Zephyr's format, which no registered template uses (tests/helpers/
tiny_mistral.py). Its 2-step sft and infer from the checkpoint are in tests/e2e/test_template_runs.py.
"""
import json

import pytest
from tiny_mistral import ZEPHYR, save_tiny_mistral

from swiftlike.model import load_tokenizer, resolve_model
from swiftlike.template import IGNORE_INDEX, get_template

ZEPHYR_MARKED = ("{% for m in messages %}{% if m['role'] == 'assistant' %}{{ '<|assistant|>\\n' }}"
                 "{% generation %}{{ m['content'] + eos_token }}{% endgeneration %}{{ '\\n' }}"
                 "{% else %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + eos_token + '\\n' }}{% endif %}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}")
# the last answer rendered apart from earlier ones, as templates that drop reasoning from history do
REWRITES_HISTORY = ("{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}"
                    "{{ '<|assistant|>\\n(earlier)' + eos_token + '\\n' }}"
                    "{% else %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + eos_token + '\\n' }}{% endif %}"
                    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}")
MULTI_TURN = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."},
              {"role": "assistant", "content": " Blue "}, {"role": "user", "content": "Another one:\n"},
              {"role": "assistant", "content": "Green\n\nor red."}]
PROMPTS = [[{"role": "user", "content": "Who are you?"}], MULTI_TURN + [{"role": "user", "content": "Thanks"}]]


@pytest.fixture(scope="module")
def mistral_dir(tmp_path_factory):
    return save_tiny_mistral(tmp_path_factory.mktemp("tiny-mistral"), ZEPHYR)


@pytest.fixture(scope="module")
def mistral(mistral_dir):
    resolved = resolve_model(str(mistral_dir))
    tokenizer = load_tokenizer(resolved)
    return resolved, tokenizer, get_template(resolved.meta.template, tokenizer)


def test_unregistered_type_uses_the_tokenizer_template(mistral, mistral_dir):
    resolved, _, template = mistral
    assert (resolved.model_type, resolved.meta.architecture, resolved.meta.template) == \
        ("mistral", "MistralForCausalLM", "tokenizer")
    assert template.meta.name == "tokenizer" and template.meta.chat_template == ZEPHYR
    # what a checkpoint's args.json records as --model_type resolves the same way; a wrong name still fails
    assert resolve_model(str(mistral_dir), model_type="mistral").meta.template == "tokenizer"
    with pytest.raises(ValueError, match="unknown --model_type 'gemma'"):
        resolve_model(str(mistral_dir), model_type="gemma")


@pytest.mark.parametrize("messages", PROMPTS)
def test_prompt_encoding_equals_apply_chat_template(mistral, messages):
    _, tokenizer, template = mistral
    expected = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False)
    assert template.encode_prompt(messages) == list(expected)
    assert template.encode(MULTI_TURN).input_ids == list(
        tokenizer.apply_chat_template(MULTI_TURN, tokenize=True, return_dict=False))


def assistant_token_positions(tokenizer, messages, turns):
    """Independently of the template code: the tokens whose text lies in `content + eos` of the given turns."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    spans, at = [], 0
    for i, m in enumerate(messages):
        at = text.index(f"<|{m['role']}|>\n", at) + len(f"<|{m['role']}|>\n")
        if i in turns:
            spans.append((at, at + len(m["content"] + "</s>")))
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return [t for t, (start, _) in enumerate(offsets) if any(a <= start < b for a, b in spans)]


def trained_positions(encoded):
    return [t for t, label in enumerate(encoded.labels) if label != IGNORE_INDEX]


def test_labels_cover_exactly_the_assistant_turns(mistral):
    _, tokenizer, template = mistral
    encoded = template.encode(MULTI_TURN)
    assert trained_positions(encoded) == assistant_token_positions(tokenizer, MULTI_TURN, {2, 4})
    assert tokenizer.decode([t for t in encoded.labels if t != IGNORE_INDEX]) == " Blue </s>Green\n\nor red.</s>"
    assert all(encoded.labels[t] == encoded.input_ids[t] for t in trained_positions(encoded))


def test_loss_scale_on_the_tokenizer_template(mistral):
    _, tokenizer, template = mistral
    last = template.encode(MULTI_TURN, loss_scale="last_round")
    assert trained_positions(last) == assistant_token_positions(tokenizer, MULTI_TURN, {4})
    assert last.labels[1:] != template.encode(MULTI_TURN).labels[1:]
    every = template.encode(MULTI_TURN, loss_scale="all")
    assert every.labels == every.input_ids


def test_system_flag_adds_a_system_turn(mistral):
    _, tokenizer, _ = mistral
    template = get_template("tokenizer", tokenizer, system="Answer in French.")
    messages = [{"role": "user", "content": "Hi"}]
    assert template.encode_prompt(messages) == list(tokenizer.apply_chat_template(
        [{"role": "system", "content": "Answer in French."}, *messages], add_generation_prompt=True,
        return_dict=False))


def test_generation_blocks_give_the_tokenizers_assistant_mask(mistral):
    _, tokenizer, _ = mistral
    tokenizer = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    tokenizer.chat_template = ZEPHYR_MARKED
    template = get_template("tokenizer", tokenizer)
    assert template.marks_generation
    marked = tokenizer.apply_chat_template(MULTI_TURN, return_dict=True, return_assistant_tokens_mask=True)
    encoded = template.encode(MULTI_TURN)
    assert encoded.input_ids == list(marked["input_ids"])
    assert [label != IGNORE_INDEX for label in encoded.labels] == [bool(m) for m in marked["assistant_masks"]]
    assert trained_positions(template.encode(MULTI_TURN, loss_scale="last_round")) == \
        assistant_token_positions(tokenizer, MULTI_TURN, {4})


def test_a_template_that_rewrites_history_is_refused(mistral):
    _, tokenizer, _ = mistral
    tokenizer = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    tokenizer.chat_template = REWRITES_HISTORY
    with pytest.raises(ValueError, match="renders earlier turns differently.*--template"):
        get_template("tokenizer", tokenizer).encode(MULTI_TURN)


def test_end_of_turn_token_stops_generation(mistral):
    """A template ending turns with a special token other than EOS (Phi-3's <|end|>) stops generation there."""
    _, tokenizer, _ = mistral
    tokenizer = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|end|>"]})
    tokenizer.chat_template = ZEPHYR.replace("eos_token", "'<|end|>'")
    template = get_template("tokenizer", tokenizer)
    assert template.meta.stop_words == ("<|end|>",)
    assert tokenizer.convert_tokens_to_ids("<|end|>") in template.stop_token_ids
    assert tokenizer.eos_token_id in template.stop_token_ids


def test_no_chat_template_asks_for_template(tmp_path):
    path = save_tiny_mistral(tmp_path / "no-template", ZEPHYR)
    config = json.loads((path / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    for extra in path.glob("chat_template.*"):
        extra.unlink()
    resolved = resolve_model(str(path))
    tokenizer = load_tokenizer(resolved)
    with pytest.raises(ValueError, match="has no chat template.*pass --template with one of: chatml"):
        get_template(resolved.meta.template, tokenizer)
    assert get_template("chatml", tokenizer).meta.name == "chatml"


def test_llama_without_a_known_family_token_is_not_guessed_llama3():
    from swiftlike.model.registry import guess_model_type
    assert guess_model_type("llama", "tinyllama-chat", {"</s>", "<s>"}) is None
    assert guess_model_type("llama", "x", {"<|eot_id|>"}) == "llama3"
