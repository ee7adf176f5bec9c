"""What every component has in common: a name, a kind and typed parameters."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, get_args, get_origin

P = TypeVar("P")
"""A component's parameters: its ``Params`` dataclass (``self.params`` is one)."""


@dataclass
class NoParams:
    """Parameters of a component that takes none."""


class Component(Generic[P]):
    """Base of every pluggable part.

    Subclasses set ``name`` (the recipe's ``name:`` value) and ``Params`` (a
    dataclass whose fields are the recipe keys next to ``name``; defaults make
    them optional). Each field is declared once, there: its type, default,
    range (``Annotated[int, Ge(1)]``) or choices (``Literal[...]``) and, in the
    docstring under it, its help text, which ``sand validate``, ``sand
    components`` and ``docs/components.md`` read (see
    :mod:`sand_framework.config.paramdoc`). Components are built from their
    params alone so that a process pool or a Ray worker can rebuild one from
    ``(kind, name, params)``.

    The kind classes are generic in their Params, so ``self.params`` is typed::

        class Majority(Detector["Majority.Params"]):
            @dataclass
            class Params:
                threshold: Annotated[float, Interval(gt=0, le=1)] = 0.6
                \"\"\"Deliberate when the majority's share is below this.\"\"\"

    A class that does not set ``Params`` itself but names a dataclass as its
    type argument (``Detector[MajorityParams]``) gets that one.
    """

    kind: ClassVar[str] = ""
    name: ClassVar[str] = ""
    Params: ClassVar[type[Any]] = NoParams
    description: ClassVar[str] = ""
    requires: ClassVar[dict[str, str]] = {}
    """Modules this component imports that only an optional extra installs: import name -> extra of
    ``pyproject.toml`` (``{"ray": "ray"}``). ``sand validate`` looks each one up without importing it, so a recipe
    that validates does not stop at the component's first use, possibly after hours of training."""

    params: P

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "Params" in cls.__dict__:
            return
        for base in getattr(cls, "__orig_bases__", ()):
            origin = get_origin(base)
            if isinstance(origin, type) and issubclass(origin, Component):
                declared = [a for a in get_args(base) if isinstance(a, type) and dataclasses.is_dataclass(a)]
                if declared:
                    cls.Params = declared[0]
                    return

    def __init__(self, params: P | None = None):
        self.params = params if params is not None else self.Params()

    @classmethod
    def params_dict(cls, params: Any) -> dict[str, Any]:
        return dataclasses.asdict(params)

    @classmethod
    def input_files(cls, params: Any) -> dict[str, str]:
        """The files or folders outside the run whose content this component's results depend on: the name of
        the param that holds each (``"path"``) -> its path (a pair file, a game-data folder ...). Empty (the
        default): none.

        A param records only the *name* of a file; stage fingerprints record its *content*: every stage that
        reads this component's slot digests each path declared here (as the expert file named by ``data.path``
        is digested), so ``sand run --resume`` refuses (exit 3) a run whose file was edited after a stage read
        it, and ``sand sweep`` never adopts such a stage. Declare every file whose content changes what the
        component computes; leave out what only makes it faster (a cache)."""
        return {}

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

    @classmethod
    def context_token_budget(cls, params: Any) -> dict[str, tuple[str, int]]:
        """Optional. ``{role: (param name, tokens)}`` for the roles ``train`` (the context the trainer trains on),
        ``engine`` (the longest sequence an inference engine holds) and ``prompt`` (how far a policy cuts agent
        prompts); 0 tokens means no limit. ``sand validate`` refuses a recipe whose roles disagree (one context
        per recipe: :func:`sand_framework.config.budgets.check_context`). Default: none declared."""
        return {}

    @classmethod
    def device_plan(cls, params: Any, node: Any) -> list[str]:
        """Optional. ``sand plan``'s lines for this component on ``node``
        (:class:`sand_framework.accelerator.Node`): where its work goes. Raise ``ValueError`` when ``node``
        cannot hold it (a ``problem:`` line; ``sand validate`` reports it on a machine with GPUs), or
        :class:`~sand_framework.accelerator.PlanImpossible` when no node can (``sand validate`` refuses the
        recipe everywhere). Default: nothing to place."""
        return []

    def spec(self) -> dict[str, Any]:
        """A picklable description from which an identical component can be rebuilt."""
        return {"kind": self.kind, "name": self.name, "params": dataclasses.asdict(self.params)}

    def close(self) -> None:
        """Release processes, JVMs, models. Safe to call twice."""
