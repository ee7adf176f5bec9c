"""Conformance checks for :class:`~sand_framework.components.Environment` implementations.

Shipped for third-party environment authors: run ::

    from sand_framework.testing.conformance import assert_conforms
    assert_conforms(MyEnv())

in a test. The checks use only the ``Environment`` ABC and cover what the SAND
engine silently relies on: rewards in [0, 1], an expert that actually
succeeds, branching by reset + replay that reproduces the recorded
observations (otherwise rollouts critique the wrong state), independent
clones (parallel executors) and robustness to junk actions (a sampled model
reply can be anything).

Every check reports instead of raising, so one run lists every problem.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from sand_framework.components import Environment
from sand_framework.errors import ReplayMismatch
from sand_framework.types import StepResult

GARBAGE_ACTIONS: tuple[str, ...] = ("xyzzy ###", "", "x" * 5000, "\x00\n\t}{", "Action: Action:")
"""Actions a sampled model reply can produce; none may crash an environment."""


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


class _Checker:
    def __init__(self, env: Environment, limit: int):
        self.env = env
        self.limit = limit
        self.failures: list[str] = []

    def fail(self, check: str, msg: str) -> None:
        self.failures.append(f"{check}: {msg}")

    def guard(self, check: str, fn: Callable[[], Any], default: Any = None) -> Any:
        """Run ``fn``; an exception becomes a failure of ``check``."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - every exception is a conformance failure
            self.fail(check, _err(exc))
            return default

    # ------------------------------------------------------------------

    def step_result(self, check: str, res: Any, action: str, task: str) -> bool:
        """Type and range checks on one step's result; True when it is well formed."""
        ok = True
        check = f"{check}: {task}"  # failures read "<check>: <task>: <what>" like the others
        if not isinstance(res, StepResult):
            self.fail(check, f"step({action[:40]!r}) returned {type(res).__name__}, not StepResult")
            return False
        if not isinstance(res.observation, str):
            self.fail(check, f"step({action[:40]!r}).observation is {type(res.observation).__name__}, not str")
            ok = False
        r = res.reward
        if isinstance(r, bool) or not isinstance(r, (int, float)) or math.isnan(r) or not 0.0 <= r <= 1.0:
            self.fail(check, f"step({action[:40]!r}).reward = {r!r} is not a number in [0, 1]")
            ok = False
        for name in ("done", "success", "valid"):
            if not isinstance(getattr(res, name), bool):
                self.fail(check, f"step({action[:40]!r}).{name} = {getattr(res, name)!r} is not a bool")
                ok = False
        return ok

    def splits(self, split_tasks: dict[str, list[str]] | None) -> dict[str, list[str]]:
        if split_tasks is None:
            names = self.guard("splits", self.env.splits, default=[]) or []
            split_tasks = {}
            for s in names:
                split_tasks[s] = self.guard(f"tasks[{s}]", lambda s=s: self.env.tasks(s), default=[])
        for split, ids in split_tasks.items():
            if not isinstance(ids, list) or not ids:
                self.fail(f"tasks[{split}]", f"split {split!r} has no tasks (got {ids!r:.80})")
                split_tasks[split] = []
            elif not all(isinstance(t, str) and t for t in ids):
                self.fail(f"tasks[{split}]", "task ids must be non-empty strings")
            elif len(set(ids)) != len(ids):
                self.fail(f"tasks[{split}]", "duplicate task ids")
        train = set(split_tasks.get("train", []))
        for split, ids in split_tasks.items():
            if split != "train" and train & set(ids):
                self.fail("splits disjoint", f"{len(train & set(ids))} task(s) of {split!r} are also in 'train'")
        return split_tasks

    def run_expert(self, task: str) -> tuple[list[str], str, list[StepResult]] | None:
        """Reset, run the expert; check it succeeds within max_steps. Returns what was observed."""
        env = self.env
        try:
            actions = env.expert_actions(task)
        except NotImplementedError:
            return None
        except Exception as exc:  # noqa: BLE001
            self.fail("expert", f"{task}: expert_actions raised {_err(exc)}")
            return None
        if not isinstance(actions, list) or not actions or not all(isinstance(a, str) for a in actions):
            self.fail("expert", f"{task}: expert_actions must be a non-empty list of str, got {actions!r:.80}")
            return None
        cap = self.guard("max_steps", lambda: env.max_steps(task))
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
            self.fail("max_steps", f"{task}: max_steps = {cap!r} is not a positive int")
            cap = None
        elif len(actions) > cap:
            self.fail("expert", f"{task}: expert has {len(actions)} actions, more than max_steps = {cap}")
        text = self.guard("reset", lambda: env.reset(task))
        if text is None:
            return None
        results: list[StepResult] = []
        for i, action in enumerate(actions):
            try:
                res = env.step(action)
            except Exception as exc:  # noqa: BLE001
                self.fail("step", f"{task}: step({action[:40]!r}) raised {_err(exc)}")
                return None
            if not self.step_result("step", res, action, task):
                return None
            results.append(res)
            if res.done and i < len(actions) - 1:
                self.fail("expert", f"{task}: episode done at step {i} of {len(actions)} expert actions")
                return None
        last = results[-1]
        if not (last.success and last.done and abs(last.reward - 1.0) < 1e-9):
            self.fail(
                "expert",
                f"{task}: expert did not succeed (reward={last.reward!r}, success={last.success!r}, "
                f"done={last.done!r})",
            )
        if not all(r.valid for r in results):
            self.fail("expert", f"{task}: the environment marks some expert actions invalid")
        return actions, text, results

    def branching(self, task: str, actions: list[str], text: str, results: list[StepResult]) -> None:
        """Reset + replay of every expert prefix reproduces the recorded observations."""
        env = self.env
        observed = [r.observation for r in results]
        again = self.guard("reset deterministic", lambda: env.reset(task))
        if again is not None and again != text:
            self.fail("reset deterministic", f"{task}: two resets returned different task texts")
        for t in range(len(actions) + 1):
            try:
                out = env.replay(task, actions[:t], expected=observed[:t])
            except ReplayMismatch as exc:
                self.fail("branching", f"{task}: replay of prefix {t} raised ReplayMismatch: {exc}"[:400])
                return
            except Exception as exc:  # noqa: BLE001
                self.fail("branching", f"{task}: replay of prefix {t} raised {_err(exc)}")
                return
            got = [getattr(r, "observation", None) for r in out]
            if len(got) != t or any(g is None or g.strip() != o.strip() for g, o in zip(got, observed)):
                self.fail("branching", f"{task}: replay of prefix {t} returned different observations")
                return

    def clone(self, task: str, actions: list[str], results: list[StepResult]) -> None:
        """A clone runs the same episode identically, without disturbing the original."""
        env = self.env
        observed = [r.observation for r in results]
        other = self.guard("clone", env.clone)
        if other is None:
            return
        try:
            if other is env:
                self.fail("clone", "clone() returned the same object")
                return
            if not isinstance(other, Environment):
                self.fail("clone", f"clone() returned {type(other).__name__}, not an Environment")
                return
            env.reset(task)
            other.reset(task)
            # Interleave: the clone runs the whole expert first, then the original continues.
            first = env.step(actions[0])
            clone_obs = [other.step(a).observation for a in actions]
            rest = [env.step(a).observation for a in actions[1:]]
            if [first.observation] + rest != observed:
                self.fail("clone", f"{task}: stepping a clone changed the original's episode")
            if clone_obs != observed:
                self.fail("clone", f"{task}: a clone observes something different on the same actions")
        except Exception as exc:  # noqa: BLE001
            self.fail("clone", f"{task}: {_err(exc)}")
        finally:
            self.guard("close", other.close)

    def garbage(self, task: str, actions: list[str] | None, results: list[StepResult] | None) -> None:
        """Junk actions return a StepResult and do not poison later episodes."""
        env = self.env
        if self.guard("garbage action", lambda: env.reset(task)) is None:
            return
        for junk in GARBAGE_ACTIONS:
            try:
                res = env.step(junk)
            except Exception as exc:  # noqa: BLE001
                shown = f"{junk[:20]!r}{'...' if len(junk) > 20 else ''}"
                self.fail("garbage action", f"{task}: step({shown}) raised {_err(exc)}")
                continue
            if not self.step_result("garbage action", res, junk, task):
                continue
            if res.done:
                break
        if actions and results:
            try:
                env.replay(task, actions, expected=[r.observation for r in results])
            except Exception as exc:  # noqa: BLE001
                self.fail("garbage action", f"{task}: after junk actions, the expert replay failed: {_err(exc)}")


def check_environment(
    env: Environment, split_tasks: dict[str, list[str]] | None = None, *, limit: int = 3
) -> list[str]:
    """Check ``env`` against the Environment contract; return the failed checks (empty = conforms).

    ``split_tasks`` maps split name to task ids (default: ``env.tasks(s)`` for
    each of ``env.splits()``); the per-task checks run on the first ``limit``
    tasks of each split. Environments without an expert skip the expert,
    branching and clone checks (the engine's expert loading will then fail
    loudly on its own).
    """
    c = _Checker(env, limit)
    instr = c.guard("instruction", env.instruction)
    if not isinstance(instr, str) or not instr.strip():
        c.fail("instruction", f"instruction() must return non-empty text, got {instr!r:.80}")
    splits = c.splits(dict(split_tasks) if split_tasks is not None else None)
    seen: set[str] = set()
    cloned = False
    for split, ids in splits.items():
        for task in ids[:limit]:
            if task in seen:
                continue
            seen.add(task)
            text = c.guard("reset", lambda t=task: env.reset(t))
            if text is None:
                continue
            if not isinstance(text, str) or not text.strip():
                c.fail("reset", f"{task}: reset() must return non-empty text, got {text!r:.80}")
                continue
            run = c.run_expert(task)
            if run is not None:
                actions, text, results = run
                c.branching(task, actions, text, results)
                if not cloned:  # one clone per check run: clones may start processes (a JVM, a server)
                    c.clone(task, actions, results)
                    cloned = True
                c.garbage(task, actions, results)
            else:
                c.garbage(task, None, None)
    return c.failures


def assert_conforms(env: Environment, **kwargs: Any) -> None:
    """Raise AssertionError listing every failed check (see :func:`check_environment`)."""
    failures = check_environment(env, **kwargs)
    if failures:
        name = getattr(env, "name", type(env).__name__)
        listing = "\n".join(f"  - {f}" for f in failures)
        raise AssertionError(f"environment {name!r} fails {len(failures)} conformance check(s):\n{listing}")


__all__ = ["GARBAGE_ACTIONS", "assert_conforms", "check_environment"]
