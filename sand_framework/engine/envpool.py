"""Warm environment instances reused across rollouts and evaluation episodes.

Starting an environment can cost a JVM launch (TextWorld-Express,
ScienceWorld) or a PDDL translation (ALFWorld); resetting one is cheap. The
pool hands out up to ``k`` independent instances and keeps them for reuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sand_framework.components import Environment


@dataclass
class EnvPool:
    prototype: Environment
    instances: list[Environment] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.instances:
            self.instances.append(self.prototype)

    def take(self, k: int) -> list[Environment]:
        while len(self.instances) < k:
            self.instances.append(self.prototype.clone())
        return self.instances[:k]

    def close(self) -> None:
        """Close the clones; the prototype belongs to whoever passed it in."""
        for env in self.instances:
            if env is not self.prototype:
                env.close()
        self.instances = [self.prototype]
