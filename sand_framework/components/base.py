"""What every component has in common: a name, a kind and typed parameters."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass
class NoParams:
    """Parameters of a component that takes none."""


class Component:
    """Base of every pluggable part.

    Subclasses set ``name`` (the recipe's ``name:`` value) and ``Params`` (a
    dataclass whose fields are the recipe keys next to ``name``; defaults make
    them optional). Components are built from their params alone so that a
    process pool or a Ray worker can rebuild one from ``(kind, name, params)``.
    """

    kind: ClassVar[str] = ""
    name: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    description: ClassVar[str] = ""
    requires: ClassVar[dict[str, str]] = {}
    """Modules this component imports that only an optional extra installs: import name -> extra of
    ``pyproject.toml`` (``{"ray": "ray"}``). ``sand validate`` looks each one up without importing it, so a recipe
    that validates does not stop at the component's first use, possibly after hours of training."""

    def __init__(self, params: Any = None):
        self.params = params if params is not None else self.Params()

    @classmethod
    def params_dict(cls, params: Any) -> dict[str, Any]:
        return dataclasses.asdict(params)

    @classmethod
    def agent_token_budget(cls, params: Any) -> tuple[str, int] | None:
        """``(param name, tokens)``: how much the *agent* may write per turn when this component samples it.

        ``sand validate`` compares it with :meth:`thought_token_budget` of the
        components that write training data: a budget shorter than what the
        agent is trained to write cuts a deliberating agent off before its
        action and silently changes the experiment. None: it does not sample
        the agent.
        """
        return None

    @classmethod
    def thought_token_budget(cls, params: Any) -> tuple[str, int] | None:
        """``(param name, tokens)``: the longest thought this component puts into training data (None: none)."""
        return None

    def spec(self) -> dict[str, Any]:
        """A picklable description from which an identical component can be rebuilt."""
        return {"kind": self.kind, "name": self.name, "params": dataclasses.asdict(self.params)}

    def close(self) -> None:
        """Release processes, JVMs, models. Safe to call twice."""
