"""The ``vllm`` policy's parameters: what a recipe's ``policy:`` section may set for it, each with its range and help.

Declared apart from :mod:`.vllm_backend` (the engines' lifecycle) so that the settings read as one list; the
policy class names them as its ``Params``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from annotated_types import Ge, Gt, Interval

from sand_framework.config.paramdoc import SpeedOnly


@dataclass
class VLLMParams:
    """The ``vllm`` policy's settings (``policy.*`` in a recipe; ``sand components policy`` lists them)."""

    dtype: Literal["bfloat16", "float16", "float32", "auto"] = "bfloat16"
    """vLLM's ``dtype``: ``bfloat16`` (CPU and GPU), ``float16``, ``float32`` or ``auto``. On a CPU without
    AVX512-BF16/AMX bf16 is emulated: ``float32`` measured 2x faster there (benchmarks/policy_speed.py)."""
    max_model_len: Annotated[int, Ge(1)] = 4096
    """Context length of the engine (prompt + generation); also caps prompts (see ``max_prompt_tokens``)."""
    max_prompt_tokens: Annotated[int, Ge(0)] = 0
    """Longer prompts drop their oldest turns after the first three, then are cut from the left; 0 = the context
    left after the generation (``max_model_len - max_new_tokens``), the default: ``sand validate`` checks the
    trainer's ``max_length`` fits (one context budget for training, prompts and engines)."""
    stop: list[str] = field(default_factory=lambda: ["\nObservation:"])
    """Generation stops at, and the text is cut before, the first of these strings."""
    top_p: Annotated[float, Interval(gt=0, le=1)] = 1.0
    """Nucleus sampling for sampled (temperature > 0) calls, in (0, 1]; 1 = off."""
    top_k: Annotated[int, Ge(0)] = 0
    """0 disables top-k."""
    lora_mode: Literal["adapter", "merge"] = "adapter"
    """How a LoRA adapter becomes the agent: served per request (``adapter``) or merged into a full model
    that a second engine loads (``merge``; faster on CPU, costs an engine start per switch)."""
    max_lora_rank: Annotated[int, Ge(1)] = 64
    """Largest LoRA rank the engine accepts (``adapter`` mode); an adapter with a larger rank is refused."""
    max_loras: Annotated[int, Ge(1)] = 1
    """Adapters resident at once (``adapter`` mode); the previous iteration's adapter is dropped on switch."""
    enable_prefix_caching: bool = True
    """Reuse the KV cache of shared prompt prefixes (the n samples of a chat, the ETO head of every turn)."""
    enforce_eager: bool | None = None
    """No CUDA graphs / torch.compile. None = by device: eager on CPU (the only mode measured there), CUDA graphs on
    GPUs (slower start, faster decoding)."""
    gpu_memory_utilization: Annotated[float, Interval(gt=0, le=1)] = 0.9
    """GPU only: fraction of each GPU's memory for weights + KV cache, per engine; two engines sharing one GPU get
    half each (see ``placement``)."""
    placement: Literal["auto", "swap", "shared"] = "auto"
    """Where a full-model agent's engine goes next to the base engine (``sand plan RECIPE --gpus N`` shows it):
    ``auto`` = separate halves of the GPUs, or both awake on one GPU at half the memory each when the weights fit,
    else taking turns; ``swap`` = always take turns on the same GPUs (sleep mode, one awake at a time);
    ``shared`` = both awake on all the GPUs at half the memory each, so no GPU waits while one role does (refused
    where the weights do not fit twice; projected faster, docs/gpu.md, not yet measured on GPUs)."""
    kv_cache_space_gb: Annotated[float, Gt(0)] = 2.0
    """CPU only: KV cache size, exported as ``VLLM_CPU_KVCACHE_SPACE`` unless that is already set."""
    cpu_threads_bind: str = ""
    """CPU only: ``VLLM_CPU_OMP_THREADS_BIND`` (``auto``, ``nobind``, ``0-1`` ...); empty leaves vLLM's default."""
    agent_cpu_threads_bind: Annotated[str, SpeedOnly(
        "which cores compute, not what: the engines' outputs are the same on any binding")] = ""
    """CPU only: ``VLLM_CPU_OMP_THREADS_BIND`` of the agent's own engine (a full-model agent, or ``lora_mode:
    merge``), so that the two engines compute on different cores: vLLM's ``auto`` binds every engine to the
    same first cores (measured, docs/scaling.md section 7). E.g. ``cpu_threads_bind: "0"`` and this ``"1"``
    on two cores. Empty = as ``cpu_threads_bind``."""
    tensor_parallel_size: Annotated[int, Ge(0)] = 0
    """GPUs per engine; 0 = auto: the largest power of two of the GPUs the engine is placed on."""
    seed: Annotated[int, Ge(0)] = 0
    """Engine seed (requests without a seed)."""
    merge_dir: str = ""
    """Where ``merge`` mode writes merged models; empty = a temporary directory removed on ``close``."""
    sleep_mode: Literal["auto", "on", "off"] = "auto"
    """vLLM sleep mode (``enable_sleep_mode``): the engine not in use sleeps, and all sleep during training.
    ``auto`` = on with a GPU (vLLM supports it on CUDA only)."""
    engine_args: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for ``vllm.LLM`` (override the ones above)."""
