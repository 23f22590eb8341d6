"""`swiftlike rlhf --rlhf_type dpo|kto|cpo|simpo|orpo|rm`: arguments, data, encoding, and real TRL runs on a tiny model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from swiftlike.arguments.rlhf_args import RlhfArguments
from swiftlike.commands.rlhf import rlhf_main
from swiftlike.dataset import load_dataset
from swiftlike.model import load_tokenizer, resolve_model
from swiftlike.rl.preference.recipe import _trainer_classes
from swiftlike.rl.preference.data import PreferenceEncoder, encode_kto, encode_pairs, kl_partners, with_kl_completions
from swiftlike.template import get_template
from swiftlike.train.data import EncodeStats
from swiftlike.train.outputs import read_log

from cli import run_cli
from model_ids import TINY

PAIRS = [
    {"messages": [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "2 + 3 = 5.\n#### 5"}],
     "rejected_response": "I think it is 6."},
    {"messages": [{"role": "user", "content": "Compute 4 * 4."}, {"role": "assistant", "content": "4 * 4 = 16.\n#### 16"}],
     "rejected_response": "Sure! The answer is 15."},
]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("SWIFTLIKE_OFFLINE", "1")


@pytest.fixture(scope="module")
def template():
    resolved = resolve_model(TINY)
    return get_template(resolved.meta.template, load_tokenizer(resolved))


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def args(**kw) -> RlhfArguments:
    return RlhfArguments(**{"model": TINY, "dataset": ["d"], **kw})


# ---------------------------------------------------------------- arguments


def test_defaults_follow_ms_swift_by_rlhf_type():
    assert args().rlhf_type == "dpo"
    assert (args().beta, args().loss_type) == (0.1, ["sigmoid"])
    assert (args(rlhf_type="simpo").beta, args(rlhf_type="simpo").loss_type) == (2.0, ["simpo"])
    assert (args(rlhf_type="kto").loss_type, args(rlhf_type="orpo").loss_type, args(rlhf_type="rm").loss_type) == \
        (["kto"], [], [])
    grpo = args(rlhf_type="grpo", reward_funcs=["accuracy"])
    assert (grpo.beta, grpo.grpo_loss_type) == (0.04, "grpo")
    assert args(rlhf_type="grpo", reward_funcs=["accuracy"], loss_type="dapo").grpo_loss_type == "dapo"


@pytest.mark.parametrize("kw, message", [
    ({"loss_type": ["sigmoid", "ipo"], "loss_weights": [1.0]}, "one weight per loss"),
    ({"loss_type": ["dapo"]}, "not a dpo loss"),
    ({"rlhf_type": "kto", "loss_type": ["kto", "apo_zero_unpaired"]}, "mix losses for dpo only"),
    ({"rlhf_type": "orpo", "loss_type": ["sigmoid"]}, "one loss of its own"),
    ({"rlhf_type": "cpo", "ref_model": "x"}, "has no reference model"),
    ({"ref_model": "x"}, "adapter disabled"),
    ({"use_vllm": True}, "learns from the answers in the dataset"),
    ({"reward_funcs": ["accuracy"]}, "reward arguments of grpo and ppo"),
    ({"label_smoothing": 0.5}, "[0, 0.5)"),
    ({"rlhf_type": "grpo", "reward_funcs": ["accuracy"], "rpo_alpha": 1.0}, "not used by --rlhf_type grpo"),
    ({"rlhf_type": "grpo", "reward_funcs": ["accuracy"], "loss_type": ["sigmoid"]}, "grpo takes one of"),
])
def test_bad_arguments_name_the_flag(kw, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        args(**kw)


def test_ppo_without_a_reward_source_exits_2_naming_the_flags():
    """ppo was the type refused as not built; now it is, and what it needs is named before any model loads."""
    result = run_cli("rlhf", "--rlhf_type", "ppo", "--model", TINY, "--dataset", "swiftlike/arithmetic", check=False)
    assert result.returncode == 2, result.stderr
    assert "--rlhf_type ppo needs a reward source: --reward_model" in result.stderr


# ---------------------------------------------------------------- data


@pytest.mark.parametrize("row, kind, message", [
    ({"messages": PAIRS[0]["messages"]}, "pair", "missing the rejected answer"),
    ({**PAIRS[0], "rejected_response": "2 + 3 = 5.\n#### 5"}, "pair", "identical"),
    ({"messages": PAIRS[0]["messages"], "label": "true"}, "kto", "'label' must be a boolean"),
    ({"messages": PAIRS[0]["messages"]}, "kto", "a boolean 'label' \\(KTO\\) or 'rejected_response'"),
    ({"messages": PAIRS[0]["messages"][:1], "rejected_messages": PAIRS[0]["messages"][:1]}, "pair",
     "must end with the assistant answer"),
])
def test_bad_rows_name_file_and_line(tmp_path, row, kind, message):
    good = PAIRS[1] if kind == "pair" else {"messages": PAIRS[1]["messages"], "label": True}
    path = write_jsonl(tmp_path / "prefs.jsonl", [row, good])  # the bad row on line 1
    with pytest.raises(ValueError, match=f"prefs.jsonl line 1: .*{message}"):
        load_dataset([path], row_kind=kind)


def test_rejected_messages_and_chosen_rejected_shapes_become_pairs(tmp_path):
    chosen = PAIRS[0]["messages"]
    rejected = [chosen[0], {"role": "assistant", "content": "I think it is 6."}]
    path = write_jsonl(tmp_path / "p.jsonl", [{"messages": chosen, "rejected_messages": rejected}])
    assert load_dataset([path], row_kind="pair") == [PAIRS[0]]
    path = write_jsonl(tmp_path / "c.jsonl", [{"chosen": chosen, "rejected": rejected}])
    assert load_dataset([path], row_kind="pair") == [PAIRS[0]]
    other = [{"role": "user", "content": "What is 9 + 9?"}, rejected[1]]
    path = write_jsonl(tmp_path / "bad.jsonl", [{"messages": chosen, "rejected_messages": other}])
    with pytest.raises(ValueError, match="bad.jsonl line 1: .*share every turn"):
        load_dataset([path], row_kind="pair")


def test_builtin_preference_set_is_valid_pairs():
    rows = load_dataset(["swiftlike/arithmetic-preference"], row_kind="pair")
    assert len(rows) >= 300
    assert all(r["messages"][-1]["content"].split("\n")[-1].startswith("#### ") for r in rows)
    assert not any("####" in r["rejected_response"] for r in rows)


# ---------------------------------------------------------------- encoding


def test_pair_shares_the_prompt_and_trains_the_answer_and_end_of_turn(template):
    encoder = PreferenceEncoder(template)
    prompt, chosen, rejected = encoder.pair_ids(PAIRS[0])
    assert prompt == template.encode_prompt(PAIRS[0]["messages"][:-1])  # the inference prompt, token for token
    tok = template.tokenizer
    suffix = template.meta.assistant_suffix
    assert chosen == tok("2 + 3 = 5.\n#### 5" + suffix, add_special_tokens=False)["input_ids"]
    assert rejected == tok("I think it is 6." + suffix, add_special_tokens=False)["input_ids"]
    (dpo,), _ = encode_pairs([PAIRS[0]], encoder, "dpo")
    assert dpo == {"prompt_ids": prompt, "chosen_ids": chosen, "rejected_ids": rejected}
    (rm,), _ = encode_pairs([PAIRS[0]], encoder, "rm")
    assert rm["chosen_ids"] == template.encode(PAIRS[0]["messages"]).input_ids  # the whole rendered conversation
    (cpo,), _ = encode_pairs([PAIRS[0]], encoder, "cpo")
    assert cpo["chosen_labels"] == [-100] * len(prompt) + chosen and cpo["rejected_input_ids"] == prompt + rejected
    kto, _ = encode_kto([PAIRS[0], {"messages": PAIRS[1]["messages"], "label": False}], encoder)
    assert [(s["completion_ids"] == chosen, s["label"]) for s in kto] == [(True, True), (False, False), (False, False)]


@pytest.mark.parametrize("prompts, block, partners", [
    ("aabb", 4, [2, 3, 0, 1]),  # a pair's two answers each go to the other pair's prompt, within the step
    ("aabb", 2, [2, 3, 0, 1]),  # a block of one pair cannot pair inside itself: partners from all rows
    ("aabb", 1, [2, 3, 0, 1]),
    ("abc", 3, [1, 2, 0]),
    ("aabbccdd", 4, [2, 3, 0, 1, 6, 7, 4, 5]),
    ("aaab", 4, [3, 3, 3, 0]),  # one prompt holds most rows: each takes the next row of another prompt
])
def test_kl_partners_by_hand(prompts, block, partners):
    assert kl_partners(list(prompts), block) == partners
    assert all(prompts[i] != prompts[j] for i, j in enumerate(partners))


def test_kl_completion_is_cut_to_fit_after_the_rows_prompt():
    samples = [{"prompt_ids": [1, 2, 3], "completion_ids": [4], "label": True},
               {"prompt_ids": [5], "completion_ids": [6, 7, 8, 9], "label": False}]
    paired = with_kl_completions(samples, 2, max_length=5)
    assert [s["KL_completion_ids"] for s in paired] == [[6, 7], [4]]  # 3 + 2 = max_length
    assert [s["KL_completion_ids"] for s in with_kl_completions(samples, 2, None)] == [[6, 7, 8, 9], [4]]


def test_kl_partners_refuse_a_single_prompt():
    with pytest.raises(ValueError, match="1 distinct prompt.*--loss_type apo_zero_unpaired"):
        kl_partners(["a", "a"], 2)


@pytest.mark.parametrize("batch, accumulation", [(4, 1), (2, 2), (1, 1)])
def test_kto_kl_pairs_never_share_a_prompt(tmp_path, template, batch, accumulation):
    """The KL term's mismatched pairs, as TRL's KTO trainer collates them from 16 preference pairs: no row's KL
    completion is an answer to its own prompt (with TRL's in-batch rotation of our side-by-side pairs, 16 of 32
    were), and within each optimizer step the KL completions are that step's answers."""
    from transformers import AutoModelForCausalLM
    from trl import KTOConfig
    rows = load_dataset(["swiftlike/arithmetic-preference#16"], row_kind="kto")
    samples, _ = encode_kto(rows, PreferenceEncoder(template))
    step = batch * accumulation
    samples = with_kl_completions(samples, step, None)
    answers_of: dict[tuple, list] = {}
    for s in samples:
        answers_of.setdefault(tuple(s["prompt_ids"]), []).append(s["completion_ids"])
    assert len(samples) == 32 and not [s for s in samples if s["KL_completion_ids"] in answers_of[tuple(s["prompt_ids"])]]
    if step > 2:  # a step of two rows holds one pair: its partners come from other steps
        for start in range(0, 32, step):
            block = samples[start:start + step]
            assert sorted(s["KL_completion_ids"] for s in block) == sorted(s["completion_ids"] for s in block)

    from datasets import Dataset
    trainer_cls = _trainer_classes()["kto"][0]
    model = AutoModelForCausalLM.from_pretrained(resolve_model(TINY).model_dir, dtype=torch.float32)
    config = KTOConfig(output_dir=str(tmp_path), per_device_train_batch_size=batch,
                       gradient_accumulation_steps=accumulation, max_length=None, report_to="none",
                       remove_unused_columns=False, bf16=False,
                       dataloader_pin_memory=False)
    trainer = trainer_cls(model=model, args=config, train_dataset=Dataset.from_list(samples),
                          processing_class=template.tokenizer)
    assert config.per_device_train_batch_size == batch
    seen, shared = 0, 0
    for collated in trainer.get_train_dataloader():
        for kl_ids, kl_mask in zip(collated["KL_input_ids"].tolist(), collated["KL_completion_mask"].tolist()):
            prompt = tuple(kl_ids[:kl_mask.index(1)])  # what TRL scores: a prompt, then a KL answer after it
            kl_answer = [t for t, m in zip(kl_ids, kl_mask) if m]
            shared += kl_answer in answers_of[prompt]
            assert (list(prompt), kl_answer) == (samples[seen]["prompt_ids"], samples[seen]["KL_completion_ids"])
            seen += 1
    assert (seen, shared) == (32, 0)


def test_length_rules_by_hand(template):
    prompt, answers = list(range(10)), [list(range(100, 106)), list(range(200, 203))]  # 10 + 6 = 16 tokens
    stats = EncodeStats()

    def limit(**kw):
        return PreferenceEncoder(template, **kw).limit(prompt, answers, stats)
    assert limit() == (prompt, answers)
    assert limit(max_completion_length=4) == (prompt, [answers[0][:4], answers[1]])
    assert limit(max_length=12, truncation_strategy="delete") is None
    assert limit(max_length=12, truncation_strategy="left") == (prompt[4:], answers)  # the prompt's end is kept
    assert limit(max_length=12, truncation_strategy="right") == (prompt, [answers[0][:2], answers[1][:2]])
    assert limit(max_length=8, truncation_strategy="right") is None  # the prompt alone fills it
    assert (stats.truncated, stats.dropped_too_long) == (3, 2)


# ---------------------------------------------------------------- real runs on a tiny model


def run(tmp_path: Path, kind: str, *extra: str, dataset: str | None = None, steps: int = 6):
    data = dataset or write_jsonl(tmp_path / "pairs.jsonl", PAIRS)
    result = rlhf_main(["--rlhf_type", kind, "--model", TINY, "--dataset", data, "--max_steps", str(steps),
                        "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1",
                        "--learning_rate", "5e-3", "--lr_scheduler_type", "constant", "--logging_steps", "1",
                        "--gradient_checkpointing", "false", "--torch_dtype", "float32", "--report_to", "none",
                        "--save_steps", str(steps), "--output_dir", str(tmp_path / kind), *extra])
    return result, [e for e in read_log(result.run_dir) if "loss" in e]


@pytest.mark.parametrize("kind, extra", [
    ("dpo", ()), ("dpo", ("--tuner_type", "full", "--learning_rate", "1e-3")),
    ("dpo", ("--tuner_type", "full", "--learning_rate", "1e-3", "--precompute_ref_log_probs", "true")),
    ("kto", ("--per_device_train_batch_size", "4")),
    ("cpo", ()), ("simpo", ("--cpo_alpha", "0")), ("orpo", ()), ("rm", ()),
    ("dpo", ("--loss_type", "sigmoid", "ipo", "--loss_weights", "1.0", "0.5", "--rpo_alpha", "1.0")),
])
def test_each_type_learns_a_repeated_batch(tmp_path, kind, extra):
    """Two pairs, batch of two: every step sees the same batch, so the loss must fall."""
    result, log = run(tmp_path, kind, *extra)
    losses = [e["loss"] for e in log]
    assert len(losses) == 6 and all(map(torch.isfinite, torch.tensor(losses))), losses
    assert losses[-1] < losses[0], losses
    images = {p.name for p in (result.run_dir / "images").iterdir()}
    assert "train_loss.png" in images
    if kind != "rm":
        assert {"train_rewards_chosen.png", "train_rewards_rejected.png", "train_rewards_margins.png"} <= images
    if kind in ("dpo", "cpo", "simpo", "orpo"):
        assert "train_rewards_accuracies.png" in images
    assert (result.last_checkpoint / "args.json").is_file()
    assert json.loads((result.run_dir / "args.json").read_text())["rlhf_type"] == kind


def test_kto_trains_at_batch_size_one(tmp_path):
    """ms-swift's KTO examples train at --per_device_train_batch_size 1 (TRL alone refuses it): each row's KL
    completion is another prompt's answer, paired before TRL sees the data, and the run's batch really is 1."""
    result, log = run(tmp_path, "kto", "--per_device_train_batch_size", "1", steps=2)
    assert len(log) == 2 and all(torch.isfinite(torch.tensor([e["loss"], e["kl"]])).all() for e in log), log
    state = json.loads((result.last_checkpoint / "trainer_state.json").read_text())
    assert (state["train_batch_size"], result.global_step) == (1, 2)


def test_lora_reference_is_the_model_with_the_adapter_disabled(tmp_path):
    """Before the first update the policy is its reference, so every implicit reward is exactly 0; no second
    model is loaded (TRL keeps a frozen copy of the zero-initialised adapter)."""
    _, log = run(tmp_path, "dpo", steps=2)
    assert log[0]["rewards/chosen"] == 0.0 and log[0]["rewards/rejected"] == 0.0
    assert log[1]["rewards/margins"] != 0.0


def _sequence_logp(model, prompt: list[int], answer: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + answer])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:-1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(answer)[:, None]).sum()


def test_first_dpo_loss_equals_hand_computed_sigmoid_loss(tmp_path, template):
    """The logged first-step loss of full DPO against a different reference, recomputed here from the two
    models' log-probs of the exact answer tokens (prompt from the inference template): guards the template,
    the masks and the reference."""
    from transformers import AutoModelForCausalLM
    resolved = resolve_model(TINY)
    policy = AutoModelForCausalLM.from_pretrained(resolved.model_dir, dtype=torch.float32).eval()
    ref = AutoModelForCausalLM.from_pretrained(resolved.model_dir, dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    ref_dir = tmp_path / "ref"
    ref.save_pretrained(ref_dir)
    template.tokenizer.save_pretrained(ref_dir)
    ref.eval()
    beta, tok, suffix = 0.1, template.tokenizer, template.meta.assistant_suffix
    losses = []
    for row in PAIRS:
        prompt = template.encode_prompt(row["messages"][:-1])
        chosen = tok(row["messages"][-1]["content"] + suffix, add_special_tokens=False)["input_ids"]
        rejected = tok(row["rejected_response"] + suffix, add_special_tokens=False)["input_ids"]
        margin = (_sequence_logp(policy, prompt, chosen) - _sequence_logp(ref, prompt, chosen)) - \
                 (_sequence_logp(policy, prompt, rejected) - _sequence_logp(ref, prompt, rejected))
        losses.append(-F.logsigmoid(beta * margin))
    expected = torch.stack(losses).mean().item()
    _, log = run(tmp_path, "dpo", "--tuner_type", "full", "--ref_model", str(ref_dir), steps=1)
    assert abs(log[0]["loss"] - expected) < 1e-5, (log[0]["loss"], expected)
    assert abs(expected - 0.6931) > 1e-3  # the reference differs, so the check is not the trivial log(2)


def test_rm_checkpoint_scores_grpo_rewards(tmp_path):
    """A LoRA reward model trained by `rlhf --rlhf_type rm` is accepted by GRPO's --reward_model as it is."""
    result, _ = run(tmp_path, "rm", steps=2)
    run_cli("rlhf", "--rlhf_type", "grpo", "--model", TINY, "--dataset", "swiftlike/arithmetic#8", "--reward_model",
            result.last_checkpoint, "--num_generations", "2", "--per_device_train_batch_size", "2",
            "--gradient_accumulation_steps", "1", "--max_completion_length", "8", "--max_steps", "1",
            "--logging_steps", "1", "--report_to", "none", "--gradient_checkpointing", "false", "--output_dir",
            tmp_path / "grpo")
    run_dir = next((tmp_path / "grpo").iterdir())
    step = next(e for e in read_log(run_dir) if "reward" in e)
    column = [k for k in step if k.startswith("rewards/") and k.endswith("/mean")]
    assert column and all(torch.isfinite(torch.tensor(step[k])) for k in column), step


def test_dpo_checkpoint_infers_and_merges(tmp_path):
    from swiftlike.commands.export import export_main
    from swiftlike.commands.infer import infer_main
    result, _ = run(tmp_path, "dpo", steps=2)
    merged = export_main(["--adapters", str(result.last_checkpoint), "--merge_lora", "true"])
    out = tmp_path / "answers.jsonl"
    infer_main(["--model", str(merged), "--val_dataset", write_jsonl(tmp_path / "q.jsonl", PAIRS),
                "--max_new_tokens", "4", "--temperature", "0", "--result_path", str(out)])
    assert len(out.read_text().splitlines()) == len(PAIRS)
