"""What the policies that hold a model in this process (``transformers``, ``vllm``) share.

Both keep one frozen base model and the agent's current weights, render every
prompt client-side with the chat template the weights were trained with
(:mod:`sand_framework.chat_format`), shorten long prompts the same way,
stop at the template's end-of-turn tokens or a ``stop`` string, decode
greedily once for ``n`` identical samples, and count the same statistics.
Written once here, the two backends cannot drift apart on any of it (a
backend that rendered prompts differently would sample a format the agent
was never trained on). A backend implements how the base model is loaded,
how an adapter or a full model becomes the agent, and one batched decode.
"""

from __future__ import annotations

import abc
import time
from pathlib import Path
from typing import Any

from sand_builtins.models import weights_kind
from sand_framework.chat_format import ChatFormat, agent_format
from sand_framework.components.base import P
from sand_framework.components.kinds import Policy
from sand_framework.prompting import cut_at_stop, fit_prompt, report_shortened
from sand_framework.types import Chat, Completion, Role, SamplingParams


class LocalPolicy(Policy[P]):
    """A :class:`Policy` whose model lives in this process; ``setup``, ``set_agent_weights`` and ``generate``
    are templates around the backend's hooks."""

    def __init__(self, params: Any = None):
        super().__init__(params)
        self.tokenizer: Any = None
        self.base_path: str | None = None
        self.base_format: ChatFormat | None = None
        self.agent_format: ChatFormat | None = None
        """The template of the agent's weights (the base model's unless they were trained with another)."""
        self.agent_kind = "base"
        """``base``, ``adapter`` or ``full``: what answers ``role="agent"`` calls."""
        self.agent_weights: str | None = None
        self._stop_ids: list[int] = []
        self._stats: dict[str, float] = {"calls": 0, "sequences": 0, "prompt_tokens": 0, "completion_tokens": 0,
                                         "busy_seconds": 0.0}

    # ------------------------------------------------------------------ backend hooks

    @property
    @abc.abstractmethod
    def loaded(self) -> bool:
        """The base model is loaded (``setup`` ran and no ``close`` since)."""

    def _prepare(self) -> None:
        """Before loading: check the backend is installed, choose devices and threads."""

    @abc.abstractmethod
    def _load_base(self, base_model: str) -> None:
        """Load the base model (``self.base_format`` and ``self.tokenizer`` are set); set ``self._stop_ids``."""

    @abc.abstractmethod
    def _use_base(self) -> None:
        """Drop whatever answered as the agent: the base model does from now on."""

    @abc.abstractmethod
    def _use_adapter(self, path: Path) -> str:
        """Make the LoRA adapter at ``path`` the agent; return the resulting ``agent_kind``."""

    @abc.abstractmethod
    def _use_full(self, path: Path) -> None:
        """Make the full model at ``path`` the agent."""

    @abc.abstractmethod
    def _prompt_limit(self, max_new_tokens: int) -> int:
        """The most prompt tokens a call generating ``max_new_tokens`` may send (0 = no limit)."""

    @abc.abstractmethod
    def _generate(self, prompts: list[list[int]], sampling: SamplingParams, role: Role, per_chat: int,
                  greedy: bool) -> list[list[Completion]]:
        """``per_chat`` completions for each prompt (token ids), from the role's weights."""

    # ------------------------------------------------------------------ lifecycle

    def setup(self, base_model: str) -> None:
        if self.loaded and base_model == self.base_path:  # a release that kept the model (asleep): nothing to do
            return
        self._prepare()
        self.base_path = base_model
        self.base_format = self.agent_format = ChatFormat.from_pretrained(base_model)
        self.tokenizer = self.base_format.tokenizer
        self._load_base(base_model)

    def _require_setup(self) -> None:
        if not self.loaded:
            raise RuntimeError(f"policy {self.name!r}: call setup(base_model) first")

    def stop_token_ids(self, eos: Any) -> list[int]:
        """The ids generation stops at: the model's ``eos_token_id`` (one, a list or None) and the template's
        end-of-turn tokens."""
        ids = list(eos) if isinstance(eos, (list, tuple)) else ([eos] if eos is not None else [])
        ids += self.base_format.stop_token_ids
        return sorted(set(int(i) for i in ids))

    def set_agent_weights(self, weights: str | None) -> None:
        self._require_setup()
        if weights is None:
            self._use_base()
            self.agent_kind, self.agent_weights, self.agent_format = "base", None, self.base_format
            return
        path = Path(weights)
        kind = weights_kind(path)
        self.agent_format = agent_format(path, self.base_format)
        if kind == "adapter":
            self.agent_kind = self._use_adapter(path)
        else:
            self._use_full(path)
            self.agent_kind = "full"
        self.agent_weights = str(path)

    # ------------------------------------------------------------------ prompts and generation

    def format_for(self, role: Role) -> ChatFormat:
        """The chat format the role's weights were trained with."""
        return self.agent_format if role == "agent" else self.base_format

    def prompt_ids(self, chat: Chat, role: Role, limit: int) -> list[int]:
        """Token ids of ``chat`` with the generation prompt in the role's format, shortened to ``limit`` (0 = none)."""
        batch: dict[str, int] = {}
        ids = fit_prompt(chat, self.format_for(role).prompt_ids, limit, batch)
        report_shortened(self._stats, batch, f"policy {self.name!r}", limit)
        return ids

    def generate(self, chats: list[Chat], sampling: SamplingParams, role: Role = "agent") -> list[list[Completion]]:
        self._require_setup()
        if role not in ("agent", "base"):
            raise ValueError(f"role must be 'agent' or 'base', got {role!r}")
        if not chats:
            return []
        n = max(1, int(sampling.n))
        start = time.perf_counter()
        greedy = sampling.temperature is None or sampling.temperature <= 0
        limit = self._prompt_limit(max(1, int(sampling.max_new_tokens)))
        prompts = [self.prompt_ids(c, role, limit) for c in chats]
        results = self._generate(prompts, sampling, role, 1 if greedy else n, greedy)
        if greedy and n > 1:
            results = [[Completion(**c[0].to_dict()) for _ in range(n)] for c in results]
        self._stats["calls"] += 1
        self._stats["busy_seconds"] += time.perf_counter() - start
        return results

    def completion(self, text: str, prompt_tokens: int, completion_tokens: int) -> Completion:
        """A completion with the ``stop`` strings cut off, counted in :attr:`stats`."""
        self._stats["sequences"] += 1
        self._stats["prompt_tokens"] += prompt_tokens
        self._stats["completion_tokens"] += completion_tokens
        return Completion(text=cut_at_stop(text, self.params.stop), prompt_tokens=prompt_tokens,
                          completion_tokens=completion_tokens)

    @property
    def stats(self) -> dict[str, float]:
        return dict(self._stats)
