"""What a TRL trainer must do before it loads the model, shared by ``trl_sft`` and the other trainers.

**Arguments before weights.** transformers loads a model shard-aware only when
the training arguments already exist: ``TrainingArguments`` (``SFTConfig``,
``DPOConfig`` ...) is what sets DeepSpeed's ZeRO-3 flag (a weak reference
``from_pretrained`` reads: with it every rank loads its shard through
``deepspeed.zero.Init``) and, by building accelerate's state, initialises the
process group that FSDP's ``fsdp_cpu_ram_efficient_loading`` needs (then only
local rank 0 reads the weights into host RAM; the others load on the meta
device and receive theirs by broadcast). Loaded first, every rank of an 8-GPU
node reads the full model into host RAM: 8 x 32 GB for an 8B model in fp32.
:func:`prepare_loading` is the step between the two; call it with the
arguments object and keep that object alive until the model is loaded.

**Warm-up as steps.** transformers >= 5 reads ``warmup_steps < 1`` as a ratio
and dropped ``warmup_ratio``; 4.56 (the floor in ``pyproject.toml``) has
``warmup_ratio`` and an integer ``warmup_steps``. :func:`warmup_steps` turns the
ratio into the integer step count both read the same way.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LoadingMode:
    """How ``from_pretrained`` will load on this rank (recorded in the training summary)."""

    world_size: int
    zero3_init: bool
    """DeepSpeed ZeRO-3: each rank materialises only its shard (``zero.Init``)."""
    fsdp_ram_efficient: bool
    """FSDP with ``fsdp_cpu_ram_efficient_loading``: only local rank 0 reads the weights into host RAM."""


def _fsdp_enabled() -> bool:
    try:
        from transformers.integrations import is_fsdp_enabled
    except ImportError:  # transformers 4.x keeps it in modeling_utils
        try:
            from transformers.modeling_utils import is_fsdp_enabled
        except ImportError:
            return False
    return bool(is_fsdp_enabled())


def _zero3_enabled() -> bool:
    try:
        from transformers.integrations import is_deepspeed_zero3_enabled
    except ImportError:
        return False
    return bool(is_deepspeed_zero3_enabled())


def prepare_loading(args: Any) -> LoadingMode:
    """Make the coming ``from_pretrained`` shard-aware under ``args`` (a built ``TrainingArguments``).

    Touches ``args.device``, which creates accelerate's state (and under
    ``accelerate launch`` the process group) exactly as the trainer would a
    moment later; building ``args`` already set the ZeRO-3 flag.
    """
    _ = args.device
    return LoadingMode(world_size=int(getattr(args, "world_size", 0) or os.environ.get("WORLD_SIZE", "1")),
                       zero3_init=_zero3_enabled(), fsdp_ram_efficient=_fsdp_enabled())


def broadcast_from_rank0(model: Any) -> Any:
    """``model`` with every rank holding rank 0's weights, for a model accelerate will not prepare.

    Under FSDP's ``fsdp_cpu_ram_efficient_loading`` transformers fills every parameter and persistent buffer with
    zeros on ranks other than local 0 and leaves the broadcast to accelerate's ``prepare``. TRL prepares the
    policy that way but a ``ref_model`` through its own FSDP wrapping, which shards without broadcasting: the
    other ranks' reference would be zeros (a reference log-probability of a uniform model), and DPO would train
    against it without a word. So the reference is broadcast here, tensor by tensor (through the current GPU
    when the process group is NCCL's). A no-op outside that mode (DeepSpeed ZeRO-3 shards at load, and its
    partitions must not be overwritten)."""
    if not _fsdp_enabled():
        return model
    import torch
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() < 2:
        return model
    via_gpu = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if via_gpu else None
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if via_gpu:
                moved = tensor.to(device)
                dist.broadcast(moved, src=0)
                tensor.copy_(moved.to(tensor.device))
            else:
                dist.broadcast(tensor, src=0)
    return model


def optimizer_steps(examples: int, per_device_batch_size: int, world_size: int, accumulation: int,
                    epochs: float, max_steps: int = -1) -> int:
    """Optimizer steps transformers' ``Trainer`` will take (its own formula: a partial accumulation counts)."""
    if max_steps and max_steps > 0:
        return int(max_steps)
    per_step = max(1, per_device_batch_size) * max(1, world_size)
    batches = max(1, math.ceil(examples / per_step))  # the dataloader keeps a last partial batch
    accumulation = max(1, accumulation)
    per_epoch = max(batches // accumulation + int(batches % accumulation > 0), 1)
    return max(1, math.ceil(epochs * per_epoch))


def warmup_steps(ratio: float, total_steps: int) -> int:
    """Integer warm-up steps for ``ratio`` of ``total_steps`` (transformers rounds the same way: up)."""
    if not 0 <= ratio < 1:
        raise ValueError(f"warmup_ratio must be in [0, 1), got {ratio}")
    return math.ceil(total_steps * ratio) if ratio > 0 else 0
