"""Handing a training stage's accelerator memory back before an inference engine starts or wakes.

Without ``trainer.launch`` a trainer runs in the ``sand`` process. When it is
done, PyTorch's CUDA caching allocator still *reserves* the memory its
activations, gradients and optimizer state used (tens of GB for an 8B model),
although nothing references it any more. A vLLM engine lives in other
processes: it sees that memory as taken and refuses to start (or wake) when the
free memory is below ``gpu_memory_utilization`` x total. :func:`hand_back` is
the one place that returns it: garbage collection (so the trainer's tensors are
really unreferenced), ``torch.cuda.synchronize``, ``empty_cache`` and
``ipc_collect`` on every device, ``malloc_trim`` for host memory, and a
report of what is still reserved.

Called by the trainers at the end of a stage (``trl_sft``; a trainer plugin
should call it too) and by :meth:`sand_framework.engine.context.RunContext.policy`
before the policy is set up again after a training stage, so it runs even for a
trainer that forgot. It imports torch only when torch is already imported: a
run without torch (remote ``openai`` policy, no local trainer yet) pays nothing.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import sys
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

GIB = 1024 ** 3
STILL_RESERVED_WARN_BYTES = 1 * GIB
"""Above this much still reserved on a device after the hand-back, a warning names it (a leaked reference)."""


@dataclass
class DeviceMemory:
    index: int
    allocated: int
    """Bytes held by live tensors (these cannot be handed back: something still references them)."""
    reserved: int
    """Bytes the caching allocator holds (allocated + cached): what other processes cannot use."""
    free: int
    total: int


@dataclass
class MemoryReport:
    """What the hand-back found: per device, before and after."""

    before: list[DeviceMemory] = field(default_factory=list)
    after: list[DeviceMemory] = field(default_factory=list)

    @property
    def released(self) -> int:
        """Bytes the caching allocator gave back, all devices together."""
        return sum(b.reserved for b in self.before) - sum(a.reserved for a in self.after)

    @property
    def still_reserved(self) -> int:
        return sum(a.reserved for a in self.after)

    def summary(self) -> str:
        if not self.after:
            return "no accelerator"
        parts = [f"cuda:{a.index} {a.reserved / GIB:.1f} GiB reserved ({a.allocated / GIB:.1f} allocated), "
                 f"{a.free / GIB:.1f}/{a.total / GIB:.1f} GiB free" for a in self.after]
        return f"handed back {self.released / GIB:.1f} GiB; " + "; ".join(parts)


def _cuda() -> Any:
    """``torch.cuda`` when torch is already imported and CUDA is initialised, else None (tests replace this)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_available() or not cuda.is_initialized():
            return None
    except Exception:  # noqa: BLE001 - a broken CUDA install must not stop a run here
        return None
    return cuda


def _has_context(cuda: Any, i: int) -> bool:
    """This process already holds a CUDA context on device ``i`` (torch's own check where the build has it, else
    memory its caching allocator reserves there). Asking a device anything else creates a context on it."""
    torch = sys.modules.get("torch")
    has = getattr(getattr(torch, "_C", None), "_cuda_hasPrimaryContext", None)
    if callable(has):
        try:
            return bool(has(i))
        except Exception:  # noqa: BLE001 - fall back to the allocator's bookkeeping
            pass
    return cuda.memory_reserved(i) > 0


def devices_in_use(cuda: Any) -> list[int]:
    """The devices this process has touched. Only these are synchronised, emptied and probed: a probe of every
    visible GPU would leave a context of ~0.5 GB on each (issue 37: the run's process held one on all 8 GPUs
    after the hand-back, memory the engines then lacked)."""
    return [i for i in range(cuda.device_count()) if _has_context(cuda, i)]


def probe(cuda: Any = None, devices: list[int] | None = None) -> list[DeviceMemory]:
    """The memory of ``devices`` (default: every device this process uses, :func:`devices_in_use`; ``[]``
    without CUDA)."""
    cuda = cuda if cuda is not None else _cuda()
    if cuda is None:
        return []
    out = []
    for i in devices if devices is not None else devices_in_use(cuda):
        free, total = cuda.mem_get_info(i)
        out.append(DeviceMemory(i, int(cuda.memory_allocated(i)), int(cuda.memory_reserved(i)), int(free),
                                int(total)))
    return out


def _trim_host() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def hand_back(reason: str = "") -> MemoryReport:
    """Return the memory a finished stage left cached to the devices and the OS; report what is still held.

    Call it after the last reference to the model, optimizer and trainer is
    dropped (a reference still held keeps its tensors *allocated*: the report
    says how much, and a warning names the device when over
    :data:`STILL_RESERVED_WARN_BYTES`).
    """
    cuda = _cuda()
    used = devices_in_use(cuda) if cuda is not None else []
    report = MemoryReport(before=probe(cuda, used))
    gc.collect()
    if cuda is not None:
        for i in used:
            with cuda.device(i):
                cuda.synchronize()
                cuda.empty_cache()
                cuda.ipc_collect()
    _trim_host()
    report.after = probe(cuda, used)
    if report.after:
        where = f" ({reason})" if reason else ""
        log.info("accelerator memory%s: %s", where, report.summary())
        for a in report.after:
            if a.reserved > STILL_RESERVED_WARN_BYTES:
                log.warning("cuda:%d still reserves %.1f GiB after the hand-back%s (%.1f GiB in live tensors): "
                            "something still references the trained model or its optimizer; an inference engine "
                            "started now gets less memory", a.index, a.reserved / GIB, where, a.allocated / GIB)
    return report


class PlanImpossible(ValueError):
    """Raised by a component's ``device_plan`` for parameters that no node can place, whatever its GPUs (a fact of
    the recipe and its model, such as a fixed tensor-parallel size that does not split the model's heads):
    ``sand validate`` refuses the recipe (exit 2) instead of letting the run stop when the engine starts."""


@dataclass(frozen=True)
class Node:
    """The machine a ``sand plan`` is made for (any machine: planning touches no device)."""

    gpus: int
    """GPUs on the node (0 = CPU only)."""
    gpu_memory_gb: float | None = None
    """Memory of one GPU; None = unknown."""
    base_model: str = ""
    """The recipe's ``model.base`` (resolved where it can be, for the weights' size)."""
    trained_weights: str | None = None
    """What the recipe's trainer writes: ``adapter``, ``full`` or None (unknown)."""


def plan_lines(slots: dict[str, tuple[str, Any]], registries: Any, node: Node) -> list[tuple[str, list[str]]]:
    """Per component slot, the lines of its :meth:`~sand_framework.components.Component.device_plan` (components
    with nothing to place are left out). A component that cannot be placed on ``node`` raises ``ValueError``: its
    message is the line."""
    out = []
    for kind, (name, params) in slots.items():
        try:
            lines = list(registries[kind].get(name).device_plan(params, node))
        except ValueError as exc:
            lines = [f"problem: {exc}"]
        if lines:
            out.append((f"{kind} {name}", lines))
    return out


def impossible_plans(slots: dict[str, tuple[str, Any]], registries: Any, node: Node) -> list[str]:
    """Per component, the :class:`PlanImpossible` its ``device_plan`` raises on ``node`` (one line each):
    the recipe problems among :func:`plan_lines`' ``problem:`` lines, which ``sand validate`` checks on every
    machine (with ``--for-another-machine`` too)."""
    out = []
    for kind, (name, params) in slots.items():
        try:
            registries[kind].get(name).device_plan(params, node)
        except PlanImpossible as exc:
            out.append(f"{kind}: {exc}")
        except ValueError:  # this node cannot place it; another may (gpu_problems checks the machine's)
            pass
    return out
