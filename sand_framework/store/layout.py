"""Every stage name and every file and folder name of a run directory, in one place.

A run directory is read back by ``--resume``, stage reuse, ``sand eval``,
``sand report`` and sweeps, often long after the code that wrote it changed:
these names are a file format, so they are spelt once, here, and never
changed (runs made by older code must still resume). Paths are returned
relative to the run directory, as ``/``-separated strings, so both a
:class:`~sand_framework.store.RunDir` (``rd.file(...)``) and plain
``Path`` code (``run / RunLayout.METRICS``) use them::

    RUN/
      recipe.yaml          resolved recipe (the exact config that ran)
      plugins.json         loaded plugins with versions and hooks
      state.json           finished stages, in order (stage name -> result), and each stage's fingerprint
                           (what it was computed from: recipe sections, input digests, plugin versions)
      run.lock             held (flock) by the process running it
      run.log              the run's log records (SAND's, plugins', warnings), appended by every resume
      expert/trajectories.units.jsonl, expert/expert.sharegpt.json
      iter1/synthesis.units.jsonl   one unit per expert trajectory
      iter1/deliberation.sharegpt.json, iter1/deliberation.messages.jsonl   (methods that produce SFT data)
      iter1/pairs.jsonl    (methods that produce preference pairs: TRL's conversational format)
      weights/iter0/ ...   trainer output (checkpoints/, final/)
      eval/<model>/<split>.units.jsonl
      metrics.json         (and eval.json in a ``sand eval`` folder)
"""

from __future__ import annotations

import re
from pathlib import Path


class RunLayout:
    """Names inside a run directory (relative paths) and the names of its stages."""

    RECIPE = "recipe.yaml"
    PLUGINS = "plugins.json"
    STATE = "state.json"
    STATE_DONE = "done"
    """Key of ``state.json``: finished stages, in the order they finished (stage name -> result)."""
    STATE_FINGERPRINTS = "fingerprints"
    """Key of ``state.json``: stage name -> what the stage was computed from (``recipe``: the recipe sections it
    reads, ``inputs``: digests of the files it reads, ``plugins``: versions of the plugins of its components),
    recorded when the stage starts; runs written before fingerprints lack it (an unknown fingerprint)."""
    DISCARDED = ".discarded"
    """Where ``--redo-from`` moves a discarded stage's folders before deleting them (a crash mid-way leaves
    them here, never half-deleted in place; removed by the next ``--redo-from``)."""
    LOCK = "run.lock"
    CHECKPOINTS = "checkpoints"
    """Inside a training stage's weights folder: its resumable checkpoints (``checkpoint-N``) while it trains."""
    EXPORTED_WEIGHTS = "exported_weights.json"
    """In a run copied by ``sand sweep --export`` (which leaves ``weights/`` out): the tensors digest of every
    finished training stage's weights (``weights/iterK`` -> digest), taken before they were left out."""
    LOG = "run.log"
    """Every log record of ``sand run`` while it holds the run (SAND's, plugins', warnings), appended by resumes."""
    METRICS = "metrics.json"
    EVAL_SPEC = "eval.json"
    """What a ``sand eval`` output folder evaluated, by model label."""
    EXPERT = "expert"
    """The expert stage and its folder."""
    WEIGHTS = "weights"
    EVAL = "eval"
    """The evaluation stage and its folder."""
    UNITS = ".units.jsonl"
    """Suffix of a resumable unit log."""
    EXPERT_UNITS = f"{EXPERT}/trajectories{UNITS}"
    EXPERT_DATA = f"{EXPERT}/expert.sharegpt.json"

    @staticmethod
    def iteration(k: int) -> str:
        """The folder of SAND iteration ``k``'s synthesis."""
        return f"iter{k}"

    @classmethod
    def iterations_in(cls, root: Path) -> list[int]:
        """The iterations ``K`` whose folder exists under the run directory ``root``, in order."""
        found = (_ITERATION_FOLDER.fullmatch(p.name) for p in root.glob("iter*") if p.is_dir())
        return sorted(int(m[1]) for m in found if m)

    @classmethod
    def synthesis_units(cls, k: int) -> str:
        return f"{cls.iteration(k)}/synthesis{cls.UNITS}"

    @classmethod
    def deliberation_sharegpt(cls, k: int) -> str:
        return f"{cls.iteration(k)}/deliberation.sharegpt.json"

    @classmethod
    def deliberation_messages(cls, k: int) -> str:
        return f"{cls.iteration(k)}/deliberation.messages.jsonl"

    @classmethod
    def preference_pairs(cls, k: int) -> str:
        """Iteration ``k``'s preference pairs in TRL's conversational format (``prompt``/``chosen``/``rejected``
        messages), for methods that produce pairs."""
        return f"{cls.iteration(k)}/pairs.jsonl"

    @classmethod
    def weights(cls, k: int) -> str:
        """Training stage ``k``'s output folder (the trainer writes ``checkpoints/`` and ``final/`` in it)."""
        return f"{cls.WEIGHTS}/iter{k}"

    @classmethod
    def eval_units(cls, model: str, split: str) -> str:
        return f"{cls.EVAL}/{model}/{split}{cls.UNITS}"

    # -- stages ------------------------------------------------------------------

    @staticmethod
    def train_stage(k: int) -> str:
        """Training stage ``k`` (0: behavior-initialization SFT)."""
        return f"train/iter{k}"

    @staticmethod
    def synth_stage(k: int) -> str:
        """Synthesis of SAND iteration ``k`` (from 1)."""
        return f"synth/iter{k}"

    @classmethod
    def parse_stage(cls, stage: str) -> tuple[str, int] | None:
        """``expert`` -> (expert, 0), ``eval`` -> (eval, 0), ``train/iterK`` (K >= 0) and ``synth/iterK``
        (K >= 1) -> (train|synth, K); None for anything else."""
        if stage in (cls.EXPERT, cls.EVAL):
            return stage, 0
        m = _ITERATION_STAGE.fullmatch(stage)
        if m and (m[1] == "train" or int(m[2]) >= 1):
            return m[1], int(m[2])
        return None

    @classmethod
    def stage_folders(cls, stage: str) -> list[str]:
        """The folders that hold a finished stage's output (what reusing it copies)."""
        parsed = cls.parse_stage(stage)
        if parsed is None:
            raise ValueError(f"not a stage name: {stage!r}")
        kind, k = parsed
        return {"expert": [cls.EXPERT], "train": [cls.weights(k)], "synth": [cls.iteration(k)],
                "eval": [cls.EVAL]}[kind]

    @classmethod
    def stage_files(cls, stage: str) -> list[str]:
        """Files outside the stage's folders that a finished stage wrote (``eval``: ``metrics.json``)."""
        return [cls.METRICS] if stage == cls.EVAL else []

    @classmethod
    def stage_rank(cls, stage: str) -> float:
        """Where ``stage`` comes in a run: ``expert`` < ``train/iter0`` < ``synth/iter1`` < ``train/iter1`` < ...
        < ``eval`` (a stage computes from the ones ranked before it)."""
        parsed = cls.parse_stage(stage)
        if parsed is None:
            raise ValueError(f"not a stage name: {stage!r}")
        kind, k = parsed
        return {"expert": 0, "train": 2 * k + 1, "synth": 2 * k, "eval": float("inf")}[kind]

    @classmethod
    def stages(cls, iterations: int) -> list[str]:
        """Every stage of a run of ``iterations`` SAND iterations, in order."""
        out = [cls.EXPERT, cls.train_stage(0)]
        for k in range(1, iterations + 1):
            out += [cls.synth_stage(k), cls.train_stage(k)]
        return [*out, cls.EVAL]

    @classmethod
    def stages_on_disk(cls, root: Path) -> list[str]:
        """The stages whose folders exist under the run directory ``root`` (finished or not), in order."""
        found = [cls.EXPERT] if (root / cls.EXPERT).is_dir() else []
        found += [cls.synth_stage(k) for k in cls.iterations_in(root) if k >= 1]
        weights = root / cls.WEIGHTS
        if weights.is_dir():
            found += [cls.train_stage(int(m[1])) for p in weights.iterdir()
                      if p.is_dir() and (m := _ITERATION_FOLDER.fullmatch(p.name))]
        if (root / cls.EVAL).is_dir() or (root / cls.METRICS).is_file():
            found.append(cls.EVAL)
        return sorted(found, key=cls.stage_rank)


_ITERATION_STAGE = re.compile(r"(train|synth)/iter(\d+)")
_ITERATION_FOLDER = re.compile(r"iter(\d+)")
