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
      state.json           finished stages, in order (stage name -> result)
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
    LOCK = "run.lock"
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


_ITERATION_STAGE = re.compile(r"(train|synth)/iter(\d+)")
_ITERATION_FOLDER = re.compile(r"iter(\d+)")
