"""The run directory: one folder per run holding everything needed to audit and resume it.

Its file and folder names are :class:`~sand_framework.store.layout.RunLayout`'s;
paths inside the run are stored relative to it in ``state.json``
(``./weights/iter0/final``), so a copied or moved run uses its own files.

Every file the run reads back is checked when it is read: a damaged one
stops the command with :class:`RunDirError` (exit 3) naming the file and what
to do about it, never with a traceback and never by silently using less.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sand_framework.errors import RunDirError
from sand_framework.store import yamlsafe
from sand_framework.store.files import UnitLog, atomic_write_json, atomic_write_text, not_writable, read_json
from sand_framework.store.layout import RunLayout

RUN_RELATIVE = "./"
"""Prefix of a path stored relative to the run directory (in ``state.json`` stage results)."""

FIXES: dict[str, str] = {
    RunLayout.RECIPE: "It is the recipe this run started with: restore it from a copy of the run, or start a new "
                      "run (`sand run RECIPE`).",
    RunLayout.STATE: "It lists the finished stages: restore it from a copy of the run, or delete it and resume "
                     "(finished units in *.units.jsonl are kept; whole stages such as training are redone).",
    RunLayout.PLUGINS: "It records the plugins the run used: delete it and resume (it is rewritten; give "
                       "--plugins-dir again if the run used plugin folders).",
    RunLayout.METRICS: "It is rewritten at the end of the run: delete it and resume (`sand run --resume RUN`).",
    RunLayout.EVAL_SPEC: "It records what this folder evaluated: delete it and rerun `sand eval` with the same -o.",
}
"""What to do about each file a run reads back, when it is damaged."""


@dataclass
class RunDir:
    path: Path
    _lock_fd: int | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)

    # -- creation ----------------------------------------------------------

    @classmethod
    def create(cls, root: str | os.PathLike, name: str) -> "RunDir":
        """``root/NAME-STAMP`` (``-1``, ``-2`` ... if taken); the name cannot lead outside ``root``."""
        if not name or name.startswith(".") or any(c in name for c in "/\\\x00") or Path(name).name != name:
            raise RunDirError(f"run name {name!r} is not a plain folder name (no / or \\, not starting with "
                              "'.'); set run.name to one")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path(root) / f"{name}-{stamp}"
        path, i = base, 1
        while path.exists():
            path, i = Path(f"{base}-{i}"), i + 1
        _mkdir(path, parents=True, exist_ok=False, what=f"run.output_dir {str(root)!r}")
        return cls(path)

    @classmethod
    def create_at(cls, path: str | os.PathLike) -> "RunDir":
        """Use exactly ``path`` (must not already hold a run; resume those with --resume)."""
        path = Path(path)
        if (path / RunLayout.RECIPE).exists():
            raise RunDirError(f"{path} already holds a run; continue it with `sand run --resume {path}`")
        _mkdir(path, parents=True, exist_ok=True, what="--run-dir")
        return cls(path)

    @classmethod
    def open_existing(cls, path: str | os.PathLike) -> "RunDir":
        """An existing run, its bookkeeping files checked (readable, well-formed) before anything uses them."""
        path = Path(path)
        if not (path / RunLayout.RECIPE).is_file():
            raise RunDirError(
                f"{path} is not a SAND run directory (no recipe.yaml). Pass the folder `sand run` printed, "
                "e.g. runs/quickstart-20260101-120000."
            )
        rd = cls(path)
        rd.check()
        return rd

    def check(self) -> None:
        """Raise :class:`RunDirError` naming the first damaged bookkeeping file and what to do about it."""
        recipe = self.path / RunLayout.RECIPE
        try:
            data = yamlsafe.load(yamlsafe.read_text(recipe))
        except OSError as exc:
            raise RunDirError(f"{recipe} cannot be read ({exc.strerror or exc}). {FIXES[RunLayout.RECIPE]}") from None
        except Exception as exc:  # noqa: BLE001 - invalid YAML, binary, too large
            raise RunDirError(f"{recipe} is damaged ({str(exc)[:200]}). {FIXES[RunLayout.RECIPE]}") from None
        if not isinstance(data, dict):
            raise RunDirError(f"{recipe} is damaged (it holds {'nothing' if data is None else type(data).__name__}, "
                              f"not a recipe). {FIXES[RunLayout.RECIPE]}")
        self._state()
        self.fingerprints()
        plugins = self.read_json(RunLayout.PLUGINS, {})
        dirs = plugins.get("plugin_dirs", []) if isinstance(plugins, dict) else None
        if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
            raise RunDirError(f"{self.path / RunLayout.PLUGINS} is damaged (expected an object with a list "
                              f"`plugin_dirs`). {FIXES[RunLayout.PLUGINS]}")

    # -- locking -----------------------------------------------------------

    def lock(self) -> None:
        """Take the run's exclusive lock; refuse if a live process holds it.

        ``flock`` is released by the kernel when its holder dies, so a lock
        file left by a killed run never blocks a resume (a stale lock).
        """
        lock_path = self.path / RunLayout.LOCK
        if not os.access(self.path, os.W_OK | os.X_OK):
            raise RunDirError(f"{self.path} is read-only for you: a run writes its results into its directory. "
                              f"Make it writable (chmod -R u+w {self.path}), or copy it (cp -r {self.path} COPY) and "
                              "resume the copy (`sand run --resume COPY`)")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise not_writable(lock_path, exc) from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = Path(lock_path).read_text().strip() or "another process"
            os.close(fd)
            raise RunDirError(f"{self.path} is in use by pid {holder}; wait for it or stop it first.") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def held_by(self) -> str | None:
        """The pid a live process holding this run's lock wrote, or None when no live process holds it (the lock
        is only tested, never kept)."""
        try:
            fd = os.open(self.path / RunLayout.LOCK, os.O_RDONLY)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return (self.path / RunLayout.LOCK).read_text().strip() or "unknown"
        finally:
            os.close(fd)  # closing the only descriptor of a lock taken here releases it
        return None

    def unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- files ---------------------------------------------------------------

    def file(self, *parts: str) -> Path:
        p = self.path.joinpath(*parts)
        _mkdir(p.parent, parents=True, exist_ok=True, what="the run directory")
        return p

    def folder(self, *parts: str) -> Path:
        """A folder of the run, made if missing."""
        p = self.path.joinpath(*parts)
        _mkdir(p, parents=True, exist_ok=True, what="the run directory")
        return p

    def units(self, *parts: str) -> UnitLog:
        return UnitLog(self.file(*parts))

    def write_json(self, rel: str, data: Any) -> None:
        """Write a JSON file of the run; paths inside the run are stored relative to it (see :meth:`read_json`)."""
        atomic_write_json(self.file(rel), self._to_stored(data))

    def write_text(self, rel: str, text: str) -> None:
        atomic_write_text(self.file(rel), text)

    def read_json(self, rel: str, default: Any = None) -> Any:
        """A JSON file of the run, its run-relative paths resolved against where the run is now.

        A damaged file raises :class:`RunDirError` saying what to do about it.
        """
        return self._from_stored(read_json(self.path / rel, default, fix=FIXES.get(Path(rel).name, "")))

    # -- stage bookkeeping ---------------------------------------------------

    def _state(self) -> dict[str, Any]:
        state = self.read_json(RunLayout.STATE, {"done": {}})
        if not isinstance(state, dict) or not isinstance(state.get("done"), dict):
            raise RunDirError(f"{self.path / RunLayout.STATE} is damaged (expected {{\"done\": {{stage: result}}}}). "
                              f"{FIXES[RunLayout.STATE]}")
        return state

    def finished_stages(self) -> list[str]:
        """The stages recorded as done, in the order they finished."""
        return list(self._state()["done"])

    def stage_done(self, stage: str) -> bool:
        return stage in self._state()["done"]

    def stage_result(self, stage: str) -> Any:
        """What a finished stage recorded, with paths inside the run resolved against where the run is now."""
        return self._from_stored(self._state()["done"].get(stage))

    def mark_done(self, stage: str, result: Any = None, fingerprint: dict[str, Any] | None = None) -> None:
        """Record ``stage`` as finished; paths inside the run directory are stored relative to it.

        ``fingerprint`` (what the stage was computed from) is written in the same atomic write; without it, one
        recorded when the stage started is kept."""
        state = self._state()
        state["done"][stage] = result
        if fingerprint is not None:
            state[RunLayout.STATE_FINGERPRINTS] = {**self.fingerprints(), stage: fingerprint}
        self._write_state(state)

    def _write_state(self, state: dict[str, Any]) -> None:
        """``state.json``: the done entries' paths stored run-relative; fingerprints exactly as given (they hold
        recipe values, which must read back as they were written)."""
        out = {k: v for k, v in state.items() if k != RunLayout.STATE_FINGERPRINTS}
        out["done"] = self._to_stored(state["done"])
        fingerprints = state.get(RunLayout.STATE_FINGERPRINTS, self.fingerprints())
        if fingerprints:
            out[RunLayout.STATE_FINGERPRINTS] = fingerprints
        atomic_write_json(self.file(RunLayout.STATE), out)

    def fingerprints(self) -> dict[str, Any]:
        """Stage -> its recorded fingerprint (stages of runs made before fingerprints have none)."""
        raw = read_json(self.path / RunLayout.STATE, {}, fix=FIXES[RunLayout.STATE])
        found = raw.get(RunLayout.STATE_FINGERPRINTS, {}) if isinstance(raw, dict) else {}
        if not isinstance(found, dict):
            raise RunDirError(f"{self.path / RunLayout.STATE} is damaged (`{RunLayout.STATE_FINGERPRINTS}` is not a "
                              f"mapping). {FIXES[RunLayout.STATE]}")
        return found

    def fingerprint(self, stage: str) -> dict[str, Any] | None:
        return self.fingerprints().get(stage)

    def record_fingerprint(self, stage: str, fingerprint: dict[str, Any]) -> None:
        """Record what ``stage`` is computed from (when it starts; kept when it finishes)."""
        fingerprints = self.fingerprints()
        if fingerprints.get(stage) != fingerprint:
            self._write_state({**self._state(), RunLayout.STATE_FINGERPRINTS: {**fingerprints, stage: fingerprint}})

    def discard(self, stages: list[str]) -> list[str]:
        """Forget ``stages`` (``--redo-from``): their folders and files are removed, their ``state.json`` entries
        (done mark, fingerprint) dropped; nothing else is touched. Returns the paths removed (run-relative).

        Folders are first moved into ``.discarded/`` (a rename: a crash never leaves a half-deleted stage that a
        resume would take up), then ``state.json`` is rewritten, then ``.discarded/`` is deleted."""
        trash = self.path / RunLayout.DISCARDED
        removed: list[str] = []
        for stage in stages:
            for rel in [*RunLayout.stage_folders(stage), *RunLayout.stage_files(stage)]:
                src = self.path / rel
                if src.exists() or src.is_symlink():
                    dest = trash / f"{len(removed)}-{rel.replace('/', '_')}"
                    _mkdir(trash, parents=True, exist_ok=True, what="the run directory")
                    if dest.exists():
                        shutil.rmtree(dest, ignore_errors=True)
                    os.replace(src, dest)
                    removed.append(rel)
        state = self._state()
        fingerprints = self.fingerprints()
        for stage in stages:
            state["done"].pop(stage, None)
            fingerprints.pop(stage, None)
        self._write_state({**state, RunLayout.STATE_FINGERPRINTS: fingerprints})
        self.forget_exported_weights(stages)
        shutil.rmtree(trash, ignore_errors=True)
        return removed

    def weights_missing(self, stage: str) -> bool:
        """Training ``stage`` finished and the weights folder its result names is not there (a run exported
        without weights, ``sand sweep --export``: ``sand run --resume RUN --rebuild-weights`` trains the SFT
        start's again)."""
        result = self.stage_result(stage) if self.stage_done(stage) else None
        weights = result.get("weights") if isinstance(result, dict) else None
        return bool(weights) and not Path(weights).exists()

    def forget_exported_weights(self, stages: list[str]) -> None:
        """Drop an export's record of the weights of these training stages (discarded, or trained again for a run
        that goes on): the stages computed from here on come from the new weights."""
        exported = self.path / RunLayout.EXPORTED_WEIGHTS
        record = read_json(exported, None) if exported.is_file() else None
        if not isinstance(record, dict):
            return
        folders = {RunLayout.weights(parsed[1]) for parsed in map(RunLayout.parse_stage, stages)
                   if parsed and parsed[0] == "train"}
        kept = {k: v for k, v in record.items() if k not in folders}
        if kept != record:
            atomic_write_json(exported, kept)

    def _to_stored(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self._to_stored(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._to_stored(v) for v in value]
        if isinstance(value, str) and os.sep in value and not value.startswith(RUN_RELATIVE):
            p = Path(value)
            if p.is_absolute() or p.exists():
                try:
                    rel = p.resolve().relative_to(self.path.resolve())
                except (ValueError, OSError):
                    return value
                return RUN_RELATIVE + rel.as_posix() if rel.parts else value  # the run folder itself stays
        return value

    def _from_stored(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self._from_stored(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._from_stored(v) for v in value]
        if isinstance(value, str) and value.startswith(RUN_RELATIVE):
            return str(self.path.absolute().joinpath(*Path(value[len(RUN_RELATIVE):]).parts))
        if isinstance(value, str) and os.path.isabs(value):
            return self._own_copy(value)
        return value

    def _own_copy(self, value: str) -> str:
        """A legacy absolute weights path of *another* folder (the run was copied or moved): this run's copy.

        Runs written before paths were stored relative hold absolute paths; if
        the original still exists they would silently keep using it.
        """
        p = Path(value)
        if RunLayout.WEIGHTS not in p.parts:
            return value
        try:
            p.resolve().relative_to(self.path.resolve())
            return value  # already inside this run
        except (ValueError, OSError):
            pass
        parts = p.parts
        inside = self.path.absolute().joinpath(*parts[len(parts) - 1 - parts[::-1].index(RunLayout.WEIGHTS):])
        return str(inside) if inside.exists() else value

    def adopt(self, source: "RunDir", stage: str, folders: list[str],
              fingerprint: dict[str, Any] | None = None) -> None:
        """Take a finished ``stage`` from another run: copy its folders, then mark it done here (with
        ``fingerprint``, else the one ``source`` recorded for it).

        Paths inside the stage's result that point into ``source`` are rewritten
        to the copies, so this run never depends on the other folder again. The
        done mark is written last: a crash mid-copy leaves the stage undone and
        it is simply recomputed on resume.
        """
        if not source.stage_done(stage):
            raise RunDirError(f"cannot reuse stage {stage!r} from {source.path}: it has not finished there")
        result = source.stage_result(stage)
        root = source.path.absolute()  # where stage_result resolves the run's own paths
        absent = [p for p in _paths_inside(result, root) if not p.exists()]
        if absent:
            names = ", ".join(p.relative_to(root).as_posix() for p in absent)
            how = (f"train it again in that copy, keeping its results, with `sand run --resume {source.path} "
                   "--rebuild-weights`" if stage == RunLayout.train_stage(0) else
                   f"recompute it in that copy with `sand run --resume {source.path} --redo-from {stage}` (which "
                   "redoes the stages after it too)")
            raise RunDirError(f"cannot reuse stage {stage!r} from {source.path}: its output {names} is not there "
                              "(a run copied without its weights, as `sand sweep --export` copies them). Reuse it "
                              f"from the run directory that computed it, or {how}")
        for rel in folders:
            src = source.path / rel
            if src.exists():
                shutil.copytree(src, self.path / rel, dirs_exist_ok=True)
        for old in {str(source.path.resolve()), str(source.path)}:
            result = _rebase(result, old, str(self.path.resolve()))
        if isinstance(result, dict):
            result = {**result, "reused_from": str(source.path)}
        self.mark_done(stage, result, fingerprint if fingerprint is not None else source.fingerprint(stage))


def _mkdir(path: Path, parents: bool, exist_ok: bool, what: str) -> None:
    try:
        path.mkdir(parents=parents, exist_ok=exist_ok)
    except FileExistsError:
        raise RunDirError(f"{path} exists and is not a folder; choose another {what}") from None
    except NotADirectoryError:
        blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), path.parent)
        raise RunDirError(f"cannot create {path}: {blocker} is a file, not a folder; choose another {what}") from None
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise RunDirError(f"cannot create {path}: {exc.strerror}. Choose a writable {what}") from None
        raise


def _paths_inside(value: Any, root: Path) -> list[Path]:
    """The paths under ``root`` that a stage result names (its strings that are such paths)."""
    if isinstance(value, str) and value.startswith(str(root) + os.sep):
        return [Path(value)]
    if isinstance(value, dict):
        return [p for v in value.values() for p in _paths_inside(v, root)]
    if isinstance(value, list):
        return [p for v in value for p in _paths_inside(v, root)]
    return []


def _rebase(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str) and (value == old or value.startswith(old + os.sep)):
        return new + value[len(old):]
    if isinstance(value, dict):
        return {k: _rebase(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebase(v, old, new) for v in value]
    return value
