"""The SFT dataset: each trajectory's chat tokenized with the base model's own template, loss on replies only.

Tokenizing here rather than inside TRL keeps one rendering for training and
sampling (:class:`sand_framework.chat_format.ChatFormat`): TRL's
``assistant_only_loss`` needs ``{% generation %}`` markers that stock
templates lack, and patching them in would train on a different template from
the one the policies sample with.
"""

from __future__ import annotations

from dataclasses import dataclass

from sand_framework.chat_format import ChatFormat
from sand_framework.errors import TrainingInputError
from sand_framework.prompting import trajectory_chat
from sand_framework.types import Trajectory


@dataclass
class SftExamples:
    """Pre-tokenized rows (``input_ids``, ``assistant_masks``) and what truncation cost."""

    rows: list[dict[str, list[int]]]
    truncated: int
    """Examples longer than ``max_length`` (their start is kept)."""
    dropped: int
    """Examples left with no trained token after truncation (not trained on)."""


def build_examples(trajectories: list[Trajectory], fmt: ChatFormat, max_length: int) -> SftExamples:
    rows, truncated, dropped = [], 0, 0
    for traj in trajectories:
        ids, mask = fmt.training_example(trajectory_chat(traj))
        if max_length > 0 and len(ids) > max_length:
            ids, mask = ids[:max_length], mask[:max_length]
            truncated += 1
        if not any(mask):
            dropped += 1
            continue
        rows.append({"input_ids": ids, "assistant_masks": mask})
    return SftExamples(rows, truncated, dropped)


def build_dataset(trajectories: list[Trajectory], fmt: ChatFormat, max_length: int):
    """A ``datasets.Dataset`` TRL takes as already processed, plus the truncation counts."""
    from datasets import Dataset

    examples = build_examples(trajectories, fmt, max_length)
    if not examples.rows:
        raise TrainingInputError(f"trl_sft: none of the {len(trajectories)} trajectories has a trained token "
                                 f"within max_length={max_length}; raise trainer.max_length")
    return Dataset.from_list(examples.rows), examples
