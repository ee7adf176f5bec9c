"""Component base classes, one per kind, re-exported for plugin authors, and the table of kinds."""

from sand_framework.components.base import Component, NoParams
from sand_framework.components.kinds import (
    Critic,
    CritiqueRequest,
    Detector,
    Environment,
    Evaluator,
    Executor,
    Policy,
    PreferenceTrainer,
    PreferenceTrainRequest,
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
from sand_framework.components.declared import KINDS, SLOTS, Kind
from sand_framework.components.method import REFERENCES, TRAINER_SLOT, IterationData, Method, MethodTools

__all__ = [
    "KINDS", "SLOTS", "Kind", "Component", "NoParams", "Critic", "CritiqueRequest", "Detector", "Environment",
    "Evaluator", "Executor", "Policy", "Proposal", "RolloutRequest", "Sampler", "SampleRequest",
    "SynthesisRequest", "Synthesizer", "TaskResult", "Trainer", "TrainRequest", "PreferenceTrainer",
    "PreferenceTrainRequest", "Method",
    "MethodTools", "IterationData", "TRAINER_SLOT", "REFERENCES",
]
