"""Host RAM a training stage takes when it loads its model: the figure ``sand plan`` prints and docs/gpu.md's
table states (``tests/components/test_engine_plan.py`` holds the doc to :func:`load_host_ram`).

Why a function: under ``accelerate launch`` with FSDP's cpu-RAM-efficient
loading, local rank 0 reads the weights and transformers 5 gives every other
rank a full zeroed copy in CPU RAM for accelerate to overwrite, so the load
costs one copy of the weights *per rank*, not one per node; a full-fine-tune
DPO loads its reference model the same way (twice that). ``dtype: auto``
loads a full fine-tune in fp32 (4 bytes a parameter).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HostRam:
    """The copies of the weights in host RAM at the load."""

    parameters: float
    ranks: int
    """Training processes (``trainer.launch.num_processes``; 1 in the run's process)."""
    bytes_per_parameter: int
    models: int
    """1, or 2 when a full fine-tune loads an explicit reference model (DPO without LoRA)."""
    slot: str = "trainer"
    """The recipe slot the trainer fills (``trainer`` or ``preference_trainer``): the hint names its key."""
    fsdp: bool = False
    """``launch.config: fsdp``: the ranks but 0 hold zeroed copies rather than reading the weights."""

    @property
    def per_rank_gb(self) -> float:
        return self.parameters * self.bytes_per_parameter * self.models / 1e9

    @property
    def total_gb(self) -> float:
        return self.per_rank_gb * self.ranks

    def line(self) -> str:
        ref = ", policy and reference" if self.models == 2 else ""
        why = ""
        if self.ranks > 1:
            why = ("; transformers 5 gives every rank but 0 a zeroed copy" if self.fsdp
                   else "; every rank loads its own copy")
        hint = f"; {self.slot}.dtype=bfloat16 halves it" if self.bytes_per_parameter == 4 else ""
        return (f"host RAM at the load: ~{self.total_gb:.0f} GB = {self.ranks} rank(s) x {self.per_rank_gb:.0f} GB "
                f"({self.bytes_per_parameter} bytes a parameter{ref}{why}){hint}")


def weights_bytes(params: Any, on_gpu: bool = True) -> int:
    """Bytes a parameter takes as the trainer loads it: its ``dtype``, with ``auto`` as
    :meth:`~sand_builtins.trainers.stage.TrlStage._device` resolves it on a GPU (bf16 for LoRA, fp32 for a full
    fine-tune) or on a CPU (fp32)."""
    if params.dtype == "auto":
        return 2 if (on_gpu and params.lora) else 4
    return 4 if params.dtype == "float32" else 2


def load_host_ram(parameters: float, params: Any, reference: bool = False, on_gpu: bool = True,
                  slot: str = "trainer") -> HostRam:
    """:class:`HostRam` of a stage with trainer ``params`` loading a model of ``parameters`` parameters;
    ``reference``: the trainer loads an explicit reference model beside the policy; ``slot``: the recipe key its
    hint names."""
    ranks = max(1, int(params.launch.num_processes))
    return HostRam(parameters, ranks, weights_bytes(params, on_gpu), 2 if reference and not params.lora else 1,
                   slot=slot, fsdp=params.launch.config == "fsdp")
