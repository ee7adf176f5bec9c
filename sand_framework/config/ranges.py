"""Range constraints for built-in component params that do not declare them yet (transitional).

A component's ranges belong in its own ``Params`` (``Annotated[int, Ge(1)]``,
see :mod:`~sand_framework.config.typecheck`). The built-in environments,
policies and trainer were being reworked when validation learned ranges, so
their constraints are listed here, by component, and applied by
:func:`pending_problems` exactly as if they were annotations. Move an entry
into its ``Params`` (and delete it here) when that file is next edited;
``tests/test_config.py`` checks that every entry names an existing field.
A field that already carries ``Annotated`` constraints is not checked here again.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Annotated, Any, get_origin

from annotated_types import Ge, Gt, Interval

from sand_framework.config.typecheck import check_value

_PROBABILITY = Interval(gt=0, le=1)

PENDING: dict[tuple[str, str], dict[str, Any]] = {
    ("environment", "textworld_express"): {"max_steps": Ge(1), "n_train": Ge(0), "n_seen": Ge(0),
                                           "n_unseen": Ge(0)},
    ("environment", "alfworld"): {"max_steps": Ge(1), "max_train": Ge(0), "cache_games": Ge(0)},
    ("environment", "scienceworld"): {"max_steps": Ge(0), "default_max_steps": Ge(1), "max_invalid_streak": Ge(0),
                                      "max_restarts": Ge(0)},
    ("environment", "webshop"): {"max_steps": Ge(1), "num_products": Ge(1)},
    ("policy", "transformers"): {"batch_size": Ge(1), "threads": Ge(0), "max_prompt_tokens": Ge(0),
                                 "top_p": _PROBABILITY, "top_k": Ge(0), "min_common_prefix": Ge(0)},
    ("policy", "vllm"): {"max_model_len": Ge(1), "max_prompt_tokens": Ge(0), "top_p": _PROBABILITY, "top_k": Ge(0),
                         "max_lora_rank": Ge(1), "max_loras": Ge(1), "gpu_memory_utilization": _PROBABILITY,
                         "kv_cache_space_gb": Gt(0), "tensor_parallel_size": Ge(0), "seed": Ge(0)},
    ("policy", "openai"): {"top_p": _PROBABILITY, "max_concurrency": Ge(1), "timeout_s": Gt(0),
                           "connect_timeout_s": Gt(0), "max_retries": Ge(0), "max_prompt_tokens": Ge(0),
                           "wait_ready_s": Ge(0)},
    ("trainer", "trl_sft"): {"lora_r": Ge(1), "lora_alpha": Gt(0), "lora_dropout": Interval(ge=0, lt=1),
                             "learning_rate": Gt(0), "warmup_ratio": Interval(ge=0, lt=1), "weight_decay": Ge(0),
                             "batch_size": Ge(1), "per_device_batch_size": Ge(1), "max_length": Ge(1),
                             "max_steps": Ge(-1), "save_steps": Ge(1), "save_total_limit": Ge(1),
                             "logging_steps": Ge(1), "threads": Ge(0)},
}
"""(kind, component name) -> {param: annotated-types constraint}."""

def _trl_sft(p: Any) -> list[str]:
    if p.max_steps == 0:
        return [f"max_steps: must be -1 (train for the epochs) or >= 1, got {p.max_steps}"]
    return []


_EXTRA: dict[tuple[str, str], Any] = {("trainer", "trl_sft"): _trl_sft}
"""Cross-field checks of the same components (their ``Params.validate()`` once they move into the Params)."""


def pending_problems(kind: str, name: str, params: Any, where: str) -> list[str]:
    """Problems of a built ``params`` instance against the pending constraints of ``(kind, name)``."""
    table = PENDING.get((kind, name))
    if not table or not dataclasses.is_dataclass(params):
        return []
    declared = typing.get_type_hints(type(params), include_extras=True)
    plain = typing.get_type_hints(type(params))
    problems = []
    for field_name, constraint in table.items():
        if field_name not in plain or get_origin(declared[field_name]) is Annotated:
            continue
        value = getattr(params, field_name)
        if value is None:
            continue
        problems += check_value(value, Annotated[plain[field_name], constraint], f"{where}.{field_name}")
    extra = _EXTRA.get((kind, name))
    if extra is not None and not problems:
        try:
            problems += [f"{where}: {p}" for p in extra(params)]
        except AttributeError:  # a field renamed by the component since this table was written
            pass
    return problems
