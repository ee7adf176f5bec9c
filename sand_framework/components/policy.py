"""The policy kind: an LLM backend with a frozen base model and the agent's current weights.

The rules for every kind (Required vs Provided methods, batching, seeding) are
in :mod:`sand_framework.components.kinds`.
"""

from __future__ import annotations

import abc
from typing import ClassVar

from sand_framework.components.base import Component, P
from sand_framework.types import Chat, Completion, Role, SamplingParams


class Policy(Component[P], abc.ABC):
    """An LLM backend holding a frozen base model and the agent's current weights.

    Required: :meth:`setup`, :meth:`set_agent_weights`, :meth:`generate`.
    Provided: :meth:`release`, :meth:`count_tokens`, :attr:`stats`, ``close``.

    ``role="base"`` calls (critique, synthesis, imagined candidates) use the
    base model; ``"agent"`` calls (sampling, rollouts, evaluation) use the
    weights set by :meth:`set_agent_weights`. Prompts are rendered with the
    base model's own chat template
    (:class:`sand_framework.chat_format.ChatFormat`), the same rendering the
    trainer trains on.
    """

    kind: ClassVar[str] = "policy"

    concurrent_generate: ClassVar[bool] = False
    """Optional. True when :meth:`generate` may be called from several threads at once, the calls sharing the
    engine's batch (vLLM's continuous batching). A streamed build (``run.batches_in_flight`` > 1) then lets its
    phases call the policy side by side; with False (the default, a model decoding in this process) it hands them
    one call at a time (:class:`sand_framework.synthesis.SerialPolicy`)."""

    seeds_per_chat: ClassVar[bool] = False
    """Optional. True when :meth:`generate` honours ``SamplingParams.seeds``: chat ``i``'s samples depend on its own
    chat and ``seeds[i]`` only, whatever else shares the call (up to a batched forward's float rounding: a batching
    engine's numerics may differ with its batch, as vLLM documents for serving). A method's explorations
    (:func:`sand_framework.rollout.explore`) then play the episodes of different seed groups (IPR's Monte Carlo
    rollouts of different states, RFT's samples of different tasks) in the same waves and model calls, up to the
    executor's ``max_parallel``; with False each group plays apart (so its batch is its own), as before 0.3.6."""

    @abc.abstractmethod
    def setup(self, base_model: str) -> None:
        """Required. Load the base model (a local path or hub id, already resolved from an alias).

        Called before the first :meth:`generate` and again after each
        :meth:`release`.
        """

    @abc.abstractmethod
    def set_agent_weights(self, weights: str | None) -> None:
        """Required. Use these trained weights (adapter or full model folder) for ``role="agent"``.

        ``None`` means the base model itself (before the first training stage).
        """

    @abc.abstractmethod
    def generate(self, chats: list[Chat], sampling: SamplingParams, role: Role = "agent") -> list[list[Completion]]:
        """Required. ``sampling.n`` completions for each chat: one list per chat, in order.

        One batched call where the backend can. ``sampling.temperature == 0``
        is greedy decoding and must be deterministic; with ``sampling.seed``
        set, the same chats, weights and params must give the same texts. Each
        :class:`~sand_framework.types.Completion` carries its prompt and
        completion token counts (0 where the backend cannot count).
        """

    def expect_agent_weights(self, kind: str | None) -> None:
        """Optional. Told before :meth:`setup` what the run's trainer writes (``adapter``, ``full``, or None when
        unknown: :meth:`Trainer.weights_kind`), for a backend whose engine layout depends on it (vLLM serves an
        adapter per request but starts a second engine for a full model). Default: ignored."""

    def release(self) -> None:
        """Provided (calls ``close()``): free the model's memory before a training stage.

        The engine calls :meth:`setup` again afterwards. No inference engine
        may stay resident while the trainer runs (on a GPU it would hold most
        of the memory the trainer needs). A backend that can sleep and wake
        (vLLM's sleep mode) may keep its state and make the next ``setup``
        cheap.
        """
        self.close()

    def count_tokens(self, text: str) -> int:
        """Provided: tokens of ``text`` under the backend's ``tokenizer`` attribute (whitespace words without one)."""
        tokenizer = getattr(self, "tokenizer", None)
        if tokenizer is None:
            return len(text.split())
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    @property
    def stats(self) -> dict[str, float]:
        """Provided (``{}``): cumulative calls, prompt/completion tokens and busy seconds, for the run's metrics."""
        return {}
