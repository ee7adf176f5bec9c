"""The pieces of one batched ``generate`` call of the transformers policy that need no policy state.

Per-row seeded sampling (:class:`RowSeededSampler`: a row's tokens depend on its prompt and seed only), and
prefill sharing: a prefix every prompt shares, or each whole prompt sampled k times, is run through the model once
and its KV cache copied to the rows that share it (:func:`generate_from_common_prefix`,
:func:`generate_shared_prefill`), which gives the tokens re-encoding would (tests/components/test_policy_transformers.py).
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

log = logging.getLogger(__name__)


def common_prefix(prompts: list[list[int]], k: int, min_length: int) -> int:
    """Length of the token prefix every prompt shares (0 when shorter than ``min_length``, or for a single
    sequence); each prompt keeps at least one token after it, which the generation step needs."""
    if len(prompts) * k < 2:
        return 0
    first, n = prompts[0], min(len(p) for p in prompts) - 1
    common = next((i for i in range(n) if any(p[i] != first[i] for p in prompts)), max(0, n))
    return common if common >= max(1, min_length) else 0


def generate_from_common_prefix(model: Any, kwargs: dict[str, Any], k: int, common: int) -> Any:
    """Encode the shared prefix once, copy its cache to every row (and, with k samples, the rows' own
    prompt tails once each before copying k times), then generate."""
    import torch

    ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
    try:
        from transformers import DynamicCache

        cache = DynamicCache(config=model.config)
        _prefill(model, input_ids=ids[:1, :common], attention_mask=mask[:1, :common],
                 position_ids=torch.arange(common, device=ids.device)[None], past_key_values=cache)
        cache.batch_repeat_interleave(ids.shape[0])
        if k > 1 and ids.shape[1] - common > 1:
            pos = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
            _prefill(model, input_ids=ids[:, common:-1], attention_mask=mask[:, :-1],
                     position_ids=pos[:, common:-1], past_key_values=cache)
        if k > 1:
            cache.batch_repeat_interleave(k)
    except Exception:  # noqa: BLE001 - an architecture whose cache cannot be shared
        log.debug("common-prefix sharing unavailable; encoding every prompt in full", exc_info=True)
        return None
    return generate_from_cache(model, kwargs, k, cache)


def generate_shared_prefill(model: Any, kwargs: dict[str, Any], k: int) -> Any:
    """Run the prompts (all but their last token) once, repeat the cache k times, then generate."""
    ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
    try:
        from transformers import DynamicCache

        cache = DynamicCache(config=model.config)
        pos = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
        _prefill(model, input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=pos[:, :-1],
                 past_key_values=cache)
        cache.batch_repeat_interleave(k)
    except Exception:  # noqa: BLE001 - an architecture whose cache cannot be shared
        log.debug("shared prefill unavailable; re-encoding the prompt per sample", exc_info=True)
        return None
    return generate_from_cache(model, kwargs, k, cache)


def generate_from_cache(model: Any, kwargs: dict[str, Any], k: int, cache: Any) -> Any:
    """Generate for every row repeated k times, continuing from a cache already expanded to those rows."""
    import torch

    rest = dict(kwargs)
    rest.update(
        input_ids=torch.repeat_interleave(kwargs["input_ids"], k, dim=0),
        attention_mask=torch.repeat_interleave(kwargs["attention_mask"], k, dim=0),
        num_return_sequences=1,
        past_key_values=cache,
    )
    return model.generate(**rest)


class RowSeededSampler:
    """A logits processor that samples each row's next token with the row's own ``torch.Generator`` (temperature,
    top-k, top-p applied here) and leaves only that token possible, so ``generate``'s own sampling picks it.

    Per-request seeds (``SamplingParams.seeds``): a row's tokens depend on its prompt and seed, not on the other
    rows of the batch or the global RNG (up to the batch's floating-point noise in the logits)."""

    def __init__(self, seeds: list[int], temperature: float, top_p: float | None, top_k: int | None):
        import torch

        self.generators = [torch.Generator().manual_seed(int(s) & 0xFFFFFFFFFFFF) for s in seeds]
        self.temperature = float(temperature) if temperature else 1.0
        self.top_p = float(top_p) if top_p is not None else 1.0
        self.top_k = int(top_k) if top_k else 0

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        logits = scores.float() / max(self.temperature, 1e-6)
        if self.top_k and self.top_k < logits.shape[-1]:
            kth = torch.topk(logits, self.top_k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if self.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True, dim=-1)
            drop = sorted_p.cumsum(-1) - sorted_p > self.top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
            probs = probs / probs.sum(-1, keepdim=True)
        picked = torch.stack([torch.multinomial(probs[r].cpu(), 1, generator=self.generators[r])[0]
                              for r in range(probs.shape[0])]).to(scores.device)
        out = torch.full_like(scores, float("-inf"))
        out[torch.arange(scores.shape[0], device=scores.device), picked] = 0.0
        return out


def _prefill(model: Any, **inputs: Any) -> None:
    """Run prompt tokens through ``model`` only to fill ``past_key_values``.

    Asks for the logits of one position instead of every prompt token where the model allows it: the
    full logits are rows x tokens x vocabulary floats (40 rows of 700 tokens with SmolLM2's 49k
    vocabulary: 5.5 GB, and the largest single allocation of a synthesis run), all thrown away here.
    """
    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    if "logits_to_keep" in inspect.signature(target.forward).parameters:
        inputs["logits_to_keep"] = 1
    model(**inputs, use_cache=True)
