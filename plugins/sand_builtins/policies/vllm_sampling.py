"""SAND's sampling request as vLLM's: the prompt limit, one ``vllm.SamplingParams`` per prompt, and seeded
sampling split into one request per sample.

Pure functions of the policy's parameters (:class:`~sand_builtins.policies.vllm_params.VLLMParams`), kept apart
from the engines' lifecycle in :mod:`.vllm_backend`; vLLM is imported only when a request is built.
"""

from __future__ import annotations

from typing import Any

from sand_builtins.policies.vllm_params import VLLMParams
from sand_framework.types import SamplingParams


def prompt_limit(params: VLLMParams, max_new_tokens: int) -> int:
    """Longest prompt, in tokens: ``max_prompt_tokens``, and the context left after the generation (0: none)."""
    limits = [int(params.max_prompt_tokens or 0)]
    if params.max_model_len:
        limits.append(max(1, int(params.max_model_len) - max(1, int(max_new_tokens))))
    limits = [x for x in limits if x > 0]
    return min(limits) if limits else 0


def request_params(params: VLLMParams, stop_ids: list[int] | None, n_prompts: int, sampling: SamplingParams,
                   per_chat: int, greedy: bool) -> list[Any]:
    """One ``vllm.SamplingParams`` per prompt: ``per_chat`` samples, the policy's stops, each chat's own seed."""
    from vllm import SamplingParams as VSamplingParams
    from vllm.sampling_params import RequestOutputKind

    max_new = max(1, int(sampling.max_new_tokens))
    stops = [s for s in params.stop if s]
    out = []
    for i in range(n_prompts):
        kw: dict[str, Any] = dict(
            n=per_chat, max_tokens=max_new, stop=stops or None, stop_token_ids=stop_ids or None,
            skip_special_tokens=True, output_kind=RequestOutputKind.FINAL_ONLY,  # the pump takes finished ones
        )
        if greedy:
            kw.update(temperature=0.0)
        else:
            kw.update(temperature=float(sampling.temperature), top_p=float(params.top_p),
                      top_k=int(params.top_k) if params.top_k and params.top_k > 0 else -1)
            if sampling.seeds:
                kw["seed"] = int(sampling.seeds[i]) & 0x7FFFFFFF  # the chat's own seed (per request)
            elif sampling.seed is not None:
                # One seed per chat: identical prompts in one call still get different samples.
                kw["seed"] = int(sampling.seed) + i * per_chat
        out.append(VSamplingParams(**kw))
    return out


def one_sample_each(requests: list[Any], per_chat: int) -> list[Any]:
    """Each ``n = per_chat`` request as ``per_chat`` requests of one sample, sample j seeded ``seed + j``.

    So that each sample's random draws belong to it alone, whatever the engine schedules beside it: with one
    seeded ``n > 1`` request the vLLM lane's same-seed tests were not reproducible on a loaded machine. The prefix
    cache still shares the prompt's KV between the requests."""
    from vllm import SamplingParams as VSamplingParams

    return [VSamplingParams(
        n=1, max_tokens=sp.max_tokens, stop=sp.stop or None, stop_token_ids=sp.stop_token_ids or None,
        skip_special_tokens=sp.skip_special_tokens, temperature=sp.temperature, top_p=sp.top_p, top_k=sp.top_k,
        seed=None if sp.seed is None else (int(sp.seed) + j) & 0x7FFFFFFF, output_kind=sp.output_kind)
        for sp in requests for j in range(per_chat)]
