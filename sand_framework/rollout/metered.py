"""Engine time per role, measured where a stage calls its policy.

A data-building stage asks two engines for work: the agent (``role="agent"``: samples, rollouts, explorations)
and the frozen base model (``role="base"``: critiques, syntheses). Whether an iteration keeps both busy — the
question a GPU-hour of SAND turns on — is their busy time over the stage's wall time. :class:`MeteredPolicy`
measures it on the caller's side of any backend (built-in or third-party, in this process or behind an HTTP
endpoint), so no backend has to report it: a role is busy while at least one of its calls or submitted
requests is outstanding (for ``submit`` that includes the backend's own queue, which is time the engine had
work waiting, not time it idled).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from sand_framework.components.policy import Policy
from sand_framework.metrics import ROLE_BUSY_SUFFIX
from sand_framework.rollout.asynchronous import EngineMeter
from sand_framework.types import Chat, Role, SamplingParams

ROLES: tuple[Role, ...] = ("agent", "base")


class MeteredPolicy:
    """A policy whose ``generate`` and ``submit`` are timed per role; everything else is the wrapped policy's.

    ``submit`` exists on the wrapper exactly when the wrapped policy has one, so :func:`engine_client`
    still picks the backend's own request queue or a micro-batcher as it would for the policy itself."""

    def __init__(self, policy: Any):
        self._policy = policy
        self.meters: dict[str, EngineMeter] = {role: EngineMeter() for role in ROLES}

    def _meter(self, role: str) -> EngineMeter:
        return self.meters.get(role) or self.meters.setdefault(role, EngineMeter())

    def generate(self, chats: list[Chat], sampling: SamplingParams, role: Role = "agent") -> Any:
        meter = self._meter(role)
        t0 = meter.begin()
        try:
            return self._policy.generate(chats, sampling, role)
        finally:
            meter.end(t0)

    def _submit(self, chat: Chat, sampling: SamplingParams, role: Role = "agent") -> Future:
        meter = self._meter(role)
        t0 = meter.begin()
        try:
            fut = self._policy.submit(chat, sampling, role)
        except BaseException:
            meter.end(t0)
            raise
        fut.add_done_callback(lambda _f: meter.end(t0))
        return fut

    def busy_seconds(self) -> dict[str, float]:
        """``{"agent_engine_busy_seconds": s, "base_engine_busy_seconds": s}``: busy time so far, per role."""
        return {f"{role}{ROLE_BUSY_SUFFIX}": meter.snapshot()["engine_busy_seconds"]
                for role, meter in self.meters.items()}

    def __getattr__(self, name: str) -> Any:
        if name in ("_policy", "meters"):  # not set yet (a copy being made): not the wrapped policy's
            raise AttributeError(name)
        attr = getattr(self._policy, name)
        if name == "submit" and callable(attr):
            return self._submit
        return attr


Policy.register(MeteredPolicy)  # a method that checks isinstance(tools.policy, Policy) still sees a policy
