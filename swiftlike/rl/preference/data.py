"""Preference rows -> the token ids TRL's DPO, CPO/SimPO, ORPO, KTO and reward trainers read.

Why not TRL's own tokenization: TRL renders with the tokenizer's Jinja chat template and locates the answer by
comparing the tokenization of the prompt alone with that of prompt + answer. swiftlike renders with the
template every other command uses (sft, infer, deploy, GRPO), and the answer is exactly the tokens that
`--loss_scale last_round` trains in sft: the last assistant turn and its end-of-turn token. A model
preference-trained here is therefore prompted at inference exactly as it was trained, and the chosen and the
rejected answer of a pair always follow the same prompt tokens.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from ...template.base import IGNORE_INDEX, Template
from ...train.data import EncodeStats


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class PreferenceEncoder:
    """Splits a conversation into prompt ids and answer ids, and applies the length limits.

    Length rules (ms-swift's `--truncation_strategy`): answers are first cut to `max_completion_length`;
    then, when prompt + the longer answer exceeds `max_length`, `delete` drops the row, `left` cuts the prompt
    from the left (keeping its end, next to the answer), `right` cuts the answers on the right.
    """

    template: Template
    max_length: int | None = None
    max_completion_length: int | None = None
    truncation_strategy: str = "delete"

    def split(self, messages: list[dict]) -> tuple[list[int], list[int]]:
        """(prompt ids, answer ids): the answer is the last assistant turn as sft's last_round trains it."""
        encoded = self.template.encode(messages, loss_scale="last_round")
        trained = [i for i, label in enumerate(encoded.labels) if label != IGNORE_INDEX]
        if not trained:
            raise ValueError("a preference row's answer renders to no tokens")
        return encoded.input_ids[:trained[0]], encoded.input_ids[trained[0]:trained[-1] + 1]

    def tail(self, messages: list[dict]) -> list[int]:
        """The ids the template renders after the answer's end-of-turn token (e.g. chatml's newline): a reward
        model scores a whole rendered conversation (`RewardModel.render`), so it is trained on whole ones."""
        encoded = self.template.encode(messages, loss_scale="last_round")
        last = max(i for i, label in enumerate(encoded.labels) if label != IGNORE_INDEX)
        return encoded.input_ids[last + 1:]

    def pair_ids(self, row: dict) -> tuple[list[int], list[int], list[int]]:
        """(prompt, chosen, rejected): the prompt tokens are the ones both conversations share."""
        messages = row["messages"]
        rejected_messages = [*messages[:-1], {"role": "assistant", "content": row["rejected_response"]}]
        prompt_c, chosen = self.split(messages)
        prompt_r, rejected = self.split(rejected_messages)
        if prompt_c == prompt_r:
            return prompt_c, chosen, rejected
        # a tokenizer may merge the prompt's last token with the answer's first: keep only the shared part
        full_c, full_r = prompt_c + chosen, prompt_r + rejected
        n = min(_common_prefix(full_c, full_r), len(prompt_c), len(prompt_r))
        return full_c[:n], full_c[n:], full_r[n:]

    def limit(self, prompt: list[int], answers: list[list[int]],
              stats: EncodeStats) -> tuple[list[int], list[list[int]]] | None:
        """Apply the length rules to a prompt and its answers; None = the row is dropped."""
        cut = False
        if self.max_completion_length is not None and any(len(a) > self.max_completion_length for a in answers):
            answers = [a[:self.max_completion_length] for a in answers]
            cut = True
        longest = max(len(a) for a in answers)
        if self.max_length is not None and len(prompt) + longest > self.max_length:
            if self.truncation_strategy == "delete":
                stats.dropped_too_long += 1
                return None
            if self.truncation_strategy == "left" and longest < self.max_length:
                prompt = prompt[len(prompt) + longest - self.max_length:]
            else:  # right, or an answer that alone fills max_length
                room = self.max_length - len(prompt)
                if room <= 0:
                    stats.dropped_too_long += 1
                    return None
                answers = [a[:room] for a in answers]
            cut = True
        stats.truncated += cut
        stats.tokens += len(prompt) + sum(len(a) for a in answers)
        stats.longest = max(stats.longest, len(prompt) + max(len(a) for a in answers))
        return prompt, answers


def encode_pairs(rows: list[dict], encoder: PreferenceEncoder, layout: str) -> tuple[list[dict], EncodeStats]:
    """Rows with `messages` (chosen last) and `rejected_response` -> one sample per row in `layout`:

    - `dpo`: prompt_ids, chosen_ids, rejected_ids (TRL's DPOTrainer);
    - `cpo`: TRL's CPO/ORPO tokenized row (prompt_/chosen_/rejected_ input_ids, attention_mask, labels);
    - `rm`: chosen_ids and rejected_ids holding the whole rendered conversations (TRL's RewardTrainer).
    """
    stats = EncodeStats()
    samples = []
    for row in rows:
        stats.rows += 1
        prompt, chosen, rejected = encoder.pair_ids(row)
        limited = encoder.limit(prompt, [chosen, rejected], stats)
        if limited is None:
            continue
        prompt, (chosen, rejected) = limited
        stats.kept += 1
        if layout == "dpo":
            samples.append({"prompt_ids": prompt, "chosen_ids": chosen, "rejected_ids": rejected})
        elif layout == "rm":
            tail = encoder.tail(row["messages"])
            samples.append({"chosen_ids": prompt + chosen + tail, "rejected_ids": prompt + rejected + tail})
        elif layout == "cpo":
            samples.append(cpo_row(prompt, chosen, rejected))
        else:
            raise ValueError(f"unknown pair layout {layout!r}")
    return samples, stats


def cpo_row(prompt: list[int], chosen: list[int], rejected: list[int]) -> dict:
    """The row TRL's CPO and ORPO trainers make in their `tokenize_row`, built from our ids."""
    row = {"prompt_input_ids": prompt, "prompt_attention_mask": [1] * len(prompt)}
    for side, answer in (("chosen", chosen), ("rejected", rejected)):
        ids = prompt + answer
        row[f"{side}_input_ids"] = ids
        row[f"{side}_attention_mask"] = [1] * len(ids)
        row[f"{side}_labels"] = [IGNORE_INDEX] * len(prompt) + answer
    return row


def encode_kto(rows: list[dict], encoder: PreferenceEncoder) -> tuple[list[dict], EncodeStats]:
    """KTO samples (prompt_ids, completion_ids, label). A row with a `label` is one sample; a preference pair
    becomes two, side by side, its chosen answer desirable and its rejected one undesirable (so a batch holds
    both kinds); `with_kl_completions` then gives each sample another prompt's answer for KTO's KL term."""
    stats = EncodeStats()
    samples = []
    for row in rows:
        stats.rows += 1
        if "label" in row:
            prompt, answer = encoder.split(row["messages"])
            labelled = [(answer, row["label"])]
        else:
            prompt, chosen, rejected = encoder.pair_ids(row)
            labelled = [(chosen, True), (rejected, False)]
        limited = encoder.limit(prompt, [a for a, _ in labelled], stats)
        if limited is None:
            continue
        prompt, answers = limited
        stats.kept += 1
        samples += [{"prompt_ids": prompt, "completion_ids": answer, "label": label}
                    for answer, (_, label) in zip(answers, labelled)]
    return samples, stats


def _derangement(prompts: Sequence[Hashable], indices: list[int]) -> dict[int, int] | None:
    """A permutation of `indices` that sends no row to a row of the same prompt, or None when none exists (one
    prompt holds more than half of them). The rows, grouped by prompt with the largest group first, are shifted
    by that group's size: a shift of at least a group's size and at most the rest of the rows leaves every group."""
    groups: dict[Hashable, list[int]] = {}
    for i in indices:
        groups.setdefault(prompts[i], []).append(i)
    ordered = [i for group in sorted(groups.values(), key=len, reverse=True) for i in group]
    shift = max(len(group) for group in groups.values())
    if 2 * shift > len(ordered):
        return None
    return {ordered[k]: ordered[(k + shift) % len(ordered)] for k in range(len(ordered))}


def kl_partners(prompts: Sequence[Hashable], block: int) -> list[int]:
    """For each row, the row whose answer is its mismatched completion in KTO's KL term: always another prompt's.

    Rows are read in blocks of `block` (the rows of one optimizer step: TRL's KTO reads the data in order), and
    within a block the answers are permuted among its rows, so the KL term sees the answers the loss sees, as TRL
    intends. A block where that cannot be done (a block of one or two rows, one prompt filling more than half of
    it) takes its partners from a permutation of all rows; and where one prompt holds more than half of all rows,
    each row takes the next row of another prompt.
    """
    if block < 1:
        raise ValueError(f"block must be at least 1, got {block}")
    if len(set(prompts)) < 2:
        raise ValueError("KTO's KL term pairs each prompt with another prompt's answer, but the data has "
                         f"{len(set(prompts))} distinct prompt(s): add rows with other prompts, or use "
                         "--loss_type apo_zero_unpaired (no KL term)")
    every = range(len(prompts))
    overall = _derangement(prompts, list(every)) or {
        i: next(j % len(prompts) for j in range(i + 1, i + len(prompts)) if prompts[j % len(prompts)] != prompts[i])
        for i in every}
    partners = []
    for start in range(0, len(prompts), block):
        indices = list(range(start, min(start + block, len(prompts))))
        within = _derangement(prompts, indices) or overall
        partners += [within[i] for i in indices]
    return partners


def with_kl_completions(samples: list[dict], block: int, max_length: int | None) -> list[dict]:
    """KTO samples with `KL_completion_ids`, the column TRL's KTO collator reads for the KL term: each sample's
    partner answer from `kl_partners`, cut to fit `max_length` after this sample's prompt. Paired here rather than
    by TRL's rotation inside each batch, because that rotation pairs a pair's two answers with their own prompt
    and needs a batch of at least two."""
    partners = kl_partners([tuple(s["prompt_ids"]) for s in samples], block)
    out = []
    for sample, partner in zip(samples, partners):
        completion = samples[partner]["completion_ids"]
        if max_length is not None:
            completion = completion[:max_length - len(sample["prompt_ids"])]
        out.append({**sample, "KL_completion_ids": completion})
    return out
