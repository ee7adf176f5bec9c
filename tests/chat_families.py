"""What the chat-format and DPO-trainer tests know of the tiny models' template families
(:data:`sand_framework.testing.tiny_model.FAMILIES`): their names, each one's end-of-turn token, and the trained
runs of a loss mask."""

from __future__ import annotations

FAMILY_NAMES = ["llama3", "qwen2.5", "mistral", "gemma", "smollm2"]
END_OF_TURN = {"llama3": "<|eot_id|>", "qwen2.5": "<|im_end|>", "mistral": "</s>", "gemma": "<end_of_turn>",
               "smollm2": "<|im_end|>", "sand_chatml": "<|im_end|>"}


def trained_runs(ids: list[int], mask: list[int]) -> list[list[int]]:
    """The maximal runs of consecutive tokens of ``ids`` whose ``mask`` is set, in order."""
    runs, cur = [], []
    for tok, m in zip(ids, mask):
        if m:
            cur.append(tok)
        elif cur:
            runs.append(cur)
            cur = []
    return runs + ([cur] if cur else [])
