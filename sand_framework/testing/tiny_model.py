"""Tiny random-init Llama models with real BPE tokenizers, built locally in about a second.

Unit tests need a real ``transformers`` model (generate, chat template, LoRA,
saving) but cannot download one. This builds a deterministic ~1M-parameter
model whose tokenizer is trained on ReAct-style text, so ``Thought:`` /
``Action:`` tokenize compactly.

``family`` gives the tokenizer the special tokens and the chat template of a
real model family (:data:`FAMILIES`), so every code path that renders chats is
tested against the templates users actually bring: Llama-3 header tokens,
Mistral's ``[INST]`` with no system role, Gemma's ``<start_of_turn>`` that
rejects a system message, ChatML with a default system prompt (Qwen2.5,
SmolLM2). The templates are the families' published ones, trimmed of tool-call
branches SAND never uses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Family:
    """A chat-template family: its special tokens (bos, eos, pad first) and its template."""

    bos: str
    eos: str
    pad: str
    extra: tuple[str, ...]
    template: str


_LLAMA3 = (
    "{{- bos_token }}"
    "{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = \"\" %}{%- endif %}"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}{{- \"Today Date: \" + date_string + \"\\n\\n\" }}"
    "{{- system_message }}{{- \"<|eot_id|>\" }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
_QWEN25 = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or (message.role == 'assistant') %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
_MISTRAL = (  # Mistral-7B-Instruct-v0.2: no system role, strict alternation
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)
_GEMMA = (  # Gemma 2: a system message raises; the assistant is called "model"
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
)
_SMOLLM2 = (  # the template SmolLM2-135M-Instruct ships (hub and GGUF): ChatML with a default system prompt
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_CHATML = ("<|im_start|>", "<|im_end|>")

FAMILIES: dict[str, Family] = {
    "sand_chatml": Family("<|im_start|>", "<|im_end|>", "<pad>", ("<|endoftext|>",), CHAT_TEMPLATE),
    "llama3": Family("<|begin_of_text|>", "<|eot_id|>", "<|finetune_right_pad_id|>",
                     ("<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>"), _LLAMA3),
    "qwen2.5": Family("<|endoftext|>", "<|im_end|>", "<|vision_pad|>", _CHATML, _QWEN25),
    "mistral": Family("<s>", "</s>", "<unk>", (), _MISTRAL),
    "gemma": Family("<bos>", "<eos>", "<pad>", ("<start_of_turn>", "<end_of_turn>"), _GEMMA),
    "smollm2": Family("<|im_start|>", "<|im_end|>", "<|endoftext|>", _CHATML, _SMOLLM2),
}
"""Template families the test suite covers. ``sand_chatml`` is the historical default of these tests."""


def build_tiny_model(path: str | os.PathLike, seed: int = 0, hidden: int = 64, layers: int = 2,
                     family: str = "sand_chatml") -> Path:
    """Write a tokenizer with ``family``'s tokens and template and a random-init ``LlamaForCausalLM`` (idempotent)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    fam = FAMILIES[family]
    path = Path(path)
    if (path / "config.json").exists() and (path / "tokenizer.json").exists():
        return path
    path.mkdir(parents=True, exist_ok=True)
    specials = list(dict.fromkeys([fam.bos, fam.eos, fam.pad, *fam.extra, "<|endoftext|>"]))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=fam.bos, eos_token=fam.eos, pad_token=fam.pad, unk_token="<|endoftext|>",
        additional_special_tokens=[t for t in fam.extra if t not in (fam.bos, fam.eos, fam.pad)],
    )
    fast.chat_template = fam.template
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
