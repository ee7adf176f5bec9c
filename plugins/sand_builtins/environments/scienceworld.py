"""ScienceWorld (Wang et al., 2022) as a SAND environment, on the ETO/MPO protocol.

ScienceWorld simulates 30 elementary-science tasks (boil water, grow a plant,
test conductivity, ...) in a Scala engine reached through py4j. The
``scienceworld`` package (install extra ``scienceworld``) ships the jar and
generates every task variation itself, so no game data is needed; a Java
runtime (>= 11) must be on ``PATH``.

Task ids
    ETO's ``f"{taskname2id[task_name]}_{variation_idx}"``, e.g. ``0_12`` is
    variation 12 of ``task-1-boil``. Ids therefore match ETO's (and SAND's)
    trajectory files. The id map and splits ship with this package under
    ``data/sciworld/`` (see ``PROVENANCE.md`` there).

Splits (ETO's index files)
    ``train``  ``train_indices.json`` (1,483 tasks);
    ``seen``   ``dev_indices.json`` (194; ETO's "test-seen");
    ``unseen`` ``test_indices.json`` (211; ETO's "test-unseen").
    Note: 54 ``seen`` tasks also occur in ``train`` -- this is ETO's data and is
    kept as is, so figures stay comparable with the papers.

Episode
    ``reset`` loads the task with ETO's ``"easy"`` simplifications (teleport,
    open doors, self-watering pots, no electrical actions outside the
    electrical tasks), makes ScienceWorld's usual first move ``look around``
    and returns ScienceWorld's task description (``Task Description:\n...``,
    ETO's ``info['taskDesc']``) followed by that look. Each ``step`` counts
    towards the per-task cap from ETO's ``max_steps.json``.

Reward (ETO)
    The maximum score seen during the episode / 100, clipped to [0, 1]. A
    negative score (ScienceWorld's -100 for a failed task, e.g. focusing on the
    wrong object) ends the episode with reward 0 (``keep_max_on_failure`` keeps
    the maximum instead, as ETO's evaluation loop does). ``success`` means the
    task was completed (score 100). See :class:`ScoreBook`.

Expert
    ScienceWorld's own gold action sequence for the variation (generated at
    load time with the same simplifications), cleaned: it ends at the action
    that completes the task (gold paths often go on, e.g. a trailing
    ``wait1``), and with ``shorten_expert`` each walk through doors
    (``open door to kitchen``, ``go to kitchen``, ...) becomes one
    ``teleport to kitchen``, as in ETO's instruction and examples. Each variant
    is replayed and kept only if it succeeds; otherwise the raw gold path is
    returned (``sand env check`` reports such tasks). With ``expert_thoughts``
    (default) each gold action gets one short ReAct thought built from the
    task's goal and the action type (:mod:`~sand_builtins.environments.scienceworld_thoughts`).

Speed and robustness
    Every instance owns one JVM (heap capped by ``java_heap``) that is started
    on first use and kept warm; ``clone()`` builds a new instance with its own
    JVM; ``close()`` shuts it down and reaps it. Steps go through the server's
    raw ``step``/``getScore`` calls, skipping the valid-action listing that
    ``ScienceWorldEnv.step`` builds on every call (5-50x slower). Branching
    is reset + replay (ScienceWorld has no snapshot API). A JVM that died
    (killed, OOM) is detected on the next call, restarted, and the episode
    replayed transparently; ``faults_survived`` counts such restarts.

Determinism (measured)
    Observations are the same across resets and JVMs except one thing:
    objects with the same name (three "wood cup"s) are listed in a different
    order after each reset; :func:`canonical_listing` orders such ties so a
    replay reproduces the recorded text. In the electrical tasks
    (power-component, conductivity) the score may rise one tick earlier or
    later between runs of the same actions, with identical observations.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable, Iterable

from sand_builtins.environments import scienceworld_thoughts as sw_thoughts
from sand_builtins.environments.jvm import reap_java
from sand_framework import hookimpl
from sand_framework.components import Environment
from sand_framework.errors import EnvironmentUnavailable, ReplayMismatch
from sand_framework.types import Step, StepResult

INSTALL_HINT = (
    "the scienceworld environment needs the 'scienceworld' package (1.2.3, the jar is inside the wheel) "
    "and a Java runtime (>= 11) on PATH: pip install 'sand-framework[scienceworld]'"
)
EPISODE_OVER = "The episode is over."
UNKNOWN_ACTION = "No known action matches that input."
"""ScienceWorld's reply to an action its parser does not understand."""
MAX_ACTION_CHARS = 300
"""Longer (or non-printable) inputs are answered with UNKNOWN_ACTION without a JVM call."""

_MAX_VARIATIONS: dict[str, int] = {}
"""Task name -> number of variations (asked from the jar once per process)."""
_SPLIT_FILES = {"train": "train_indices.json", "seen": "dev_indices.json", "unseen": "test_indices.json"}
_ENV_LOCK = threading.Lock()
"""Guards the brief JAVA_TOOL_OPTIONS change while a JVM is launched (py4j passes no per-process env)."""


# ---------------------------------------------------------------------- data


@functools.lru_cache(maxsize=None)
def _data_file(name: str) -> Any:
    ref = resources.files("sand_builtins.environments").joinpath("data", "sciworld", name)
    return json.loads(ref.read_text(encoding="utf-8"))


def taskname2id() -> dict[str, int]:
    """ETO's task name -> integer id map (29 names, id 5 unused)."""
    return dict(_data_file("taskname2id.json"))


@functools.lru_cache(maxsize=None)
def _id2taskname() -> dict[str, str]:
    return {str(v): k for k, v in _data_file("taskname2id.json").items()}


def split_pairs(split: str) -> list[tuple[str, int]]:
    """``(task_name, variation)`` pairs of a split, in ETO's file order."""
    if split not in _SPLIT_FILES:
        raise ValueError(f"scienceworld: unknown split {split!r} (known: {', '.join(_SPLIT_FILES)})")
    return [(str(n), int(v)) for n, v in _data_file(_SPLIT_FILES[split])]


def make_task_id(task_name: str, variation: int) -> str:
    ids = _data_file("taskname2id.json")
    if task_name not in ids:
        raise ValueError(f"scienceworld: task name {task_name!r} is not in ETO's taskname2id map")
    return f"{ids[task_name]}_{int(variation)}"


def parse_task_id(task_id: str) -> tuple[str, int]:
    """``"0_12"`` -> ``("task-1-boil", 12)``; ValueError saying what is wrong."""
    fmt = "expected '<task number>_<variation>' as in ETO, e.g. '0_12' (task-1-boil, variation 12)"
    if not isinstance(task_id, str):
        raise ValueError(f"bad task id {task_id!r}: not a string; {fmt}")
    head, sep, var = task_id.strip().partition("_")
    if not sep or not head.isdigit() or not var.isdigit():
        raise ValueError(f"bad task id {task_id!r}: {fmt}")
    name = _id2taskname().get(str(int(head)))
    if name is None:
        known = ", ".join(sorted(_id2taskname(), key=int))
        raise ValueError(f"bad task id {task_id!r}: unknown task number {head} (known: {known})")
    return name, int(var)


# -------------------------------------------------------------------- reward


@dataclass
class ScoreBook:
    """Reward bookkeeping for one episode, from ScienceWorld's 0-100 scores.

    ``add(score)`` after every step. ``reward`` is the maximum score seen / 100
    clipped to [0, 1]; a negative score fails the episode: ``done``, and the
    reward drops to 0 unless ``keep_max_on_failure``. ``success`` is a score of
    100 (the task completed).
    """

    keep_max_on_failure: bool = False
    best: float = 0.0
    failed: bool = False
    success: bool = False

    def add(self, score: float, completed: bool = False) -> None:
        if self.failed or self.success:
            return
        score = float(score)
        if score < 0:
            self.failed = True
            return
        self.best = max(self.best, score)
        if score >= 100:
            self.success = True

    @property
    def done(self) -> bool:
        return self.failed or self.success

    @property
    def reward(self) -> float:
        if self.failed and not self.keep_max_on_failure:
            return 0.0
        return min(1.0, max(0.0, self.best / 100.0))


def episode_reward(scores: Iterable[float], keep_max_on_failure: bool = False) -> tuple[float, bool, bool]:
    """``(reward, done, success)`` after a recorded score sequence (0-100, one per step)."""
    book = ScoreBook(keep_max_on_failure)
    for s in scores:
        book.add(s)
    return book.reward, book.done, book.success


# ------------------------------------------------------------------- prompts

_ROOMS = "kitchen, foundry, workshop, bathroom, outside, living room, bedroom, greenhouse, art studio, hallway"
_ACTIONS = """open OBJ: open a container
close OBJ: close a container
activate OBJ: activate a device
deactivate OBJ: deactivate a device
connect OBJ to OBJ: connect electrical components
disconnect OBJ: disconnect electrical components
use OBJ [on OBJ]: use a device/item
look around: describe the current room
examine OBJ: describe an object in detail
look at OBJ: describe a container's contents
read OBJ: read a note or book
move OBJ to OBJ: move an object to a container
pick up OBJ: move an object to the inventory
pour OBJ into OBJ: pour a liquid into a container
mix OBJ: chemically mix a container
teleport to LOC: teleport to a specific room
focus on OBJ: signal intent on a task object
wait: task no action for 10 steps
wait1: task no action for a step"""


_KEY_RE = re.compile(r"^\s*(?:a |an |the )?([^(.,:]*)")


def _item_key(item: str) -> str:
    """An object listing entry's name (``"a wood cup (containing red paint)"`` -> ``"wood cup"``)."""
    m = _KEY_RE.match(item)
    return m.group(1).strip() if m else item


def _tie_sorted(items: list[str]) -> list[str]:
    """Sort runs of adjacent items with the same name by their full text; everything else keeps its place."""
    out, i = [], 0
    while i < len(items):
        j = i + 1
        while j < len(items) and _item_key(items[j]) == _item_key(items[i]):
            j += 1
        out.extend(sorted(items[i:j]))
        i = j
    return out


def _split_top(text: str) -> list[str] | None:
    """Split at ", " outside parentheses; None when parentheses do not balance."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                return None
        elif ch == "," and depth == 0 and text.startswith(", ", k):
            parts.append(text[start:k])
            start = k + 2
    return parts + [text[start:]] if depth == 0 else None


def canonical_listing(observation: str) -> str:
    """Make ScienceWorld's object listings deterministic.

    ScienceWorld lists a room's or container's contents sorted by name, but
    objects with the same name (three "wood cup"s with different paints) come
    in a different order after every reset, so replaying a prefix would not
    reproduce the recorded observation. Only such ties are reordered (by their
    full text), in tab-indented listings and in inline ``... is: a, b, c.``
    lists; everything else is left byte for byte as ScienceWorld wrote it.
    """
    lines = observation.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("\t"):
            j = i
            while j < len(lines) and lines[j].startswith("\t"):
                j += 1
            out.extend("\t" + x for x in _tie_sorted([line[1:] for line in lines[i:j]]))
            i = j
        else:
            out.append(lines[i])
            i += 1
    return "\n".join(_canonical_inline(line) for line in out)


def _canonical_inline(line: str) -> str:
    if ", " not in line:
        return line
    # "a table. On the table is: a jug (containing nothing), a wood cup (...)." -- each "is: ..." part.
    pieces = re.split(r"(\bis: |\bare: )", line)
    if len(pieces) < 3:
        return line
    rebuilt = [pieces[0]]
    for k in range(1, len(pieces), 2):
        body = pieces[k + 1]
        end = body.rfind(".")
        head, tail = (body[:end], body[end:]) if end > 0 else (body, "")
        parts = _split_top(head)
        if parts is not None and len(parts) > 1:
            head = ", ".join(_tie_sorted(parts))
        rebuilt += [pieces[k], head + tail]
    return "".join(rebuilt)


def _is_electrical(task_name: str) -> bool:
    return "power-component" in task_name or "conductivity" in task_name


def _teleport_allowed(simplifications: str) -> bool:
    return simplifications == "easy" or "teleportAction" in simplifications.split(",")


def shorten_gold_path(actions: list[str]) -> list[str]:
    """Collapse each run of walking actions into one ``teleport to <last room reached>``.

    ScienceWorld's gold paths walk room to room (``open door to kitchen``,
    ``go to kitchen``, ``open door to outside``, ``go to outside``) even when
    teleporting is allowed; ETO's instruction and examples teleport. A run of
    ``open door to``/``go to`` actions becomes one teleport to the room of its
    last ``go to``; a run without a ``go to`` is kept as is. Callers verify
    that the result still succeeds.
    """
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        rooms = [a[len("go to "):] for a in run if a.startswith("go to ")]
        out.extend([f"teleport to {rooms[-1]}"] if rooms else run)
        run.clear()

    for action in actions:
        if action.startswith(("open door to ", "go to ")):
            run.append(action)
        else:
            flush()
            out.append(action)
    flush()
    return out


def _import_scienceworld() -> Any:
    try:
        import scienceworld  # noqa: F401
        from scienceworld import ScienceWorldEnv
    except ImportError as exc:
        raise EnvironmentUnavailable(INSTALL_HINT) from exc
    return ScienceWorldEnv


def _infer_task(name: str) -> str:
    """Old ``task-N-name`` spelling -> ScienceWorld 1.2 name (``task-1-boil`` -> ``boil``)."""
    from scienceworld.utils import infer_task

    return infer_task(name)


class ScienceWorldEnv(Environment):
    """ScienceWorld tasks with ETO's splits, ids, step caps and reward; one warm JVM per instance."""

    name = "scienceworld"
    description = "ScienceWorld (ETO splits: 1483 train / 194 seen / 211 unseen); reward = max score / 100."

    @dataclass
    class Params:
        simplifications: str = "easy"
        """ScienceWorld simplifications; ETO uses ``easy`` (teleport, open doors/containers, ...)."""
        initial_look: bool = True
        """Append the first ``look around`` to the task text (False: the task description alone, as ETO)."""
        max_steps: int = 0
        """Step cap for every task; 0 = ETO's per-task cap from max_steps.json."""
        default_max_steps: int = 100
        """Cap for the five tasks in taskname2id that have no max_steps.json entry (in no split)."""
        max_invalid_streak: int = 0
        """End the episode after this many unparsable actions in a row (e.g. 10); 0 = never."""
        keep_max_on_failure: bool = False
        """On a failed task (score < 0) keep the best score as reward (ETO's eval loop) instead of 0."""
        java_heap: str = "768m"
        """JVM heap cap (-Xmx) for each instance's JVM, unless JAVA_TOOL_OPTIONS already sets one; '' = none."""
        max_restarts: int = 3
        """Restarts of a dead JVM tried per call before giving up."""
        shorten_expert: bool = True
        """Replace the gold path's walks (``open door to X``, ``go to X``, ...) by ``teleport to X`` where the
        simplifications allow teleporting; kept only if the shortened path still succeeds (verified)."""
        expert_thoughts: bool = True
        """Give every expert step a short ReAct thought built from the task's goal and the action type
        (:func:`~sand_builtins.environments.scienceworld_thoughts.expert_thought`); false: empty thoughts,
        as before this option existed (runs made then are reproduced with false)."""

    def __init__(self, params: Any = None):
        super().__init__(params)
        p = self.params
        if p.max_steps < 0 or p.default_max_steps < 1 or p.max_invalid_streak < 0 or p.max_restarts < 0:
            raise ValueError("scienceworld: max_steps, max_invalid_streak and max_restarts must be >= 0, "
                             "default_max_steps >= 1")
        self._sw: Any = None
        self._loaded: tuple[str, int, bool] | None = None
        self._experts: dict[str, list[str]] = {}
        self.faults_survived = 0
        """How many times a dead JVM was restarted and the episode replayed."""
        self._task: tuple[str, int] | None = None
        self._task_id: str | None = None
        self._history: list[str] = []
        """Every action given to step() in this episode (for restoring it)."""
        self._sent: list[tuple[str, str]] = []
        """(action, observation) of each action forwarded to the JVM (for replay after a crash)."""
        self._reset_episode_state()

    # ------------------------------------------------------------------ JVM

    def _start_jvm(self) -> Any:
        """Launch this instance's JVM (~1.3 s) with the heap cap; raise EnvironmentUnavailable on failure."""
        SW = _import_scienceworld()
        heap = self.params.java_heap
        with _ENV_LOCK:
            old = os.environ.get("JAVA_TOOL_OPTIONS")
            if heap and "-Xmx" not in (old or ""):
                os.environ["JAVA_TOOL_OPTIONS"] = f"{old or ''} -Xmx{heap}".strip()
            try:
                sw = SW(envStepLimit=10**9)  # we count steps ourselves
            except Exception as exc:  # noqa: BLE001 - java missing, port trouble, ...
                raise EnvironmentUnavailable(
                    f"scienceworld could not start its JVM ({type(exc).__name__}: {exc}); is `java` (>= 11) on PATH? "
                    + INSTALL_HINT
                ) from exc
            finally:
                if old is None:
                    os.environ.pop("JAVA_TOOL_OPTIONS", None)
                else:
                    os.environ["JAVA_TOOL_OPTIONS"] = old
        return sw

    def _env(self) -> Any:
        if self._sw is None:
            self._sw = self._start_jvm()
            self._loaded = None
        return self._sw

    @property
    def java_pid(self) -> int | None:
        """Process id of this instance's JVM (None before first use)."""
        proc = self._java_process()
        return proc.pid if proc is not None else None

    def _java_process(self) -> Any:
        sw = self._sw
        gw = getattr(sw, "_gateway", None) if sw is not None else None
        return getattr(gw, "java_process", None)

    def _jvm_dead(self) -> bool:
        proc = self._java_process()
        return proc is not None and proc.poll() is not None

    def _kill_jvm(self) -> None:
        sw, self._sw, self._loaded = self._sw, None, None
        if sw is None:
            return
        proc = getattr(getattr(sw, "_gateway", None), "java_process", None)
        if proc is not None and proc.poll() is None:
            try:
                sw.close()  # gateway shutdown + newline on stdin: the JVM exits by itself
            except Exception:  # noqa: BLE001 - a broken gateway is closed already
                pass
        else:
            try:
                sw._gateway.shutdown()
            except Exception:  # noqa: BLE001
                pass
        sw.close = lambda: None  # ScienceWorldEnv.__del__ calls close() again
        reap_java(proc)

    def _call(self, op: Callable[[Any], Any]) -> Any:
        """Run ``op(ScienceWorldEnv)``; a dead JVM is restarted and the episode replayed, then ``op`` retried."""
        from py4j.protocol import Py4JError, Py4JJavaError

        for attempt in range(self.params.max_restarts + 1):
            if self._jvm_dead():
                self._recover()
            try:
                return op(self._env())
            except Py4JJavaError:
                raise  # the JVM is alive and threw: a real error, not a crash
            except (Py4JError, ConnectionError, OSError):
                if attempt == self.params.max_restarts:
                    raise
                self._recover()
        raise AssertionError("unreachable")

    def _recover(self) -> None:
        """Replace a dead JVM by a fresh one and bring it back to the current episode's state."""
        self._kill_jvm()
        self.faults_survived += 1
        if self._task is None:
            return
        name, var = self._task
        sw = self._env()
        self._load(sw, name, var, gold=False)
        first = canonical_listing(str(sw.server.step("look around")))
        if first != self._first_look:
            raise ReplayMismatch(f"scienceworld: after a JVM restart, task {self._task_id!r} looks different")
        for i, (action, expected) in enumerate(self._sent):
            obs = self._raw_step(sw, action)[0]
            if obs != expected:
                raise ReplayMismatch(
                    f"scienceworld: after a JVM restart, replay of task {self._task_id!r} diverged at step {i} "
                    f"({action!r})"
                )

    def close(self) -> None:
        """Shut the JVM down and reap it (no java process outlives the instance). Idempotent."""
        self._task = None
        self._kill_jvm()

    def clone(self) -> "ScienceWorldEnv":
        """A new instance (its own JVM, started lazily) with a copy of the params."""
        return type(self)(dataclasses.replace(self.params))

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    # ---------------------------------------------------------------- tasks

    def tasks(self, split: str) -> list[str]:
        return [make_task_id(n, v) for n, v in split_pairs(split)]

    def task_id_from_eto(self, eto_id: str, trajectory: Any = None) -> str:
        """ETO's ids are this environment's ids; validated and made canonical (``"13_007"`` -> ``"13_7"``)."""
        return make_task_id(*parse_task_id(str(eto_id)))

    def max_steps(self, task_id: str) -> int:
        name, _ = parse_task_id(task_id)
        if self.params.max_steps:
            return self.params.max_steps
        return int(_data_file("max_steps.json").get(name, self.params.default_max_steps))

    # ---------------------------------------------------------------- agent

    def instruction(self) -> str:
        simpl = self.params.simplifications
        easy = simpl == "easy"
        lines = [
            "You are a helpful assistant to do some scientific experiment in an environment.",
            f"In the environment, there are several rooms: {_ROOMS}",
            "You should explore the environment and find the items you need to complete the experiment.",
        ]
        if easy or "teleportAction" in simpl:
            lines.append("You can teleport to any room in one step.")
        if easy or "openContainers" in simpl:
            lines.append("All containers in the environment have already been opened, "
                         "you can directly get items from the containers.")
        lines += ["", "The available actions are:", _ACTIONS, "",
                  "If the environment asks which object you meant, answer with the number of the option.",
                  "Every turn, reply in exactly this format:",
                  "Thought: <your reasoning about the current situation and plan>",
                  "Action: <one action>"]
        return "\n".join(lines)

    def _reset_episode_state(self) -> None:
        self._steps = 0
        self._invalid_streak = 0
        self._book = ScoreBook(self.params.keep_max_on_failure)
        self._done = False
        self._first_look = ""

    def _load(self, sw: Any, name: str, var: int, gold: bool) -> None:
        """Load the variation, or reset it when it is already loaded the same way.

        A reset of a task loaded with a gold path re-generates the path (slow), so that case loads afresh.
        """
        if self._loaded == (name, var, gold):
            sw.server.reset()
        else:
            sw.load(_infer_task(name), var, self.params.simplifications, generateGoldPath=gold)
            self._loaded = (name, var, gold)

    def reset(self, task_id: str) -> str:
        name, var = parse_task_id(task_id)
        self._task = None  # a crash during reset needs no replay
        self._history, self._sent = [], []
        self._reset_episode_state()

        def start(sw: Any) -> tuple[str, str]:
            self._check_variation(sw, name, var, task_id)
            self._load(sw, name, var, gold=False)
            look = canonical_listing(str(sw.server.step("look around")))
            return str(sw.server.freeActionTaskDesc()), look

        desc, look = self._call(start)
        self._task, self._task_id, self._first_look = (name, var), task_id, look
        desc = desc.strip()
        look = canonical_listing(look.strip())
        return f"{desc}\n{look}" if self.params.initial_look else desc

    def _check_variation(self, sw: Any, name: str, var: int, task_id: str) -> None:
        """ScienceWorld silently accepts any variation number; out-of-range ones are an error here."""
        if name not in _MAX_VARIATIONS:
            _MAX_VARIATIONS[name] = int(sw.server.getTaskMaxVariations(_infer_task(name)))
        if var >= _MAX_VARIATIONS[name]:
            raise ValueError(f"bad task id {task_id!r}: {name} has variations 0..{_MAX_VARIATIONS[name] - 1}, "
                             f"not {var}")

    @staticmethod
    def _raw_step(sw: Any, action: str) -> tuple[str, float]:
        """The server's own step: no valid-action listing (the slow part of ScienceWorldEnv.step)."""
        obs = canonical_listing(str(sw.server.step(action)))
        score = round(100 * float(sw.server.getScore()))
        return obs, score

    @staticmethod
    def _canonical(action: Any) -> str | None:
        """Whitespace-collapsed action, or None for input the parser should never see."""
        if not isinstance(action, str):
            return None
        text = " ".join(action.split())
        if not text or len(text) > MAX_ACTION_CHARS or not text.isprintable():
            return None
        return text

    def step(self, action: str) -> StepResult:
        if self._task is None:
            raise RuntimeError("scienceworld: step() before reset()")
        if self._done:
            return StepResult(EPISODE_OVER, self._book.reward, True, self._book.success, valid=False)
        self._steps += 1
        self._history.append(action)
        text = self._canonical(action)
        if text is None:
            obs, valid = UNKNOWN_ACTION, False
        else:
            obs, score = self._call(lambda sw: self._raw_step(sw, text))
            self._sent.append((text, obs))
            valid = not obs.startswith(UNKNOWN_ACTION)
            self._book.add(score)
        self._invalid_streak = 0 if valid else self._invalid_streak + 1
        p = self.params
        self._done = (
            self._book.done
            or self._steps >= self.max_steps(self._task_id)
            or (p.max_invalid_streak > 0 and self._invalid_streak >= p.max_invalid_streak)
        )
        return StepResult(obs.strip(), self._book.reward, self._done, self._book.success, valid)

    # --------------------------------------------------------------- expert

    def expert_actions(self, task_id: str) -> list[str]:
        """ScienceWorld's gold path, teleport-shortened and cut at success (verified by replay).

        An episode in progress is restored afterwards.
        """
        name, var = parse_task_id(task_id)
        key = f"{name}:{var}"
        if key not in self._experts:
            ongoing = (self._task_id, list(self._history), self._task) if self._task is not None else None
            self._task = None
            try:
                self._experts[key] = self._compute_expert(name, var)
            finally:
                if ongoing is not None:
                    self._restore(ongoing[0], ongoing[1])
        return list(self._experts[key])

    def expert_thought(self, task_id: str, task: str, history: list[Step], action: str) -> str:
        """A templated one-sentence reason for a gold action, from the task's goal and the action type."""
        if not self.params.expert_thoughts:
            return ""
        return sw_thoughts.expert_thought(task, history, action)

    def _compute_expert(self, name: str, var: int) -> list[str]:
        """The shortest of (teleport-shortened gold, gold) that still succeeds, cut at success."""

        def gold(sw: Any) -> list[str]:
            self._check_variation(sw, name, var, f"{name}:{var}")
            self._load(sw, name, var, gold=True)
            return [str(a) for a in sw.get_gold_action_sequence()]

        raw = self._call(gold)
        candidates = []
        if self.params.shorten_expert and _teleport_allowed(self.params.simplifications):
            candidates.append(shorten_gold_path(raw))
        candidates.append(raw)
        # Electrical tasks score a tick early or late from run to run (observations are identical), so
        # the cut goes after the latest success seen in a few runs; other tasks are deterministic.
        runs = 3 if _is_electrical(name) else 1
        for path in candidates:
            ends = [self._call(lambda sw, path=path: self._success_index(sw, name, var, path)) for _ in range(runs)]
            if all(e is not None for e in ends):
                return path[: max(ends) + 1]
        return raw  # no variant succeeds: leave it to the caller's checks (`sand env check`) to report

    def _success_index(self, sw: Any, name: str, var: int, actions: list[str]) -> int | None:
        """Index of the action at which ``actions`` completes the task from reset, else None."""
        self._load(sw, name, var, gold=False)
        sw.server.step("look around")
        for i, action in enumerate(actions):
            score = self._raw_step(sw, action)[1]
            if score < 0:
                return None
            if score >= 100:
                return i
        return None

    def _restore(self, task_id: str, actions: list[str]) -> None:
        self.reset(task_id)
        for a in actions:
            self.step(a)


@hookimpl
def sand_register_environments(register):
    register(ScienceWorldEnv)
