"""The two trainer kinds and what each is asked to train on: ``trainer`` (SFT) and ``preference_trainer`` (DPO).

Each kind takes its own request, so a trainer's signature says what it trains on: a :class:`Trainer` gets a
:class:`TrainRequest` (trajectories), a :class:`PreferenceTrainer` a :class:`PreferenceTrainRequest` (pairs and a
reference). Before 0.3.5 one ``TrainRequest`` carried both, the unused side empty; that spelling still works and
warns (:class:`TrainRequest` with ``pairs``, a preference request's ``trajectories``). The written contract is
docs/writing-plugins.md, "Writing a trainer".
"""

from __future__ import annotations

import abc
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sand_framework.components.base import Component, P
from sand_framework.types import PreferencePair, Trajectory


@dataclass
class TrainRequest:
    """One SFT stage: fine-tune on ``trajectories`` and save the weights under ``output_dir``."""

    trajectories: list[Trajectory]
    base_model: str
    """The resolved base model (local path or hub id)."""
    init_weights: str | None
    """Weights to continue from (previous iteration), or None for the base model."""
    output_dir: str
    """The stage's folder in the run directory; it persists across resumes."""
    epochs: float
    seed: int = 0
    pairs: list[PreferencePair] = field(default_factory=list)
    """Deprecated (0.3.5): preference pairs go in a :class:`PreferenceTrainRequest`."""
    reference_weights: str | None = None
    """Deprecated (0.3.5): the reference goes in a :class:`PreferenceTrainRequest`."""
    iteration: int = 0
    """The stage's iteration (0: behavior initialization), for settings that change per iteration."""

    def __post_init__(self) -> None:
        if self.pairs or self.reference_weights is not None:
            warnings.warn("TrainRequest(pairs=..., reference_weights=...) is deprecated since SAND 0.3.5: a "
                          "preference trainer takes a PreferenceTrainRequest (sand_framework.components)",
                          DeprecationWarning, stacklevel=3)


@dataclass
class PreferenceTrainRequest:
    """One preference stage: train on ``pairs`` from ``init_weights`` against ``reference_weights``."""

    pairs: list[PreferencePair]
    base_model: str
    """The resolved base model (local path or hub id)."""
    init_weights: str | None
    """Weights to continue from (the current agent), or None for the base model."""
    output_dir: str
    """The stage's folder in the run directory; it persists across resumes."""
    epochs: float
    seed: int = 0
    reference_weights: str | None = None
    """The reference model: weights (adapter or full model) on ``base_model``, or None for the base model itself;
    the method chooses which (:attr:`~sand_framework.components.method.IterationData.reference`)."""
    iteration: int = 1
    """The stage's iteration (1 and up), for settings that change per iteration (ETO's beta and learning rate)."""

    @property
    def trajectories(self) -> list[Trajectory]:
        """Deprecated (0.3.5): always empty, as it was in the ``TrainRequest`` a preference trainer used to get."""
        warnings.warn("a PreferenceTrainRequest has no trajectories (deprecated since SAND 0.3.5: train on "
                      "request.pairs)", DeprecationWarning, stacklevel=2)
        return []

    @classmethod
    def of(cls, request: TrainRequest | PreferenceTrainRequest) -> PreferenceTrainRequest:
        """``request`` as a preference request: a 0.3.4-style ``TrainRequest`` with pairs is converted."""
        if isinstance(request, PreferenceTrainRequest):
            return request
        return cls(pairs=list(request.pairs), base_model=request.base_model, init_weights=request.init_weights,
                   output_dir=request.output_dir, epochs=request.epochs, seed=request.seed,
                   reference_weights=request.reference_weights, iteration=request.iteration)


class _WeightsWriter(Component[P], abc.ABC):
    """What both trainer kinds share: they write agent weights, of a kind the policy plans its engines for."""

    @classmethod
    def weights_kind(cls, params: Any) -> str | None:
        """Optional. What :meth:`train` writes with ``params``: ``adapter`` (LoRA) or ``full``; the policy lays its
        engines out by it (:meth:`Policy.expect_agent_weights`) and ``sand plan`` shows it. Default: None
        (unknown: the policy plans for an adapter)."""
        return None


class Trainer(_WeightsWriter[P]):
    """Fine-tunes the agent on (synthesized) trajectories: behavior initialization and SFT-data methods.

    Required: :meth:`train`.
    """

    kind: ClassVar[str] = "trainer"

    @abc.abstractmethod
    def train(self, request: TrainRequest) -> str:
        """Required. Fine-tune; return the path of the saved weights (an adapter or a full model folder, HF format).

        Train on the assistant turns of each trajectory's chat, rendered with
        the base model's chat template, and save the tokenizer beside the
        weights. Resume from checkpoints in ``request.output_dir`` after an
        interruption, and return the finished weights at once when they are
        already there. With the same request and seed, the result must be
        reproducible as far as the hardware allows.
        """


class PreferenceTrainer(_WeightsWriter[P]):
    """Fine-tunes the agent on preference pairs (ETO's and IPR's DPO): the ``preference_trainer`` slot.

    Required: :meth:`train`. Used by the iterations of a method whose
    ``produces`` is ``"preference"``; behavior initialization always uses the
    ``trainer`` slot, so every arm of a comparison can share one SFT start.
    """

    kind: ClassVar[str] = "preference_trainer"

    @abc.abstractmethod
    def train(self, request: PreferenceTrainRequest) -> str:
        """Required. Train on ``request.pairs`` from ``request.init_weights`` against
        ``request.reference_weights``; return the saved weights' path (as :meth:`Trainer.train`: resumable,
        the tokenizer saved beside the weights, reproducible with the same seed)."""
