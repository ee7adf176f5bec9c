"""The base model's own chat template as the single source of training sequences and sampling prompts.

SAND trains the agent on chats (:func:`sand_framework.prompting.trajectory_chat`)
and later samples it from prefixes of the same chats. Both must see the same
tokens, whatever the model family: a model trained on one rendering and
sampled with another learns a format it is never shown. So nothing here swaps
in another template; :class:`ChatFormat` derives everything from the
tokenizer's own ``chat_template``:

* **Loss masks by prefix difference.** For every assistant turn, the tokens
  between "the chat up to that turn, with the generation prompt" and "the chat
  including that turn" are the reply. The mask covers them up to and including
  the template's end-of-turn token (``<|im_end|>``, ``<|eot_id|>``,
  ``<end_of_turn>``, ``</s>`` ...); template whitespace after it is not
  trained, because the model never generates it.
* **Prompts are token prefixes of the training sequence.** Every training
  example is checked: the prompt a policy renders for step *t* must equal,
  token for token, the start of the training sequence. A template that
  rewrites earlier turns (e.g. one that strips reasoning from past replies)
  fails that check with :class:`ChatTemplateError` instead of training on a
  format the agent will never be prompted with.
* **System text** is passed natively where the template renders a system
  role; where it rejects or drops one (Mistral v0.2, Gemma), it is folded into
  the first user turn (``system + "\\n\\n" + user``), as those families'
  own documentation recommends.
* **Alternation**: SAND's chats always alternate user/assistant starting with
  the user (the ETO layout), which every template family accepts.

What was used is written beside every weights directory
(:data:`FORMAT_FILE` plus the tokenizer with its template), and every policy
loads it from there.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sand_framework.errors import SandError
from sand_framework.types import Chat

FORMAT_FILE = "sand_chat_format.json"
"""Written beside trained weights: which template (hash), system handling and end-of-turn tokens were used."""

_PROBE = "SANDPROBEREPLY"
"""Assistant text used to find where a template puts the reply and what it appends after it."""


class ChatTemplateError(SandError):
    """The model's chat template cannot give consistent training sequences and prompts."""

    exit_code = 4


@dataclass(frozen=True)
class FormatInfo:
    """The facts about a template that training and sampling must agree on (saved as :data:`FORMAT_FILE`)."""

    template_sha256: str
    system: str
    """``native`` (the template renders a system role) or ``fold`` (merged into the first user turn)."""
    end_of_turn: list[str]
    """Tokens that close an assistant reply under this template (trained, and generation stops there)."""


def _template_text(tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return template or ""


class ChatFormat:
    """Renders SAND's chats with one tokenizer's own template, for training and for every policy."""

    def __init__(self, tokenizer: Any, source: str = ""):
        self.tokenizer = tokenizer
        self.source = source or getattr(tokenizer, "name_or_path", "") or "tokenizer"
        template = _template_text(tokenizer)
        if not template:
            raise ChatTemplateError(
                f"{self.source}: the tokenizer has no chat template. SAND trains and samples with the base model's "
                "own template and never substitutes another. Fix: use an instruction-tuned model, or save the "
                "tokenizer with a `chat_template` (tokenizer.chat_template = ...; tokenizer.save_pretrained(DIR)) "
                "and point model.base at DIR.")
        self.template = template
        self.system = self._system_mode()
        if self.system == "fold":  # once per model and process: warnings.warn skips repeats of a message
            warnings.warn(f"{self.source}: the chat template renders no system role, so system text is folded "
                          "into the first user turn (training and prompts alike)", stacklevel=2)
        self.end_of_turn_ids = self._end_of_turn_ids()

    # -- loading and saving ---------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike) -> "ChatFormat":
        """The format of a model or weights directory (or hub id): its tokenizer and that tokenizer's template."""
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path))
        except (OSError, ValueError) as exc:
            from sand_framework.errors import ModelUnavailable

            raise ModelUnavailable(f"cannot load the tokenizer of {str(path)!r}: {exc}") from exc
        return cls(tokenizer, source=str(path))

    @property
    def info(self) -> FormatInfo:
        return FormatInfo(
            template_sha256=hashlib.sha256(self.template.encode()).hexdigest(),
            system=self.system,
            end_of_turn=self.tokenizer.convert_ids_to_tokens(self.end_of_turn_ids),
        )

    def save(self, directory: str | os.PathLike) -> None:
        """Write the tokenizer (with its template) and :data:`FORMAT_FILE` into ``directory``."""
        directory = Path(directory)
        self.tokenizer.save_pretrained(str(directory))
        (directory / FORMAT_FILE).write_text(json.dumps(asdict(self.info), indent=2) + "\n")

    @staticmethod
    def saved_info(directory: str | os.PathLike) -> FormatInfo | None:
        path = Path(directory) / FORMAT_FILE
        if not path.is_file():
            return None
        return FormatInfo(**json.loads(path.read_text()))

    # -- rendering --------------------------------------------------------------

    def _apply(self, chat: Chat, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(list(chat), add_generation_prompt=add_generation_prompt,
                                                  tokenize=False)

    def _system_mode(self) -> str:
        probe = [{"role": "system", "content": "SANDPROBESYSTEM"}, {"role": "user", "content": "hello"}]
        try:
            text = self._apply(probe, add_generation_prompt=True)
        except Exception:  # noqa: BLE001 - jinja's raise_exception: the template rejects a system role
            return "fold"
        return "native" if "SANDPROBESYSTEM" in text else "fold"

    def normalize(self, chat: Chat) -> Chat:
        """``chat`` as this template accepts it: system text folded into the first user turn where needed."""
        chat = [dict(m) for m in chat]
        if self.system == "fold" and chat and chat[0].get("role") == "system":
            system = chat.pop(0)["content"]
            if chat and chat[0].get("role") == "user":
                chat[0]["content"] = f"{system}\n\n{chat[0]['content']}"
            else:
                chat.insert(0, {"role": "user", "content": system})
        return chat

    def render(self, chat: Chat, add_generation_prompt: bool = False) -> str:
        """The template's text for ``chat`` (system folded where needed)."""
        try:
            return self._apply(self.normalize(chat), add_generation_prompt)
        except Exception as exc:  # noqa: BLE001 - jinja errors raised by the template itself
            raise ChatTemplateError(f"{self.source}: the chat template refused a chat: {exc}") from exc

    def encode(self, text: str) -> list[int]:
        """Token ids of rendered text; the template writes its own special tokens (BOS included)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, chat: Chat) -> list[int]:
        """The sampling prompt: ``chat`` (ending on a user turn) with the generation prompt, as token ids."""
        return self.encode(self.render(chat, add_generation_prompt=True))

    @property
    def stop_token_ids(self) -> list[int]:
        """Ids at which generation ends: the template's end of turn and the tokenizer's EOS."""
        ids = set(self.end_of_turn_ids)
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        return sorted(ids)

    # -- training sequences -----------------------------------------------------

    def _end_of_turn_ids(self) -> list[int]:
        """Special tokens the template writes right after an assistant reply (found with a probe reply)."""
        chat = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": _PROBE}]
        try:
            full = self.render(chat)
        except ChatTemplateError:
            return []
        at = full.rfind(_PROBE)
        if at < 0:
            raise ChatTemplateError(f"{self.source}: the chat template does not render assistant replies")
        suffix = self.encode(full[at + len(_PROBE):])
        special = set(self.tokenizer.all_special_ids) | set(getattr(self.tokenizer, "added_tokens_decoder", {}))
        for i, tok in enumerate(suffix):
            if tok in special:
                return [int(tok)]
        return []

    def training_example(self, chat: Chat) -> tuple[list[int], list[int]]:
        """``(input_ids, assistant_mask)`` for a whole chat: 1 on every assistant reply and its end-of-turn token.

        Raises :class:`ChatTemplateError` when a prompt the policy would render
        for some turn is not a token prefix of the training sequence.
        """
        chat = self.normalize(chat)
        ids = self.encode(self._apply(chat, add_generation_prompt=False))
        mask = [0] * len(ids)
        eot = set(self.end_of_turn_ids)
        for t, message in enumerate(chat):
            if message.get("role") != "assistant":
                continue
            prompt = self.encode(self._apply(chat[:t], add_generation_prompt=True)) if t else []
            upto = self.encode(self._apply(chat[: t + 1], add_generation_prompt=False))
            for name, part in (("prompt", prompt), ("chat through this reply", upto)):
                if ids[: len(part)] != part:
                    at = next((i for i, (a, b) in enumerate(zip(ids, part)) if a != b), min(len(ids), len(part)))
                    raise ChatTemplateError(
                        f"{self.source}: the {name} at assistant turn {t} is not a prefix of the whole chat's tokens "
                        f"(they differ at token {at}: {self.tokenizer.decode(part[at:at + 8])!r} vs "
                        f"{self.tokenizer.decode(ids[at:at + 8])!r}). The template renders earlier turns differently "
                        "once later ones follow, so the agent would be trained on a format it is never prompted "
                        "with. Fix: use a template whose rendering of a conversation only appends.")
            end = len(upto)
            if eot:  # stop after the reply's end-of-turn token; template whitespace after it is not generated
                hits = [i for i in range(len(prompt), len(upto)) if upto[i] in eot]
                if hits:
                    end = hits[0] + 1
            for i in range(len(prompt), end):
                mask[i] = 1
        return ids, mask


def has_tokenizer(directory: str | os.PathLike | None) -> bool:
    """Whether a weights directory carries its own tokenizer (and so its own chat template)."""
    return bool(directory) and any(
        (Path(directory) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"))


def agent_format(weights: str | os.PathLike, base: ChatFormat) -> ChatFormat:
    """The format trained weights were trained with: their saved tokenizer's, else the base model's.

    Adapters and full models written by SAND's trainer carry their tokenizer and
    :data:`FORMAT_FILE`; weights from elsewhere without a tokenizer use the base
    model's format, which is what they were trained on in SAND's loop.
    """
    if not has_tokenizer(weights):
        return base
    fmt = ChatFormat.from_pretrained(weights)
    return base if fmt.template == base.template else fmt
