"""The ``transformers`` policy: batched ``generate`` on a frozen base model plus the agent's weights.

One base model is loaded once. The agent's weights are either

* a LoRA adapter directory (has ``adapter_config.json``): attached to the base
  model in place through peft; switching adapters loads the new one and drops
  the old, never reloading the base. ``role="base"`` calls run with the adapter
  disabled, so they see exactly the base weights;
* a full model directory (has ``config.json``): loaded as a second model;
* ``None``: the agent is the base model.

Prompts longer than ``max_prompt_tokens`` are shortened by dropping the oldest
(assistant, observation) pairs after the first three ETO turns (instruction,
``OK``, task), so the instruction and the task always stay; if that is not
enough (or the chat has no such pairs), the token sequence is cut from the
left, which keeps the generation prompt at the end intact.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from annotated_types import Ge, Interval

from sand_builtins.policies.local import LocalPolicy
from sand_builtins.policies.transformers_generate import (RowSeededSampler, common_prefix, generate_from_common_prefix,
                                                          generate_shared_prefill)
from sand_framework import hookimpl
from sand_framework.cpu_threads import cpu_threads
from sand_framework.config.paramdoc import THREADS
from sand_framework.errors import ModelUnavailable
from sand_framework.logs import adopt_library_loggers
from sand_framework.rollout import derive_seed
from sand_framework.types import Chat, Completion, Role, SamplingParams

log = logging.getLogger(__name__)


class TransformersPolicy(LocalPolicy["TransformersPolicy.Params"]):
    name = "transformers"
    seeds_per_chat = True
    description = "Hugging Face transformers generate(); LoRA adapters via peft; CPU or GPU."

    @dataclass
    class Params:
        dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
        """Weights dtype: ``float32`` (CPU), ``bfloat16``, ``float16`` or ``auto`` (bf16 on GPU, fp32 on CPU)."""
        device: str = "auto"
        """``auto`` (cuda when available, else cpu), ``cpu``, ``cuda``, ``cuda:1``..."""
        batch_size: Annotated[int, Interval(ge=1, le=4096)] = 16
        """Maximum sequences (prompts x samples) in one ``generate`` forward; at most 4096."""
        threads: Annotated[int, Ge(0), THREADS] = 0
        """``torch.set_num_threads`` at set-up (process-wide); 0 = one per core free at set-up
        (:func:`sand_framework.cpu_threads.cpu_threads`)."""
        max_prompt_tokens: Annotated[int, Ge(0)] = 2048
        """Longer prompts drop their oldest turns after the first three (see module doc); 0 = no limit."""
        stop: list[str] = field(default_factory=lambda: ["\nObservation:"])
        """Generation stops at, and the text is cut before, the first of these strings."""
        top_p: Annotated[float, Interval(gt=0, le=1)] = 1.0
        """Nucleus sampling for sampled (temperature > 0) calls, in (0, 1]; 1 = off."""
        top_k: Annotated[int, Ge(0)] = 0
        """0 disables top-k (plain temperature sampling)."""
        share_prefill: bool = True
        """With n > 1 samples, encode each prompt once and copy its KV cache to the n sequences
        (instead of ``num_return_sequences`` re-encoding it n times); falls back if the model's cache cannot."""
        share_common_prefix: bool = False
        """Encode the tokens that all prompts of a batch start with (the task instruction: 75-90% of a
        TextWorld-Express prompt) once and copy its KV cache to every row; the rows are laid out as
        ``prefix, padding, rest``. Off by default until measured on more models (benchmarks/policy_speed.py)."""
        min_common_prefix: Annotated[int, Ge(0)] = 32
        """Shorter shared prefixes are not worth the extra forward."""

    @classmethod
    def context_token_budget(cls, params) -> dict[str, tuple[str, int]]:
        """The prompt limit, checked by ``sand validate`` against the trainer's context."""
        return {"prompt": ("max_prompt_tokens", int(params.max_prompt_tokens or 0))}

    def __init__(self, params: TransformersParams | None = None):
        super().__init__(params)
        self.model: Any = None
        """The base model (with peft's LoRA layers injected once an adapter was attached)."""
        self.peft_model: Any = None
        self.agent_model: Any = None
        """A separately loaded full agent model, when the agent weights are a model directory."""
        self.device: Any = None
        self.dtype: Any = None
        self._adapter_seq = 0

    # ------------------------------------------------------------------
    # Loading
    # ------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self.model is not None

    def _prepare(self) -> None:
        import torch

        torch.set_num_threads(cpu_threads(self.params.threads))
        dev = self.params.device
        if dev == "auto":
            dev = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(dev)
        self.dtype = self._torch_dtype(self.params.dtype)

    def _load_base(self, base_model: str) -> None:
        tok = self.tokenizer
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        self.model = self._load_model(base_model)
        self._stop_ids = self.stop_token_ids(self.model.generation_config.eos_token_id)

    def _torch_dtype(self, name: str) -> Any:
        import torch

        if name == "auto":
            return torch.bfloat16 if self.device.type == "cuda" else torch.float32
        try:
            dtype = getattr(torch, name)
        except AttributeError:
            raise ValueError(f"policy 'transformers': unknown dtype {name!r}") from None
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"policy 'transformers': unknown dtype {name!r}")
        return dtype

    def _load_model(self, path: str) -> Any:
        from transformers import AutoModelForCausalLM

        adopt_library_loggers()  # transformers is imported now: its warnings go through SAND's console and run.log
        try:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=self.dtype)
        except OSError as exc:
            raise ModelUnavailable(f"cannot load model {path!r}: {exc}") from exc
        model.to(self.device)
        model.eval()
        return model

    def _use_base(self) -> None:
        self._drop_full_agent()

    def _use_adapter(self, path: Path) -> str:
        self._attach_adapter(str(path))
        self._drop_full_agent()
        return "adapter"

    def _use_full(self, path: Path) -> None:
        self._drop_full_agent()
        self.agent_model = self._load_model(str(path))

    def _attach_adapter(self, path: str) -> None:
        from peft import PeftModel

        self._adapter_seq += 1
        name = f"agent{self._adapter_seq}"
        if self.peft_model is None:
            self.peft_model = PeftModel.from_pretrained(self.model, path, adapter_name=name, is_trainable=False)
        else:
            old = self.peft_model.active_adapter
            self.peft_model.load_adapter(path, adapter_name=name, is_trainable=False)
            self.peft_model.set_adapter(name)
            if old and old != name and old in self.peft_model.peft_config:
                self.peft_model.delete_adapter(old)
        self.peft_model.to(self.device)
        self.peft_model.eval()

    def _drop_full_agent(self) -> None:
        if self.agent_model is not None:
            self.agent_model = None
            gc.collect()

    # ------------------------------------------------------------------
    # Prompts
    # ------------------------------------------------------------------

    def _prompt_limit(self, max_new_tokens: int) -> int:
        return int(self.params.max_prompt_tokens or 0)

    def encode_prompt(self, chat: Chat, role: Role = "agent") -> list[int]:
        """Token ids of ``chat`` with the generation prompt, rendered with the template the role's weights were
        trained with (:mod:`sand_framework.chat_format`), shortened to ``max_prompt_tokens``."""
        return self.prompt_ids(chat, role, self._prompt_limit(0))

    # ------------------------------------------------------------------
    # Generation
    # ------------------------------------------------------------------

    def _generate(self, prompts: list[list[int]], sampling: SamplingParams, role: Role, per_chat: int,
                  greedy: bool) -> list[list[Completion]]:
        import torch

        if sampling.seed is not None:
            torch.manual_seed(int(sampling.seed))
        seeds = list(sampling.seeds) if sampling.seeds and not greedy else None
        bs = max(1, int(self.params.batch_size))
        seqs_per_call = min(per_chat, bs)
        chats_per_call = max(1, bs // seqs_per_call)
        results: list[list[Completion]] = [[] for _ in prompts]
        model, ctx = self._model_for(role)
        with ctx, torch.inference_mode():
            done = 0
            while done < per_chat:
                k = min(seqs_per_call, per_chat - done)
                for lo in range(0, len(prompts), chats_per_call):
                    idx = list(range(lo, min(lo + chats_per_call, len(prompts))))
                    row_seeds = None if seeds is None else [derive_seed(seeds[i], "sample", done + s)
                                                            for i in idx for s in range(k)]
                    outs = self._generate_batch(model, [prompts[i] for i in idx], k, sampling, greedy, row_seeds)
                    for j, i in enumerate(idx):
                        results[i].extend(outs[j])
                done += k
        return results

    def _model_for(self, role: Role) -> tuple[Any, Any]:
        import contextlib

        if role == "agent" and self.agent_kind == "full":
            return self.agent_model, contextlib.nullcontext()
        if self.peft_model is not None:
            if role == "agent" and self.agent_kind == "adapter":
                return self.peft_model, contextlib.nullcontext()
            return self.peft_model, self.peft_model.disable_adapter()
        return self.model, contextlib.nullcontext()

    def _generate_batch(
        self, model: Any, prompts: list[list[int]], k: int, sampling: SamplingParams, greedy: bool,
        row_seeds: list[int] | None = None,
    ) -> list[list[Completion]]:
        import torch

        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self._stop_ids[0] if self._stop_ids else 0
        common = self._common_prefix(prompts, k)
        width = common + max(len(p) - common for p in prompts)
        input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for r, p in enumerate(prompts):
            # [shared prefix][left padding][rest of the prompt]; with common == 0 plain left padding
            rest = p[common:]
            input_ids[r, :common] = torch.tensor(p[:common], dtype=torch.long)
            attention[r, :common] = 1
            if rest:
                input_ids[r, width - len(rest) :] = torch.tensor(rest, dtype=torch.long)
                attention[r, width - len(rest) :] = 1
        kwargs: dict[str, Any] = dict(
            input_ids=input_ids.to(self.device),
            attention_mask=attention.to(self.device),
            max_new_tokens=max(1, int(sampling.max_new_tokens)),
            num_return_sequences=k,
            pad_token_id=pad,
            eos_token_id=self._stop_ids or None,
        )
        if greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(
                do_sample=True,
                temperature=float(sampling.temperature),
                top_p=float(self.params.top_p),
                top_k=int(self.params.top_k) if self.params.top_k and self.params.top_k > 0 else None,
            )
            if row_seeds is not None:  # each row samples from its own generator: independent of the batch
                kwargs["logits_processor"] = [RowSeededSampler(row_seeds, kwargs.pop("temperature"),
                                                               kwargs.pop("top_p"), kwargs.pop("top_k"))]
        stops = [s for s in self.params.stop if s]
        if stops:
            kwargs.update(stop_strings=stops, tokenizer=self.tokenizer)
        out = None
        if common:
            out = self._generate_from_common_prefix(model, kwargs, k, common)
        elif k > 1 and self.params.share_prefill and width > 1:
            out = self._generate_shared_prefill(model, kwargs, k)
        if out is None:
            out = model.generate(**kwargs)
        gen = out[:, width:].tolist()
        stop_set = set(self._stop_ids)
        results: list[list[Completion]] = []
        for r, p in enumerate(prompts):
            row = []
            for s in range(k):
                toks = gen[r * k + s]
                used = len(toks)
                for pos, t in enumerate(toks):
                    if t in stop_set:
                        used = pos + 1
                        break
                row.append(self.completion(self._decode(toks[:used]), len(p), used))
            results.append(row)
        return results

    def _common_prefix(self, prompts: list[list[int]], k: int) -> int:
        if not self.params.share_common_prefix:
            return 0
        return common_prefix(prompts, k, self.params.min_common_prefix)

    def _generate_from_common_prefix(self, model: Any, kwargs: dict[str, Any], k: int, common: int) -> Any:
        return generate_from_common_prefix(model, kwargs, k, common)

    def _generate_shared_prefill(self, model: Any, kwargs: dict[str, Any], k: int) -> Any:
        return generate_shared_prefill(model, kwargs, k)

    def _decode(self, ids: list[int]) -> str:
        try:
            return self.tokenizer.decode(ids, skip_special_tokens=True)
        except Exception:  # noqa: BLE001 - junk ids must not crash a run
            log.warning("could not decode %d generated tokens", len(ids), exc_info=True)
            return ""

    # ------------------------------------------------------------------

    def close(self) -> None:
        self.peft_model = None
        self.agent_model = None
        self.model = None
        gc.collect()


TransformersParams = TransformersPolicy.Params
"""An alias of :class:`TransformersPolicy.Params` (a third-party policy or test may import it by this name)."""


@hookimpl
def sand_register_policies(register) -> None:
    register(TransformersPolicy)
