"""The DPO dataset: each pair's prompt and sides tokenized with the base model's own template, loss on replies only.

A pair (:class:`~sand_framework.types.PreferencePair`) renders as three chats
(:func:`sand_framework.pairs.pair_messages`): the prompt (instruction, ``OK``,
task and the steps before the continuations, ending on the observation the
agent answers next) and each side (assistant turns with the observations
between them, ending on the last assistant turn). Each side is tokenized as
one whole chat, prompt + side, through :meth:`ChatFormat.training_example`,
exactly as the SFT trainer tokenizes a trajectory
(:mod:`sand_builtins.trainers.sft_data`): so

* the trained tokens of a side are its assistant replies and their
  end-of-turn token; the observations between them are masked (ETO's
  ``train_dpo`` masks the human turns the same way);
* the prompt the policy renders for the first continued step, and for every
  later step of the side, is checked to be a token prefix of the sequence
  (:class:`~sand_framework.chat_format.ChatTemplateError` otherwise);
* no other template is ever substituted.

The rows carry ``prompt_ids``, ``chosen_ids``/``rejected_ids`` (the side's
tokens after the prompt) and ``chosen_mask``/``rejected_mask`` (1 = trained),
which :class:`MaskedPreferenceCollator` pads into TRL's ``completion_mask``;
TRL's own tokenization (which would train every completion token, the
observations too) is skipped by the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sand_framework.chat_format import ChatFormat, ChatTemplateError
from sand_framework.errors import TrainingInputError
from sand_framework.pairs import pair_messages
from sand_framework.prompting import HEAD_TURNS
from sand_framework.types import Chat, PreferencePair

SIDES = ("chosen", "rejected")


@dataclass
class DpoExamples:
    """Pre-tokenized pair rows and what truncation cost."""

    rows: list[dict[str, list[int]]]
    truncated: int
    """Pairs with a side longer than ``max_length`` (cut at the end) or a prompt longer than
    ``max_prompt_length`` (shortened as the policy shortens prompts)."""
    dropped: int
    """Pairs left with a side without any trained token after truncation (not trained on)."""


def _shorten_prompt(chat: Chat, fmt: ChatFormat, limit: int) -> Chat:
    """``chat`` with its oldest (assistant, observation) pairs after the instruction/OK/task removed until its
    prompt fits ``limit`` tokens: what :func:`sand_framework.prompting.fit_prompt` does when a policy's prompt
    is too long, so the shortened prompt is one the agent is really sampled from."""
    chat = list(chat)
    while (len(fmt.prompt_ids(chat)) > limit and len(chat) >= HEAD_TURNS + 3
           and chat[HEAD_TURNS].get("role") == "assistant"):
        del chat[HEAD_TURNS: HEAD_TURNS + 2]
    return chat


def pair_example(pair: PreferencePair, fmt: ChatFormat, max_prompt_length: int = 0) -> tuple[dict[str, Any], bool]:
    """One pair as a row (``prompt_ids``, ``<side>_ids``, ``<side>_mask``) and whether its prompt was shortened.

    Raises :class:`ValueError` for a pair with an empty side and
    :class:`ChatTemplateError` when the template's rendering of the prompt is
    not a token prefix of a side's sequence.
    """
    msgs = pair_messages(pair)
    for side in SIDES:
        if not msgs[side]:
            raise TrainingInputError(f"pair of task {pair.prompt.task_id!r}: its {side} side has no step")
    prompt_chat, shortened = msgs["prompt"], False
    if max_prompt_length > 0 and len(fmt.prompt_ids(prompt_chat)) > max_prompt_length:
        prompt_chat, shortened = _shorten_prompt(prompt_chat, fmt, max_prompt_length), True
    prompt = fmt.prompt_ids(prompt_chat)
    row: dict[str, Any] = {"prompt_ids": prompt}
    for side in SIDES:
        ids, mask = fmt.training_example(prompt_chat + msgs[side])  # checks every turn's prompt is a prefix
        if ids[: len(prompt)] != prompt:
            raise ChatTemplateError(
                f"{fmt.source}: the prompt of the pair of task {pair.prompt.task_id!r} is not a token prefix of its "
                f"{side} side's sequence; the template renders the prompt differently once replies follow")
        row[f"{side}_ids"] = ids[len(prompt):]
        row[f"{side}_mask"] = mask[len(prompt):]
    return row, shortened


def build_examples(pairs: list[PreferencePair], fmt: ChatFormat, max_length: int,
                   max_prompt_length: int = 0) -> DpoExamples:
    """Every pair's row; sides cut so that prompt + side fits ``max_length`` (the start is kept)."""
    rows, truncated, dropped = [], 0, 0
    for pair in pairs:
        row, cut = pair_example(pair, fmt, max_prompt_length)
        if len(row["prompt_ids"]) > max_prompt_length > 0:  # still too long: cut from the left, as the policy does
            row["prompt_ids"] = row["prompt_ids"][-max_prompt_length:]
        room = max_length - len(row["prompt_ids"]) if max_length > 0 else None
        for side in SIDES:
            if room is not None and len(row[f"{side}_ids"]) > room:
                row[f"{side}_ids"] = row[f"{side}_ids"][: max(room, 0)]
                row[f"{side}_mask"] = row[f"{side}_mask"][: max(room, 0)]
                cut = True
        truncated += int(cut)
        if not all(any(row[f"{side}_mask"]) for side in SIDES):
            dropped += 1
            continue
        rows.append(row)
    return DpoExamples(rows, truncated, dropped)


def build_dataset(pairs: list[PreferencePair], fmt: ChatFormat, max_length: int, max_prompt_length: int = 0):
    """A ``datasets.Dataset`` of pre-tokenized rows, plus the truncation counts."""
    from datasets import Dataset

    examples = build_examples(pairs, fmt, max_length, max_prompt_length)
    if not examples.rows:
        raise TrainingInputError(f"trl_dpo: none of the {len(pairs)} pairs has a trained token on both sides "
                                 f"within max_length={max_length}; raise preference_trainer.max_length")
    return Dataset.from_list(examples.rows), examples


@dataclass
class MaskedPreferenceCollator:
    """Pads rows into TRL's batch: ``input_ids``/``attention_mask``/``completion_mask``, chosen half first.

    Like ``trl.trainer.dpo_trainer.DataCollatorForPreference`` except that the
    completion mask is the row's own (the assistant replies), not every token
    after the prompt.
    """

    pad_token_id: int

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        seqs, masks = [], []
        for side in SIDES:
            for ex in examples:
                seqs.append(list(ex["prompt_ids"]) + list(ex[f"{side}_ids"]))
                masks.append([0] * len(ex["prompt_ids"]) + list(ex[f"{side}_mask"]))
        width = max(len(s) for s in seqs)
        out = {
            "input_ids": torch.tensor([s + [self.pad_token_id] * (width - len(s)) for s in seqs], dtype=torch.long),
            "attention_mask": torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs], dtype=torch.long),
            "completion_mask": torch.tensor([m + [0] * (width - len(m)) for m in masks], dtype=torch.long),
        }
        for key in ("ref_chosen_logps", "ref_rejected_logps"):
            if key in examples[0]:
                out[key] = torch.tensor([ex[key] for ex in examples])
        return out
