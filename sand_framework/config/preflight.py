"""Checks of what a validated recipe points at on this machine: its data file, a local model folder, the
packages its components need and the GPUs its device plan asks for.

``sand validate`` runs them so that a recipe that validates does not stop at
its first stage for a reason visible up front. Each finding is one of two
kinds (:class:`Findings`): a problem of the recipe or of an input it names (a
data file that is there but holds no trajectories: exit 2), or something this
machine lacks to run it (a package, a file not here, GPUs: exit 4). ``sand
validate --for-another-machine`` and ``sand sweep --plan --for-another-machine``
fail only on the first kind, so a recipe for a GPU node can be checked on a
laptop. They are not part of
:func:`~sand_framework.config.validate.validate`, which also re-checks the
stored recipe of a run being resumed: there a data file that was read into the
run's expert stage may since have moved, and the resume must not depend on it.
"""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sand_framework.config.schema import Recipe
from sand_framework.errors import MachineNotReady, RecipeError, SandError, install_hint
from sand_framework.registry import Registries

if TYPE_CHECKING:
    from sand_framework.accelerator import Node


def missing_packages(recipe: Recipe, registries: Registries) -> list[str]:
    """One problem per selected component whose :attr:`~sand_framework.components.Component.requires` lists a
    module that is not installed (looked up with ``find_spec``: nothing is imported)."""
    problems = []
    for kind, (name, _) in recipe.slots.items():
        for module, extra in registries[kind].get(name).requires.items():
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):  # a parent package that fails to import, or a broken module spec
                found = False
            if not found:
                problems.append(f"{kind}: {name!r} needs the package {module!r}, which is not installed; "
                                f"{install_hint(extra)}")
    return problems


def require_machine(recipe: Recipe, registries: Registries) -> None:
    """Refuse (exit 4, :class:`~sand_framework.errors.MachineNotReady`) to start or resume a run whose components
    need a package that is not installed, or whose device plan this machine's GPUs cannot hold (a
    ``tensor_parallel_size`` over its GPUs): the checks of ``sand validate``, made again where a run begins, before
    any stage (or the run directory) exists."""
    problems = missing_packages(recipe, registries) + gpu_problems(recipe, registries)
    if problems:
        raise MachineNotReady(problems)


@dataclass
class Findings:
    """What :func:`check` found, by kind."""

    recipe: list[str] = field(default_factory=list)
    """Problems of the recipe or of an input file it names that is there (exit 2 wherever it is checked)."""
    machine: list[str] = field(default_factory=list)
    """What this machine lacks to run the recipe: packages, files that are not here, GPUs (exit 4; not a
    failure with ``--for-another-machine``)."""

    def raise_for(self, source: str | None, for_another_machine: bool = False) -> None:
        """:class:`RecipeError` for recipe problems; else :class:`MachineNotReady` unless ``for_another_machine``."""
        if self.recipe:
            raise RecipeError(self.recipe, source)
        if self.machine and not for_another_machine:
            raise MachineNotReady(self.machine, source, "(the recipe itself is valid: --for-another-machine checks "
                                                        "only the recipe, for a machine that has these)")


def check(recipe: Recipe, registries: Registries) -> Findings:
    """The recipe's data file (here? parses? holds trajectories?), local model folder, component packages and
    this machine's GPUs against the recipe's device plan, sorted into :class:`Findings`."""
    from sand_framework.formats import read_messages, read_sharegpt
    from sand_framework.plugins import check_model_ref, looks_local

    found = Findings()
    data = recipe.data
    env = recipe.slots["environment"][0]
    if data.source != "env" and data.path:
        path = Path(data.path)
        if not path.is_file():  # also refuses devices and pipes, which could block or never end
            found.machine.append(
                f"data.path: expert file {data.path!r} not found on this machine (or not a regular file); make one "
                f"with `sand data import-eto FILE --env {env} -o OUT` or `sand data expert --env {env} --split "
                "train -o OUT`, or use data.source=env")
        else:
            reader = read_sharegpt if data.source == "sharegpt" else read_messages
            try:
                trajs = reader(path, env)
                if not trajs:
                    found.recipe.append(f"data.path: {data.path!r} holds no trajectories")
                found.recipe += [f"data.path: {p}" for p in file_task_problems(recipe, registries, trajs)]
            except SandError as exc:
                found.recipe.append(f"data.path: {exc}; fix the file, or make one with `sand data import-eto` or "
                                    "`sand data expert`")
    found.recipe += output_dir_problems(recipe.run.output_dir)
    if looks_local(recipe.model.base):
        try:
            check_model_ref(recipe.model.base)
        except SandError as exc:
            found.machine.append(f"model.base: {exc}")
    found.machine += missing_packages(recipe, registries)
    found.recipe += plan_problems(recipe, registries)
    found.machine += gpu_problems(recipe, registries)
    return found


def file_task_problems(recipe: Recipe, registries: Registries, trajs: list) -> list[str]:
    """The task ids of a data file's trajectories that the recipe's environment does not know
    (:func:`~sand_framework.components.environment.unknown_task_ids`). The environment is built as ``sand
    validate`` builds it (cheap by contract); one it cannot build here is left to the checks that report why."""
    from sand_framework.components.environment import unknown_task_ids

    name, params = recipe.slots["environment"]
    try:
        env = registries.build("environment", name, params)
    except Exception:  # noqa: BLE001 - e.g. ALFWorld without its game data: a machine finding reported elsewhere
        return []
    try:
        return unknown_task_ids(env, [t.task_id for t in trajs])
    finally:
        env.close()


def recipe_node(recipe: Recipe, registries: Registries, gpus: int, memory: float | None) -> "Node":
    """The :class:`~sand_framework.accelerator.Node` of ``gpus`` GPUs of ``memory`` GB that ``recipe`` is planned
    for: its base model and what its trainer writes."""
    from sand_framework.accelerator import Node

    trainer = recipe.slots.get("trainer")
    return Node(gpus=gpus, gpu_memory_gb=memory, base_model=recipe.model.base,
                trained_weights=registries["trainer"].get(trainer[0]).weights_kind(trainer[1]) if trainer else None)


def plan_problems(recipe: Recipe, registries: Registries) -> list[str]:
    """What no node can place (:class:`~sand_framework.accelerator.PlanImpossible`: a fixed tensor-parallel size
    that does not split the model's heads ...), checked on every machine, GPUs or not."""
    from sand_framework.accelerator import impossible_plans

    return impossible_plans(recipe.slots, registries, recipe_node(recipe, registries, 0, None))


def gpu_problems(recipe: Recipe, registries: Registries) -> list[str]:
    """The device plan (``sand plan``) of the recipe on this machine's GPUs, where it cannot be placed. Looks at
    the GPUs only on a machine with an NVIDIA driver (torch is not imported otherwise): on a CPU-only machine
    every plan places its work on the CPU."""
    if shutil.which("nvidia-smi") is None and not Path("/proc/driver/nvidia").exists():
        return []
    from sand_framework.accelerator import plan_lines

    try:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        memory = torch.cuda.get_device_properties(0).total_memory / 1e9 if gpus else None
    except Exception:  # noqa: BLE001 - no torch, or a broken CUDA install: `sand run` reports it where it matters
        return []
    if not gpus:
        return []
    node = recipe_node(recipe, registries, gpus, memory)
    return [f"{title}: this machine's {gpus} GPU(s) cannot hold the plan: {line.removeprefix('problem: ')} "
            f"(`sand plan RECIPE --gpus N` shows a node's plan)"
            for title, lines in plan_lines(recipe.slots, registries, node) for line in lines
            if line.startswith("problem: ")]


def output_dir_problems(output_dir: str) -> list[str]:
    """``run.output_dir`` (or a folder above it) is a file: no run directory can be created in it."""
    path = Path(output_dir)
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                what = "is a file" if p == path else f"is under {str(p)!r}, which is a file"
                return [f"run.output_dir: {output_dir!r} {what}, not a folder: run directories are created inside "
                        "it; choose a folder (it is created when missing), e.g. run.output_dir=runs"]
            return []
    return []


def preflight(recipe: Recipe, registries: Registries) -> list[str]:
    """Every finding of :func:`check`, recipe problems first."""
    found = check(recipe, registries)
    return found.recipe + found.machine
