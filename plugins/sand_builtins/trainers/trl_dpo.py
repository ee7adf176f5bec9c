"""Preference fine-tuning of the agent with TRL's ``DPOTrainer`` (ETO's and IPR's training step).

Work in progress in this commit: the component is registered so that recipes validate with the
``preference_trainer`` slot's default; :meth:`DpoTrainer.train` is being written.
"""

from __future__ import annotations

from dataclasses import dataclass

from sand_framework import hookimpl
from sand_framework.components import PreferenceTrainer, TrainRequest


class DpoTrainer(PreferenceTrainer):
    name = "trl_dpo"
    description = "DPO (TRL DPOTrainer) on preference pairs, LoRA or full, optional SFT term on the chosen side"

    @dataclass
    class Params:
        lora: bool = True

    def train(self, request: TrainRequest) -> str:
        raise NotImplementedError("trl_dpo is not written yet")


@hookimpl
def sand_register_preference_trainers(register):
    register(DpoTrainer)
