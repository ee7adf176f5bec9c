"""A tiny random-init Llama model with a real BPE tokenizer, built locally in about a second.

Unit tests need a real ``transformers`` model (generate, chat template, LoRA,
saving) but cannot download one. This builds a deterministic ~1M-parameter
model whose tokenizer is trained on ReAct-style text, so ``Thought:`` /
``Action:`` tokenize compactly.
"""

from __future__ import annotations

import os
from pathlib import Path

from sand_framework.chat_template import CHAT_TEMPLATE


_CORPUS = [
    "Thought: I should look around first.\nAction: look around",
    "Thought: The coin may be in the kitchen.\nAction: move east",
    "Observation: You are in the kitchen. You see a coin, a fridge and a door to the west.",
    "Action: take coin",
    "Action: open door to north",
    "Action: go to countertop 1",
    "Action: put apple 1 in/on fridge 1",
    "You are playing a text game. Your task is to find the coin. Answer with Thought: and Action:.",
    "OK",
    "Let me weigh my options. If I \"move east\" I reach the kitchen. So I will \"take coin\".",
]


def build_tiny_model(path: str | os.PathLike, seed: int = 0, hidden: int = 64, layers: int = 2) -> Path:
    """Write a tokenizer and a random-init ``LlamaForCausalLM`` to ``path`` (idempotent)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    if (path / "config.json").exists() and (path / "tokenizer.json").exists():
        return path
    path.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<pad>",
        unk_token="<|endoftext|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = fast.pad_token_id
    model.save_pretrained(path)
    return path
