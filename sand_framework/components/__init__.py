"""Component base classes, one per kind, re-exported for plugin authors."""

from sand_framework.components.base import Component, NoParams
from sand_framework.components.kinds import (
    Critic,
    CritiqueRequest,
    Detector,
    Environment,
    Evaluator,
    Executor,
    Policy,
    Proposal,
    RolloutRequest,
    Sampler,
    SampleRequest,
    SynthesisRequest,
    Synthesizer,
    TaskResult,
    Trainer,
    TrainRequest,
)

BASES: dict[str, type[Component]] = {
    "environment": Environment,
    "policy": Policy,
    "detector": Detector,
    "sampler": Sampler,
    "executor": Executor,
    "critic": Critic,
    "synthesizer": Synthesizer,
    "trainer": Trainer,
    "evaluator": Evaluator,
}

__all__ = [
    "BASES", "Component", "NoParams", "Critic", "CritiqueRequest", "Detector", "Environment",
    "Evaluator", "Executor", "Policy", "Proposal", "RolloutRequest", "Sampler", "SampleRequest",
    "SynthesisRequest", "Synthesizer", "TaskResult", "Trainer", "TrainRequest",
]
